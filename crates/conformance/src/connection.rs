//! TCP connections for the traffic generator: both directions of a
//! connection, played by a small simulator of two endpoints, so that the
//! TCP connection state of `docs/semantics.md` meets every case it names.
//!
//! A connection is a script of random words. The header picks the
//! endpoints, the initial sequence numbers (sometimes close to 2³² so that
//! sequence numbers wrap), the SYN options (sometimes absent) and how the
//! capture meets the connection (at its handshake or in the middle). Each
//! action then plays one situation: data, acks (immediate, delayed over
//! several segments, partial, stale, beyond what was sent), duplicate acks
//! with or without the fast retransmission that follows, retransmissions
//! (whole, partly overlapping, extending past the highest byte sent),
//! reordered segments, keep-alives, FIN, RST, a new SYN with a new ISN, an
//! idle gap longer than the flow timeout. The time before each action is a
//! burst (below 1 ms), exactly the burst gap, or a gap, so that `is_burst`
//! and RTT samples vary and land in many windows of 1–10 ms.
//!
//! Like the rest of the traffic, each frame is decoded from plain integers,
//! and all-zero words decode to the plainest script: a handshake then
//! single data segments from the client.

use std::net::IpAddr;

use clarion_wire::tcp_flags::{ACK, CWR, ECE, FIN, PSH, RST, SYN};
use proptest::prelude::*;

use crate::pool::{V4, V6};
use crate::traffic::{
    plan_for, Draw, FlowDef, Frag, FramePlan, Kind, Step, TcpOptions, Tick, What, LINKS, MS,
    TEST_BURST_GAP_NS, TEST_FLOW_TIMEOUT_NS,
};

/// The two ends of a connection: the client opens it.
#[derive(Clone, Copy, Debug)]
struct Endpoints {
    client: IpAddr,
    server: IpAddr,
    client_port: u16,
    server_port: u16,
    /// Both directions carry the same tags (the reverse of a flow keeps its VLAN).
    vlans: &'static [u16],
}

const fn ends(
    client: IpAddr,
    client_port: u16,
    server: IpAddr,
    server_port: u16,
    vlans: &'static [u16],
) -> Endpoints {
    Endpoints {
        client,
        server,
        client_port,
        server_port,
        vlans,
    }
}

const fn v4(i: usize) -> IpAddr {
    IpAddr::V4(V4[i])
}

const fn v6(i: usize) -> IpAddr {
    IpAddr::V6(V6[i])
}

/// Connections over the pool's addresses and ports. Most keys differ from
/// the random TCP flows of the traffic pool (whose random sequence numbers
/// would disturb the connections); one shares them on purpose, and one is
/// a connection from a socket to itself, whose reverse flow is the flow
/// itself.
const ENDPOINTS: [Endpoints; 8] = [
    ends(v4(1), 40000, v4(2), 80, &[]),
    ends(v4(0), 40001, v4(4), 443, &[10]),
    ends(v6(1), 40001, v6(2), 80, &[]),
    ends(v4(5), 5353, v4(3), 443, &[300, 20]),
    ends(v6(0), 40000, v6(3), 443, &[20]),
    ends(v4(2), 40000, v4(1), 80, &[]),
    // The random pool's 10.0.0.1:40000 → 10.0.1.7:80 and back.
    ends(v4(0), 40000, v4(2), 80, &[]),
    ends(v4(0), 40000, v4(0), 40000, &[]),
];

const ENDPOINT_WEIGHTS: [u64; 8] = [6, 5, 5, 4, 4, 3, 1, 1];

/// The random words of one connection.
#[derive(Clone, Debug)]
pub(crate) struct Script {
    header: [u64; 5],
    actions: Vec<[u64; 6]>,
}

/// Up to `max_actions` actions of one connection.
pub(crate) fn arb_script(max_actions: usize) -> impl Strategy<Value = Script> {
    (
        any::<[u64; 5]>(),
        prop::collection::vec(any::<[u64; 6]>(), 0..=max_actions),
    )
        .prop_map(|(header, actions)| Script { header, actions })
}

