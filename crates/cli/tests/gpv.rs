//! `clarion run --gpv` and `--app`, `clarion apps run`: GPVs from the
//! command line hold every packet of every flow in order, and the apps
//! report the same on the host's GPVs as on the file written from them.

mod common;

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use clarion_gpv::{Gpv, GpvReader};
use clarion_wire::FlowKey;
use common::{clarion, load, repo, stderr};

fn read_gpvs(path: &Path) -> Vec<Gpv> {
    let f = std::fs::File::open(path).expect("GPV file");
    GpvReader::new(BufReader::new(f))
        .expect("a GPV file")
        .collect::<Result<_, _>>()
        .expect("undamaged")
}

/// The bundled capture, and one shared capture of many flows if present.
fn captures() -> Vec<PathBuf> {
    let mut v = vec![repo().join("examples/demo.pcap")];
    let real = repo().join("../shared/captures/pathspider_real.pcap");
    if real.exists() {
        v.push(real);
    } else {
        eprintln!("{}: missing; only the example runs", real.display());
    }
    v
}

#[test]
fn gpvs_hold_every_packet_of_every_flow_in_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    for capture in captures() {
        let file = dir.path().join("g.gpv");
        let o = clarion()
            .args(["run", "--quiet", "--pcap"])
            .arg(&capture)
            .arg("--gpv")
            .arg(&file)
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", stderr(&o));
        // Per flow: (time, size) of each packet, in arrival order.
        let mut want: BTreeMap<FlowKey, Vec<(u64, u16)>> = BTreeMap::new();
        for p in load(&capture) {
            want.entry(p.key)
                .or_default()
                .push((p.ts_ns, p.size.min(65_535) as u16));
        }
        let mut got: BTreeMap<FlowKey, Vec<(u64, u16)>> = BTreeMap::new();
        for g in read_gpvs(&file) {
            assert_eq!(g.header.packet_count as usize, g.packets.len());
            let flow = got.entry(g.header.key).or_default();
            flow.extend(g.timed().map(|(ts, f)| (ts, f.size)));
        }
        assert_eq!(got.len(), want.len(), "{}: flows", capture.display());
        assert!(got == want, "{}: GPVs differ from the packets", capture.display());
    }
}

#[test]
fn apps_report_the_same_on_the_host_and_on_its_gpv_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    for capture in captures() {
        let (file, live) = (dir.path().join("g.gpv"), dir.path().join("live.json"));
        let o = clarion()
            .args(["run", "--quiet", "--pcap"])
            .arg(&capture)
            .arg("--gpv")
            .arg(&file)
            .args(["--app", "profiler", "--app", "classifier", "--app", "microburst"])
            .arg("--app-output")
            .arg(&live)
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", stderr(&o));
        let from_file = clarion()
            .args(["apps", "run", "profiler", "classifier", "microburst", "--gpv"])
            .arg(&file)
            .output()
            .expect("runs");
        assert!(from_file.status.success(), "{}", stderr(&from_file));
        let live = std::fs::read_to_string(&live).expect("the apps' report");
        assert_eq!(
            live,
            String::from_utf8_lossy(&from_file.stdout),
            "{}",
            capture.display()
        );
        // The same GPVs as Parquet give the same report.
        let parquet = dir.path().join("g.parquet");
        let o = clarion()
            .args(["run", "--quiet", "--pcap"])
            .arg(&capture)
            .arg("--gpv")
            .arg(&parquet)
            .output()
            .expect("runs");
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            clarion_parquet::read_gpvs(&parquet).expect("Parquet GPVs"),
            read_gpvs(&file),
            "Parquet holds the .gpv file's GPVs"
        );
        let from_parquet = clarion()
            .args(["apps", "run", "profiler", "classifier", "microburst", "--gpv"])
            .arg(&parquet)
            .output()
            .expect("runs");
        assert!(from_parquet.status.success(), "{}", stderr(&from_parquet));
        assert_eq!(
            live,
            String::from_utf8_lossy(&from_parquet.stdout),
            "{}",
            capture.display()
        );
        let v: serde_json::Value = serde_json::from_str(&live).expect("JSON");
        assert_eq!(v["schema"], "clarion.apps/1");
        for app in ["profiler", "classifier", "microburst"] {
            assert!(v["apps"][app].is_object(), "{app} reported: {v}");
        }
    }
}

#[test]
fn mistakes_are_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    let capture = repo().join("examples/demo.pcap");
    let o = clarion()
        .args(["run", "--pcap"])
        .arg(&capture)
        .args(["--gpv", "g.txt"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--gpv g.txt"), "{}", stderr(&o));

    let o = clarion()
        .args(["run", "--pcap"])
        .arg(&capture)
        .args(["--app", "sniffer"])
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no app named \"sniffer\""), "{}", stderr(&o));

    // A cut GPV file: an error naming it, after the GPVs before the cut.
    let file = dir.path().join("g.gpv");
    let o = clarion()
        .args(["run", "--quiet", "--pcap"])
        .arg(&capture)
        .arg("--gpv")
        .arg(&file)
        .output()
        .expect("runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&file).expect("written");
    let cut = dir.path().join("cut.gpv");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).expect("cut");
    let o = clarion()
        .args(["apps", "run", "profiler", "--gpv"])
        .arg(&cut)
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cut.gpv") && stderr(&o).contains("truncated"),
        "{}",
        stderr(&o)
    );

    let o = clarion()
        .args(["apps", "run", "profiler", "--gpv"])
        .arg(repo().join("examples/demo.pcap"))
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not a GPV file"), "{}", stderr(&o));
}
