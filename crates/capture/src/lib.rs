//! clarion-capture
