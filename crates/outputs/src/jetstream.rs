//! Flow records and reports published to a NATS JetStream stream
//! (`nats://HOST:PORT/STREAM`, `tls://…`; `clarion_nats::stream_sink`
//! has the subjects, the stream and the delivery rule). The host's name,
//! which names its subject, comes from [`Destination::with_host`].

use clarion_nats::{StreamKind, StreamSink};
use clarion_sinks::{BoxSink, JsonLine};

use crate::{Backend, Destination, Kind, OutputError, Target};

pub const BACKEND: Backend = Backend {
    name: "NATS JetStream",
    feature: None,
    built: true,
    forms: "nats://HOST:PORT/STREAM, tls://HOST:PORT/STREAM",
    claims: |t: &Target, _: Kind| {
        t.scheme()
            .is_some_and(clarion_nats::stream_sink::is_stream_scheme)
    },
    reports: Some(open::<clarion_report::Report>),
    records: Some(open::<clarion_records::FlowRecord>),
    gpvs: None,
};

fn open<T: JsonLine + crate::Item>(d: &Destination<T>) -> Result<BoxSink<T>, OutputError> {
    let kind = match T::KIND {
        Kind::Reports => StreamKind::Reports,
        _ => StreamKind::Records,
    };
    let Some(host) = d.host() else {
        return Err(OutputError::Backend(
            format!("{}: a stream's subject names the host; none was given", d.text()).into(),
        ));
    };
    match StreamSink::<T>::open(d.text(), kind, host) {
        Ok(sink) => Ok(Box::new(sink)),
        Err(e) => Err(OutputError::Backend(Box::new(e))),
    }
}