/// A frame of a connection and when it was sent (`nominal`, non-decreasing
/// along the connection); the plan's timestamp is sometimes earlier (out of
/// order). Frames are captured in nominal order.
pub(crate) struct Timed {
    pub nominal: u64,
    pub plan: FramePlan,
}

/// The frames of `script`, starting at `start` (nominal times).
pub(crate) fn frames(script: &Script, start: u64) -> Vec<Timed> {
    let mut h = Draw(script.header[0]);
    let ep = ENDPOINTS[h.weighted(&ENDPOINT_WEIGHTS)];
    let opening = h.weighted(&[8, 1, 1]);
    let client_options = syn_options(&mut h);
    let server_options = syn_options(&mut Draw(script.header[1]));
    let mut c = Draw(script.header[2]);
    let client_isn = isn(&mut c);
    let mut s = Draw(script.header[3]);
    let server_isn = isn(&mut s);
    let mut sim = Sim {
        ep,
        sides: [
            Side::new(client_isn, client_options),
            Side::new(server_isn, server_options),
        ],
        clock: start,
        back: 0,
        look: 0,
        space: script.header[4].rotate_left(32),
        out: Vec::new(),
    };
    match opening {
        0 => sim.handshake(&mut Draw(script.header[4])),
        // Met in the middle, the client speaking first.
        1 => {}
        // Met in the middle, the server acknowledging data the capture never saw.
        _ => {
            let seen = i64::from(c.pick(&[0u16, 0, 1, 1460, 3000]));
            sim.sides[1].rcv = seen;
            sim.emit(SERVER, 0, 0, ACK);
        }
    }
    for words in &script.actions {
        sim.action(words);
    }
    sim.out
}

/// The MSS and window-scale options of a SYN, each sometimes absent.
fn syn_options(d: &mut Draw) -> TcpOptions {
    let mss = match d.weighted(&[4, 1]) {
        0 => Some(d.pick(&[1460u16, 536, 1220, 8960, 1440])),
        _ => None,
    };
    let wscale = match d.weighted(&[3, 1]) {
        // 15 is out of range: treated as 14.
        0 => Some(d.pick(&[7u8, 0, 2, 8, 14, 15])),
        _ => None,
    };
    TcpOptions { mss, wscale }
}

/// An initial sequence number: anywhere, close below 2³² (so the
/// connection's sequence numbers wrap), or small. Uses 32 bits of `d`.
fn isn(d: &mut Draw) -> u32 {
    let kind = d.weighted(&[5, 3, 1]);
    let x = d.bits(24) as u32;
    match kind {
        0 => x << 8 | x >> 16,
        1 => u32::MAX - x % 6000,
        _ => x % 1000,
    }
}

const CLIENT: usize = 0;
const SERVER: usize = 1;

/// A segment one side sent for the first time, relative to its ISN.
#[derive(Clone, Copy, Debug)]
struct Sent {
    start: i64,
    end: i64,
    /// Its SYN and FIN bits (each counts one in the sequence space).
    flags: u8,
}

/// One end of the connection as the simulator sees it.
#[derive(Clone, Debug)]
struct Side {
    isn: u32,
    /// The end of the highest byte sent, relative to `isn`.
    nxt: i64,
    /// First transmissions, in sequence order.
    sent: Vec<Sent>,
    /// What this side acknowledges of its peer, relative to the peer's ISN.
    rcv: i64,
    /// The options of this side's SYNs.
    options: TcpOptions,
}

impl Side {
    fn new(isn: u32, options: TcpOptions) -> Self {
        Side {
            isn,
            nxt: 0,
            sent: Vec::new(),
            rcv: 0,
            options,
        }
    }
}

struct Sim {
    ep: Endpoints,
    sides: [Side; 2],
    /// Nominal time of the next frame.
    clock: u64,
    /// How much earlier than its nominal time the next frame is captured.
    back: u64,
    /// Random word for the link, TTL, window… of the next frame.
    look: u64,
    /// Random word for the time between frames of an action.
    space: u64,
    out: Vec<Timed>,
}

