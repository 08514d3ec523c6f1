//! The Clarion event language.
pub mod spec;
