//! clarion-engine