/// Payload lengths of data segments: one byte, small, typical MSS-sized, any.
fn data_len(d: &mut Draw) -> i64 {
    match d.weighted(&[3, 1, 2, 1, 1, 4, 2]) {
        0 => 1460,
        // A lone byte (also what a zero-window probe carries).
        1 => 1,
        2 => 2 + d.bits(6) as i64,
        3 => 536,
        4 => 1000,
        5 => 1 + (d.bits(11) % 1460) as i64,
        _ => 1448,
    }
}

/// The time before an action: bursts below 1 ms, exactly the burst gap
/// (still a burst) or just above it, gaps up to 10 ms, longer pauses.
fn delay(d: &mut Draw) -> u64 {
    match d.weighted(&[40, 3, 3, 2, 40, 8]) {
        0 => d.bits(20) % MS,
        1 => 0,
        2 => TEST_BURST_GAP_NS,
        3 => TEST_BURST_GAP_NS + 1,
        4 => TEST_BURST_GAP_NS + 1 + d.bits(24) % (9 * MS),
        _ => 10 * MS + d.bits(26) % (40 * MS),
    }
}

/// The time between frames of one action: mostly a burst.
fn spacing(d: &mut Draw) -> u64 {
    match d.weighted(&[6, 1]) {
        0 => d.bits(19) % (MS / 2),
        _ => MS + d.bits(22) % (4 * MS),
    }
}

impl Sim {
    fn flow(&self, from: usize) -> FlowDef {
        let e = self.ep;
        let (src, dst, sport, dport) = if from == CLIENT {
            (e.client, e.server, e.client_port, e.server_port)
        } else {
            (e.server, e.client, e.server_port, e.client_port)
        };
        FlowDef {
            src,
            dst,
            kind: Kind::Tcp {
                sport,
                dport,
                wscale: None,
            },
            vlans: e.vlans,
            vni: None,
        }
    }

    /// Sends one segment from `from` at `start` (relative to its ISN), acknowledging its current `rcv`.
    fn emit(&mut self, from: usize, start: i64, payload: i64, flags: u8) {
        let ack = self.sides[from].rcv;
        self.emit_ack(from, start, payload, flags, ack);
    }

    /// Sends one segment with an explicit acknowledgement (relative to the peer's ISN).
    fn emit_ack(&mut self, from: usize, start: i64, payload: i64, flags: u8, ack: i64) {
        let me = &self.sides[from];
        let peer = &self.sides[1 - from];
        let seq = me.isn.wrapping_add(start as u32);
        let ack = if flags & ACK != 0 {
            peer.isn.wrapping_add(ack as u32)
        } else {
            0
        };
        let syn = flags & SYN != 0;
        let options = if syn { me.options } else { TcpOptions::default() };
        let step = look_step(self.look, seq, ack, flags, payload);
        // The next frame of the same action looks different.
        self.look = self.look.rotate_left(23) ^ 0x9e37_79b9_7f4a_7c15;
        let len = payload + i64::from(syn) + i64::from(flags & FIN != 0);
        let me = &mut self.sides[from];
        me.nxt = me.nxt.max(start + len);
        let ts = self.clock.saturating_sub(std::mem::take(&mut self.back));
        let plan = plan_for(&self.flow(from), &step, options, ts);
        self.out.push(Timed {
            nominal: self.clock,
            plan,
        });
    }

    /// New data from `from`: a first transmission at its highest byte.
    fn send_new(&mut self, from: usize, payload: i64, flags: u8) {
        let start = self.sides[from].nxt;
        let len = payload + i64::from(flags & SYN != 0) + i64::from(flags & FIN != 0);
        self.sides[from].sent.push(Sent {
            start,
            end: start + len,
            flags: flags & (SYN | FIN),
        });
        self.emit(from, start, payload, flags);
    }

    /// Sends `[start, end)` again (SYN and FIN as first sent).
    fn resend(&mut self, from: usize, start: i64, end: i64, seg_flags: u8) {
        let payload = end - start - i64::from(seg_flags & SYN != 0) - i64::from(seg_flags & FIN != 0);
        let flags = match (seg_flags & SYN != 0, from) {
            (true, CLIENT) => SYN,
            (true, _) => SYN | ACK,
            (false, _) if payload > 0 => PSH | ACK | seg_flags,
            _ => ACK | seg_flags,
        };
        self.emit(from, start, payload.max(0), flags);
    }

