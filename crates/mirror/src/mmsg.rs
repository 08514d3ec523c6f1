//! `sendmmsg(2)`: up to [`MAX_BATCH`] datagrams to one address in one
//! system call.
//!
//! The only `unsafe` of the crate. The message headers and their iovecs
//! live on the stack of [`send_batch`] (5 KiB, zeroed per call) and point
//! into the caller's datagrams and address, all borrowed for the call: no
//! raw pointer outlives it, so the mirror holding the datagrams stays
//! `Send`.
//!
//! The kernel's contract, which [`crate::VxlanMirror::flush`] builds on:
//! the datagrams are sent in order and the call stops at the first one it
//! cannot send; it returns how many were sent if any was (the error of
//! the next one is then lost: calling again with the rest reports it), or
//! that first datagram's error.
//!
//! # Cost
//!
//! One system call for the batch instead of one per datagram; the
//! per-datagram work in the kernel (route, skb, loopback delivery) stays.

use std::io;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use socket2::SockAddr;

/// The most datagrams one call sends (and the largest batch of a mirror).
pub const MAX_BATCH: usize = 64;

/// Sends `datagrams[..n]`, `n` = the fewest of `datagrams.len()`,
/// `sent.len()` and [`MAX_BATCH`], to `to` in order. Returns how many the
/// kernel took (their lengths in `sent`), 0 only when `n` is 0, or the
/// error of the first datagram when it took none.
pub(crate) fn send_batch(
    socket: &UdpSocket,
    to: &SockAddr,
    datagrams: &[&[u8]],
    sent: &mut [usize],
) -> io::Result<usize> {
    let n = datagrams.len().min(sent.len()).min(MAX_BATCH);
    if n == 0 {
        return Ok(0);
    }
    let mut iov = [libc::iovec {
        iov_base: std::ptr::null_mut(),
        iov_len: 0,
    }; MAX_BATCH];
    for (v, d) in iov.iter_mut().zip(&datagrams[..n]) {
        // The kernel only reads through iov_base for a send.
        v.iov_base = d.as_ptr().cast_mut().cast();
        v.iov_len = d.len();
    }
    // SAFETY: mmsghdr is a C struct of integers and raw pointers, for
    // which all zero bytes is a valid value (null pointers, zero lengths).
    let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { std::mem::zeroed() };
    let iov_ptr = iov.as_mut_ptr();
    for (i, m) in msgs.iter_mut().enumerate().take(n) {
        m.msg_hdr.msg_name = to.as_ptr().cast_mut().cast();
        m.msg_hdr.msg_namelen = to.len();
        // SAFETY: i < n <= MAX_BATCH, the length of `iov`.
        m.msg_hdr.msg_iov = unsafe { iov_ptr.add(i) };
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: msgs[..n] point to iov[..n], to `to` (its length given)
    // and, through the iovecs, into `datagrams`: all alive and unmoved
    // until the call returns, which is the last use of the pointers. The
    // kernel reads the addresses and the bytes and writes only msg_len of
    // msgs[..n]; n <= MAX_BATCH fits a c_uint.
    let r = unsafe { libc::sendmmsg(socket.as_raw_fd(), msgs.as_mut_ptr(), n as libc::c_uint, 0) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // 0 <= r <= n, as the kernel promises; min() so a broken promise
    // cannot index out of bounds.
    let k = (r as usize).min(n);
    for (s, m) in sent.iter_mut().zip(&msgs[..k]) {
        *s = m.msg_len as usize;
    }
    Ok(k)
}

#[cfg(test)]
mod tests {
    use std::net::UdpSocket;
    use std::time::Duration;

    use super::*;

    /// The wrapper against the real kernel: what arrives, in order, and
    /// the lengths it reports; a batch over MAX_BATCH sends MAX_BATCH.
    #[test]
    fn a_batch_arrives_in_order_with_its_lengths() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = SockAddr::from(rx.local_addr().unwrap());
        let owned: Vec<Vec<u8>> = (0..MAX_BATCH + 5).map(|i| vec![i as u8; 1 + i * 7]).collect();
        let datagrams: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
        let mut sent = vec![0usize; datagrams.len()];
        assert_eq!(send_batch(&tx, &to, &[], &mut sent).unwrap(), 0);
        let k = send_batch(&tx, &to, &datagrams, &mut sent).unwrap();
        assert_eq!(k, MAX_BATCH);
        let mut buf = vec![0u8; 2048];
        for (i, d) in datagrams[..k].iter().enumerate() {
            assert_eq!(sent[i], d.len(), "datagram {i}");
            let n = rx.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], *d, "datagram {i}");
        }
    }

    /// A datagram the kernel refuses stops the call after the ones before
    /// it; alone first, its error is returned.
    #[test]
    fn the_call_stops_at_a_refused_datagram() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = SockAddr::from(rx.local_addr().unwrap());
        let big = vec![0u8; 70_000];
        let datagrams: [&[u8]; 4] = [b"a", b"bb", &big, b"d"];
        let mut sent = [0usize; 4];
        assert_eq!(send_batch(&tx, &to, &datagrams, &mut sent).unwrap(), 2);
        assert_eq!(&sent[..2], &[1, 2]);
        let e = send_batch(&tx, &to, &datagrams[2..], &mut sent).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EMSGSIZE), "{e}");
    }
}
