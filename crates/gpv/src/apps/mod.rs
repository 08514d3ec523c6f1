//! The three *Flow monitoring apps (§3.6), each a [`crate::GpvApp`]:
//! [`Profiler`] (per-host inter-arrival distributions), [`Classifier`]
//! (per-flow classifier features) and [`MicroBurst`] (which flows sent in
//! a window before a congestion instant). [`app_by_name`] builds one with
//! its defaults, for a command line that binds apps by name.

mod classifier;
mod microburst;
mod profiler;

pub use classifier::{Classifier, FlowFeatures, FIRST_PACKETS};
pub use microburst::{Culprit, MicroBurst, MicroBurstConfig};
pub use profiler::{Log2Histogram, Profiler};

use crate::app::GpvApp;
use crate::GpvError;

/// The names [`app_by_name`] knows.
pub const APP_NAMES: [&str; 3] = ["profiler", "classifier", "microburst"];

/// An app by its name, with its default configuration.
pub fn app_by_name(name: &str) -> Result<Box<dyn GpvApp>, GpvError> {
    match name {
        "profiler" => Ok(Box::new(Profiler::new())),
        "classifier" => Ok(Box::new(Classifier::new())),
        "microburst" => Ok(Box::new(MicroBurst::new(MicroBurstConfig::default()))),
        _ => Err(GpvError::UnknownApp(name.to_string())),
    }
}