    /// The time between two frames of an action.
    fn wait(&mut self) {
        self.clock += spacing(&mut Draw(self.space));
        // Each wait draws afresh from the action's word.
        self.space = self.space.rotate_left(29);
    }

    /// SYN, SYN-ACK, ACK, with fresh sides (their ISNs and options already
    /// chosen); `d` decides the SYN's retransmission and the round trip.
    fn handshake(&mut self, d: &mut Draw) {
        for s in &mut self.sides {
            s.nxt = 0;
            s.rcv = 0;
            s.sent.clear();
        }
        self.send_new(CLIENT, 0, SYN);
        if d.weighted(&[5, 1]) == 1 {
            // The SYN again, same ISN: a retransmission.
            self.clock += MS + d.bits(22) % (3 * MS);
            self.resend(CLIENT, 0, 1, SYN);
        }
        // The server's reply after a round trip, of either side of the burst gap.
        self.clock += match d.weighted(&[3, 2]) {
            0 => d.bits(19) % MS,
            _ => MS + d.bits(22) % (4 * MS),
        };
        self.sides[SERVER].rcv = 1;
        self.send_new(SERVER, 0, SYN | ACK);
        self.wait();
        self.sides[CLIENT].rcv = 1;
        self.emit(CLIENT, 1, 0, ACK);
    }

    fn action(&mut self, words: &[u64; 6]) {
        let [w_kind, w_params, w_time, w_space, w_look, w_extra] = *words;
        let mut k = Draw(w_kind);
        let mut p = Draw(w_params);
        let mut t = Draw(w_time);
        let mut s = Draw(w_space);
        // Lengths of new segments.
        let mut l = Draw(w_extra);
        self.look = w_look;
        self.space = w_space;
        let kind = k.weighted(&[30, 22, 8, 8, 5, 5, 3, 1, 2, 2]);
        // x sends (data, retransmissions, keep-alives…), y acknowledges x.
        let x = if k.weighted(&[2, 1]) == 0 { CLIENT } else { SERVER };
        let y = 1 - x;
        if kind == 9 {
            // An idle gap longer than the flow timeout (or exactly it: still alive).
            self.clock += TEST_FLOW_TIMEOUT_NS
                + match t.weighted(&[1, 1, 4]) {
                    0 => 0,
                    1 => 1,
                    _ => MS + t.bits(26) % (50 * MS),
                };
        } else {
            self.clock += delay(&mut t);
        }
        if t.weighted(&[60, 1]) == 1 {
            self.back = 1 + t.bits(22);
        }
        match kind {
            0 => self.data(x, y, &mut p, &mut l),
            1 => self.ack(x, y, &mut p),
            2 => self.dup_acks(x, y, &mut p, &mut l),
            3 => self.retransmit(x, y, &mut p, &mut l),
            4 => self.reorder(x, &mut l),
            5 => self.keep_alive(x, y, &mut p),
            6 => {
                let payload = if p.weighted(&[3, 1]) == 0 {
                    0
                } else {
                    data_len(&mut l)
                };
                self.send_new(x, payload, FIN | ACK);
                if p.weighted(&[2, 1]) == 0 {
                    self.wait();
                    self.sides[y].rcv = self.sides[x].nxt;
                    let start = self.sides[y].nxt;
                    self.emit(y, start, 0, ACK);
                }
            }
            7 => {
                let flags = if p.weighted(&[1, 1]) == 0 { RST | ACK } else { RST };
                let start = self.sides[x].nxt;
                self.emit(x, start, 0, flags);
            }
            8 => {
                // A new connection on the same ports: new ISNs and options.
                let client = Side::new(isn(&mut p), syn_options(&mut p));
                let server = Side::new(isn(&mut s), syn_options(&mut s));
                self.sides = [client, server];
                self.handshake(&mut l);
            }
            _ => match p.weighted(&[2, 2, 1]) {
                // After the gap, an ack for a flow that is no longer alive…
                0 => {
                    self.sides[y].rcv = self.sides[x].nxt;
                    let start = self.sides[y].nxt;
                    self.emit(y, start, 0, ACK);
                }
                // …new data, starting the flow afresh…
                1 => self.data(x, y, &mut p, &mut l),
                // …or a keep-alive.
                _ => self.keep_alive(x, y, &mut p),
            },
        }
    }

