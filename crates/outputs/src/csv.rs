//! CSV flow records (`FILE.csv`): a header line, then one line a record,
//! the columns the JSON line's names in its order (less `schema`), a
//! missing value (no ports, no VLAN) an empty field. No field needs
//! quoting: addresses, numbers, names and Community IDs hold no comma,
//! quote or newline.

use std::fs::File;

use clarion_records::{to_json, FlowRecord};
use clarion_sinks::{BoxSink, Encoded, Encoder, Writer};

use crate::{Backend, Destination, Kind, OutputError, Target};

pub const BACKEND: Backend = Backend {
    name: "CSV",
    feature: None,
    built: true,
    forms: "FILE.csv",
    claims: |t: &Target, _: Kind| t.extension() == Some("csv"),
    reports: None,
    records: Some(open),
    gpvs: None,
};

fn open(d: &Destination<FlowRecord>) -> Result<BoxSink<FlowRecord>, OutputError> {
    let file = File::create(d.text()).map_err(|source| OutputError::Create {
        destination: d.text().to_string(),
        source,
    })?;
    // Every record has every name: any record's JSON gives the columns.
    let any = to_json(&FlowRecord::of_packet(Default::default(), 0, 0, 0));
    let columns: Vec<String> = any
        .as_object()
        .into_iter()
        .flat_map(|o| o.keys())
        .filter(|name| *name != "schema")
        .cloned()
        .collect();
    let mut out = Writer::new(file, d.text());
    // The header even for no record: the file says what it would hold.
    out.write_all(format!("{}\n", columns.join(",")).as_bytes())
        .map_err(|e| OutputError::Backend(Box::new(e)))?;
    Ok(Box::new(Encoded::with(out, Csv { columns })))
}

/// A record's line: its JSON line's values, in the header's columns.
struct Csv {
    columns: Vec<String>,
}

impl Encoder<FlowRecord> for Csv {
    fn encode(&mut self, record: &FlowRecord, out: &mut Vec<u8>) -> Result<(), String> {
        let json = to_json(record);
        for (i, name) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            let value = &json[name.as_str()];
            match value.as_str() {
                Some(s) => out.extend_from_slice(s.as_bytes()),
                None if value.is_null() => {}
                None => out.extend_from_slice(value.to_string().as_bytes()),
            }
        }
        out.push(b'\n');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clarion_sinks::Sink;
    use clarion_wire::FlowKey;

    use super::*;

    #[test]
    fn a_header_then_a_line_a_record_with_empty_missing_values() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.csv");
        let text = path.to_str().unwrap();
        let key = FlowKey::new(
            "fd00::1".parse().unwrap(),
            "fd00::2".parse().unwrap(),
            58,
            None,
            None,
        );
        let mut sink = crate::open::<FlowRecord>(text).unwrap();
        sink.write(&FlowRecord::of_packet(key, 7, 48, 0)).unwrap();
        sink.finish().unwrap();
        let csv = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert!(
            lines[0].starts_with("src_ip,dst_ip,src_port,dst_port,proto,vlan,"),
            "{csv}"
        );
        assert!(lines[1].starts_with("fd00::1,fd00::2,,,58,,"), "{csv}");
        assert_eq!(lines[0].split(',').count(), lines[1].split(',').count());
        assert_eq!(lines.len(), 2);
    }
}
