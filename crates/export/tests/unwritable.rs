//! A policy whose files cannot be written is refused when it is installed
//! (issue 33), with the policy and the file named, not found out at its
//! first packet (which then dropped every packet of it, said only in the
//! summary).

use std::path::{Path, PathBuf};

use clarion_export::{ExportConfig, ExportError, Exporter};

fn policies(text: &str) -> Vec<clarion_lang::spec::ExportSpec> {
    clarion_lang::check_exports(text).expect("policies")
}

fn config(dir: &Path) -> ExportConfig {
    ExportConfig {
        export_dir: Some(dir.to_path_buf()),
        run_id: "run1".into(),
        ..ExportConfig::default()
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("clarion-unwritable-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

#[test]
fn files_that_cannot_be_written_are_refused_at_install() {
    let p = policies("export keep\n  filter proto = udp\n  send packets to pcapng\n");
    // Writable: accepted, and the probe leaves nothing behind.
    let ok = scratch("ok");
    Exporter::new(&p, &config(&ok)).expect("a writable directory");
    assert_eq!(
        std::fs::read_dir(&ok).expect("reads").count(),
        0,
        "no file before a packet"
    );

    // /proc: it exists, and no one (root neither) creates files in it.
    let e = Exporter::new(&p, &config(Path::new("/proc"))).expect_err("refused");
    assert!(matches!(e, ExportError::Unwritable { .. }), "{e:?}");
    assert!(
        e.to_string()
            .starts_with("export policy `keep` cannot write its files: /proc/keep-run1-000000.pcapng: "),
        "{e}"
    );

    // The first file is there already (the same run id twice).
    let taken = scratch("taken");
    std::fs::write(taken.join("keep-run1-000000.pcapng"), b"").expect("a file");
    let e = Exporter::new(&p, &config(&taken)).expect_err("refused");
    assert!(e.to_string().contains("keep-run1-000000.pcapng"), "{e}");

    // Installed at runtime: refused, and the policies before stay.
    let mut x = Exporter::new(&p, &config(&ok)).expect("an exporter");
    std::fs::write(ok.join("more-run1-000000.pcapng"), b"").expect("a file");
    let more = policies(
        "export keep\n  filter proto = udp\n  send packets to pcapng\n\
         export more\n  send packets to pcapng\n",
    );
    let e = x.set_policies(&more).expect_err("refused");
    assert!(e.to_string().contains("`more`"), "{e}");
    assert_eq!(x.policies().len(), 1, "the set before stays");

    // A directory without write permission (root writes there anyway: tried first).
    use std::os::unix::fs::PermissionsExt;
    let closed = scratch("closed");
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o555)).expect("chmod");
    if std::fs::write(closed.join("try"), b"").is_err() {
        let e = Exporter::new(&p, &config(&closed)).expect_err("refused");
        assert!(e.to_string().contains("ermission denied"), "{e}");
    }
    std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for d in ["ok", "taken", "closed"] {
        let _ = std::fs::remove_dir_all(
            std::env::temp_dir().join(format!("clarion-unwritable-{d}-{}", std::process::id())),
        );
    }
}