    /// One to four new segments from x, back to back.
    fn data(&mut self, x: usize, y: usize, p: &mut Draw, l: &mut Draw) {
        let n = 1 + p.weighted(&[6, 2, 1, 1]);
        if p.weighted(&[2, 1]) == 1 {
            // Piggybacked: x acknowledges everything y sent.
            self.sides[x].rcv = self.sides[y].nxt;
        }
        let flags = [ACK, PSH | ACK, ECE | CWR | ACK][p.weighted(&[5, 3, 1])];
        for i in 0..n {
            if i > 0 {
                self.wait();
            }
            let len = data_len(l);
            self.send_new(x, len, flags);
        }
    }

    /// y acknowledges x: everything, up to a segment's end (delayed or
    /// partial), a byte inside a segment, an old ack, or beyond what x sent.
    fn ack(&mut self, x: usize, y: usize, p: &mut Draw) {
        let (nxt, rcv) = (self.sides[x].nxt, self.sides[y].rcv);
        let kind = p.weighted(&[6, 3, 1, 1, 1]);
        let target = match kind {
            1 => {
                let ends: Vec<i64> = self.sides[x]
                    .sent
                    .iter()
                    .map(|s| s.end)
                    .filter(|&e| e > rcv && e <= nxt)
                    .collect();
                if ends.is_empty() {
                    nxt
                } else {
                    ends[p.bits(8) as usize % ends.len()]
                }
            }
            2 if nxt > rcv => rcv + 1 + p.bits(16) as i64 % (nxt - rcv),
            3 => rcv - 1 - p.bits(12) as i64,
            4 => nxt + 1 + p.bits(10) as i64,
            _ => nxt,
        };
        if kind != 3 {
            self.sides[y].rcv = target;
        }
        let start = self.sides[y].nxt;
        self.emit_ack(y, start, 0, ACK, target);
    }

    /// Duplicate acks from y while x has data outstanding, often followed
    /// by x's fast retransmission and then an ack of everything.
    fn dup_acks(&mut self, x: usize, y: usize, p: &mut Draw, l: &mut Draw) {
        if self.sides[x].nxt <= self.sides[y].rcv {
            // Something outstanding first (its first segment is "lost").
            let n = 1 + p.weighted(&[1, 1, 1]);
            for _ in 0..n {
                let len = data_len(l);
                self.send_new(x, len, PSH | ACK);
                self.wait();
            }
        }
        let n = 1 + p.bits(2);
        for i in 0..n {
            if i > 0 {
                self.wait();
            }
            let start = self.sides[y].nxt;
            self.emit(y, start, 0, ACK);
        }
        if p.weighted(&[3, 1]) == 0 {
            self.wait();
            let rcv = self.sides[y].rcv;
            let seg = self.sides[x]
                .sent
                .iter()
                .find(|g| g.start <= rcv && rcv < g.end)
                .or(self.sides[x].sent.last())
                .copied();
            if let Some(g) = seg {
                self.resend(x, g.start, g.end, g.flags);
            }
            if p.weighted(&[1, 1]) == 0 {
                self.wait();
                self.sides[y].rcv = self.sides[x].nxt;
                let start = self.sides[y].nxt;
                self.emit(y, start, 0, ACK);
            }
        }
    }

