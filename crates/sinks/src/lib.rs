//! clarion-sinks
