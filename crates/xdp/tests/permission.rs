//! Without the capabilities, attaching and opening a socket fail with an
//! error that says what is needed. Capabilities are per thread on Linux, so
//! a thread that drops all of its own stands for an unprivileged process.
//! (A file of its own: aya probes kernel features once per process, and the
//! probe must not run in the capability-less thread.)
#![cfg(target_os = "linux")]

use clarion_xdp::{XdpConfig, XdpError, XdpMode, XdpProgram, XdpSocket};

mod common;
use common::{unavailable, Veth};

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// _LINUX_CAPABILITY_VERSION_3: two CapData words.
const CAP_V3: u32 = 0x2008_0522;

/// Drops every capability of the calling thread (only).
fn drop_thread_capabilities() -> std::io::Result<()> {
    let header = CapHeader {
        version: CAP_V3,
        pid: 0,
    };
    let data = [CapData::default(); 2];
    // SAFETY: capset reads one header and two data words, all live here.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn assert_permission(what: &str, r: Result<impl std::fmt::Debug, XdpError>) {
    match r {
        Err(e @ XdpError::Permission { .. }) => {
            println!("{what}: {e}");
            assert!(
                e.to_string()
                    .contains("needs root or CAP_NET_ADMIN+CAP_NET_RAW+CAP_BPF"),
                "{e}"
            );
        }
        other => panic!("{what} without capabilities: {other:?}"),
    }
}

#[test]
fn without_capabilities_the_error_says_what_is_needed() {
    if let Some(why) = unavailable() {
        println!("skipping the AF_XDP permission test: {why}");
        return;
    }
    let veth = Veth::new('p', 3).expect("veth setup");
    // With capabilities first (this also runs aya's one-time feature probes).
    let prog = XdpProgram::attach(&veth.host, XdpMode::Generic).expect("attach as root");
    std::thread::scope(|s| {
        s.spawn(|| {
            drop_thread_capabilities().expect("capset");
            assert_permission("attach", XdpProgram::attach(&veth.host, XdpMode::Native));
            assert_permission("open", XdpSocket::open(&prog, 0, &XdpConfig::default()));
        });
    });
    // The failed open gave the queue back.
    XdpSocket::open(&prog, 0, &XdpConfig::default()).expect("open as root");
}
