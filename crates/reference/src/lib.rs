//! clarion-reference
