//! Parquet files of flow records and of GPVs (`clarion-parquet`: arrow
//! and parquet, behind the cargo feature `parquet`).

use crate::{Backend, Kind, Target};

pub const BACKEND: Backend = Backend {
    name: "Parquet",
    feature: Some("parquet"),
    built: cfg!(feature = "parquet"),
    forms: "FILE.parquet",
    claims: |t: &Target, _: Kind| t.extension() == Some("parquet"),
    reports: None,
    records: Some(on::records),
    gpvs: Some(on::gpvs),
};

#[cfg(feature = "parquet")]
mod on {
    use std::path::Path;

    use clarion_gpv::Gpv;
    use clarion_records::FlowRecord;
    use clarion_sinks::BoxSink;

    use crate::{Destination, OutputError};

    pub fn records(d: &Destination<FlowRecord>) -> Result<BoxSink<FlowRecord>, OutputError> {
        match clarion_parquet::create(Path::new(d.text())) {
            Ok(sink) => Ok(Box::new(sink)),
            Err(e) => Err(OutputError::Backend(Box::new(e))),
        }
    }

    pub fn gpvs(d: &Destination<Gpv>) -> Result<BoxSink<Gpv>, OutputError> {
        match clarion_parquet::create_gpvs(Path::new(d.text())) {
            Ok(sink) => Ok(Box::new(sink)),
            Err(e) => Err(OutputError::Backend(Box::new(e))),
        }
    }
}

/// Without the feature the forms stay claimed, and refused naming it.
#[cfg(not(feature = "parquet"))]
mod on {
    pub(crate) use crate::unbuilt as records;
    pub(crate) use crate::unbuilt as gpvs;
}
