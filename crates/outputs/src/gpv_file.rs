//! The `.gpv` file of GPVs (`clarion-gpv`'s format).

use std::path::Path;

use clarion_gpv::{Gpv, GpvFile};
use clarion_sinks::{BoxSink, SinkError};

use crate::{Backend, Destination, Kind, OutputError, Target};

pub const BACKEND: Backend = Backend {
    name: "GPV",
    feature: None,
    built: true,
    forms: "FILE.gpv",
    claims: |t: &Target, _: Kind| t.extension() == Some("gpv"),
    reports: None,
    records: None,
    gpvs: Some(gpvs),
};

fn gpvs(d: &Destination<Gpv>) -> Result<BoxSink<Gpv>, OutputError> {
    match GpvFile::create(Path::new(d.text())) {
        Ok(f) => Ok(Box::new(f)),
        Err(SinkError::Io { destination, source }) => Err(OutputError::Create { destination, source }),
        Err(e) => Err(OutputError::Backend(Box::new(e))),
    }
}