    /// x sends an earlier segment again: whole, its head, from inside it
    /// to beyond its end (possibly beyond the highest byte sent), or it
    /// and the next one together.
    fn retransmit(&mut self, x: usize, y: usize, p: &mut Draw, l: &mut Draw) {
        let sent = &self.sides[x].sent;
        if sent.is_empty() {
            return self.data(x, y, p, l);
        }
        let rcv = self.sides[y].rcv;
        let i = match p.weighted(&[3, 2, 1]) {
            0 => sent.iter().position(|g| g.end > rcv).unwrap_or(sent.len() - 1),
            1 => sent.len() - 1 - p.bits(8) as usize % sent.len().min(16),
            _ => sent.len() - 1,
        };
        let g = sent[i];
        let next = sent.get(i + 1).copied();
        let len = g.end - g.start;
        if g.flags != 0 {
            return self.resend(x, g.start, g.end, g.flags);
        }
        let (start, end) = match p.weighted(&[5, 2, 1, 1]) {
            1 if len > 1 => (
                g.start + 1 + p.bits(11) as i64 % (len - 1),
                g.end + p.bits(9) as i64,
            ),
            2 => (g.start, g.start + (len / 2).max(1)),
            3 => match next {
                Some(n) if n.flags == 0 => (g.start, n.end),
                _ => (g.start, g.end),
            },
            _ => (g.start, g.end),
        };
        self.resend(x, start, end, 0);
    }

    /// Two or three new segments from x, sent out of sequence order.
    fn reorder(&mut self, x: usize, l: &mut Draw) {
        let n = 2 + l.bits(1) as usize;
        let mut segs = Vec::with_capacity(n);
        let mut start = self.sides[x].nxt;
        for _ in 0..n {
            let len = data_len(l);
            segs.push((start, len));
            self.sides[x].sent.push(Sent {
                start,
                end: start + len,
                flags: 0,
            });
            start += len;
        }
        let order: &[usize] = match (n, l.bits(1)) {
            (2, _) => &[1, 0],
            (_, 0) => &[2, 0, 1],
            _ => &[1, 0, 2],
        };
        for (k, &i) in order.iter().enumerate() {
            if k > 0 {
                self.wait();
            }
            let (start, len) = segs[i];
            self.emit(x, start, len, PSH | ACK);
        }
    }

    /// Keep-alives from x: the last byte sent again, or no byte at the
    /// sequence number before it (a pure ack); y may answer with an ack.
    fn keep_alive(&mut self, x: usize, y: usize, p: &mut Draw) {
        let payload = if p.weighted(&[3, 2]) == 0 { 1 } else { 0 };
        let n = 1 + p.bits(1);
        for i in 0..n {
            if i > 0 {
                self.clock += MS + p.bits(22) % (5 * MS);
            }
            let start = self.sides[x].nxt - 1;
            self.emit(x, start, payload, ACK);
        }
        if p.weighted(&[1, 1]) == 0 {
            self.wait();
            let start = self.sides[y].nxt;
            self.emit(y, start, 0, ACK);
        }
    }
}

/// The link, TTL, ECN, window and capture of one connection frame.
fn look_step(look: u64, seq: u32, ack: u32, flags: u8, payload: i64) -> Step {
    let mut d = Draw(look);
    let link = LINKS[d.weighted(&[70, 8, 6, 6, 3, 3, 4])];
    let what = match d.weighted(&[120, 2, 2]) {
        0 => What::Packet,
        1 => What::Snapped(d.bits(8) as u8),
        _ => What::Truncated(d.bits(8) as u8),
    };
    let fragment = if d.weighted(&[60, 1]) == 1 {
        // The first fragment: it still carries the TCP header.
        Frag::First
    } else {
        Frag::Whole
    };
    let window = match d.weighted(&[4, 1, 1]) {
        0 => d.pick(&[65535u16, 29200, 8192, 502]),
        1 => d.bits(16) as u16,
        _ => 0,
    };
    let ttl = d.pick(&[64u8, 64, 63, 128, 255, 1]);
    let ecn = d.bits(2) as u8;
    let ip_extra = match d.weighted(&[19, 1]) {
        0 => 0,
        _ => 1 + d.bits(3) as u8,
    };
    Step {
        tick: Tick::Forward(0),
        what,
        link,
        flow: 0,
        fragment,
        more_fragments: true,
        flags,
        stray_wscale: false,
        window,
        seq,
        ack,
        payload: u16::try_from(payload.clamp(0, 9000)).unwrap_or(0),
        ttl,
        ecn,
        ip_id: seq ^ ack,
        ip_extra,
    }
}
