//! The listening socket, with a receive buffer large enough for bursts.
//!
//! A host replaying a capture sends its header datagrams far faster than
//! it received the packets; the kernel queues them in the socket's
//! receive buffer until the collector reads them, and drops what does not
//! fit. `SO_RCVBUF` is capped by `net.core.rmem_max` (about 200 KiB by
//! default, some thousand datagrams); as root, `SO_RCVBUFFORCE` passes
//! the cap. What the kernel granted is reported, and losses are counted
//! by sequence numbers in any case.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use crate::CollectError;

pub(crate) fn bind(addr: SocketAddr, recv_buffer: usize) -> Result<UdpSocket, CollectError> {
    let socket = UdpSocket::bind(addr).map_err(|error| CollectError::Bind { addr, error })?;
    let want = libc::c_int::try_from(recv_buffer).unwrap_or(libc::c_int::MAX);
    // Force first (root); without the privilege, ask within the cap.
    if setsockopt(&socket, libc::SO_RCVBUFFORCE, want).is_err() {
        let _ = setsockopt(&socket, libc::SO_RCVBUF, want);
    }
    Ok(socket)
}

fn setsockopt(socket: &UdpSocket, option: libc::c_int, value: libc::c_int) -> std::io::Result<()> {
    // SAFETY: the descriptor is open for the socket's lifetime; the value
    // pointer and length describe one live `c_int`, as the option expects.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            std::ptr::from_ref(&value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The receive buffer the kernel reports (it doubles what was asked, for
/// its bookkeeping).
pub(crate) fn recv_buffer(socket: &UdpSocket) -> usize {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: as above; `value` and `len` are live and sized for the option.
    let r = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            std::ptr::from_mut(&mut value).cast(),
            &mut len,
        )
    };
    if r == 0 {
        usize::try_from(value).unwrap_or(0)
    } else {
        0
    }
}

/// The socket's line of `/proc/net/udp` or `/proc/net/udp6`, split in
/// fields: the kernel's own counts for it (found by the socket's inode).
fn proc_fields(socket: &UdpSocket) -> Option<Vec<String>> {
    // SAFETY: `st` is a live, zeroed stat buffer; the descriptor is open.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(socket.as_raw_fd(), &mut st) } != 0 {
        return None;
    }
    let inode = st.st_ino.to_string();
    // The kernel hands the table out a page at a time: a socket opened or
    // closed between two pages shifts the rest, and a line can be skipped
    // (seen on CI while other sockets came and went). Read it again.
    for _ in 0..4 {
        for table in ["/proc/net/udp", "/proc/net/udp6"] {
            let Ok(text) = std::fs::read_to_string(table) else {
                continue;
            };
            for line in text.lines().skip(1) {
                let f: Vec<&str> = line.split_whitespace().collect();
                // sl local rem st tx:rx tr:when retrnsmt uid timeout inode ref pointer drops
                if f.get(9) == Some(&inode.as_str()) {
                    return Some(f.into_iter().map(str::to_string).collect());
                }
            }
        }
    }
    None
}

/// Datagrams the kernel dropped for this socket since it was opened
/// (receive buffer full): the losses no sequence number shows when they
/// are a stream's last datagrams. `None` where the kernel does not say.
pub(crate) fn kernel_drops(socket: &UdpSocket) -> Option<u64> {
    proc_fields(socket)?.get(12)?.parse().ok()
}

/// Bytes queued in the socket's receive buffer (the kernel's `rx_queue`,
/// its accounting of the datagrams waiting, overhead included).
pub(crate) fn queued_bytes(socket: &UdpSocket) -> Option<u64> {
    let f = proc_fields(socket)?;
    let rx = f.get(4)?.split(':').nth(1)?;
    u64::from_str_radix(rx, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buffer_grows_as_far_as_allowed() {
        let small = bind("127.0.0.1:0".parse().unwrap(), 4096).unwrap();
        let large = bind("127.0.0.1:0".parse().unwrap(), 16 << 20).unwrap();
        let (s, l) = (recv_buffer(&small), recv_buffer(&large));
        assert!(s > 0 && l > s, "{s} then {l}");
        // SAFETY-checked calls above: as root the cap is passed.
        if unsafe { libc::geteuid() } == 0 {
            assert!(l >= 16 << 20, "root gets what it asks: {l}");
        }
    }

    #[test]
    fn the_kernel_counts_what_waits_and_what_it_dropped() {
        // A buffer the kernel rounds up to its minimum: a few datagrams fit.
        let rx = bind("127.0.0.1:0".parse().unwrap(), 1).unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        assert_eq!(kernel_drops(&rx), Some(0));
        assert_eq!(queued_bytes(&rx), Some(0));
        for _ in 0..200 {
            let _ = tx.send(&[0u8; 1400]);
        }
        assert!(queued_bytes(&rx).unwrap() > 0);
        assert!(kernel_drops(&rx).unwrap() > 0, "200 datagrams cannot fit");
    }
}
