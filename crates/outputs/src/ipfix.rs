//! IPFIX flow records (`clarion-ipfix`): over UDP, over TCP, or an RFC
//! 5655 file; options ride in the URL's query.

use clarion_records::FlowRecord;
use clarion_sinks::BoxSink;

use crate::{Backend, Destination, Kind, OutputError, Target};

pub const BACKEND: Backend = Backend {
    name: "IPFIX",
    feature: None,
    built: true,
    forms: "FILE.ipfix, ipfix+udp://HOST:PORT, ipfix+tcp://HOST:PORT",
    claims,
    reports: None,
    records: Some(records),
    gpvs: None,
};

fn claims(t: &Target, _: Kind) -> bool {
    matches!(t.scheme(), Some("ipfix+udp" | "ipfix+tcp")) || t.extension() == Some("ipfix")
}

fn records(d: &Destination<FlowRecord>) -> Result<BoxSink<FlowRecord>, OutputError> {
    match clarion_ipfix::open(d.text()) {
        Ok(sink) => Ok(Box::new(sink)),
        Err(e) => Err(OutputError::Backend(Box::new(e))),
    }
}
