//! The seam between the packets and what consumes them.

use clarion_capture::RawPacket;
use clarion_engine::{Counters, Health, Monitor, Report, Unparsed};
use clarion_network::Network;
use clarion_wire::PacketRecord;

use crate::Error;

/// What consumes a host's parsed packets.
///
/// # Contract
///
/// - **Order.** Calls come in input order: a batch's packets, and frames
///   that did not parse between them, in the order they were read.
/// - **Reports** go to `out` as they are produced, each call's in the
///   order of a monitor's sweep (window end, event, group); the caller
///   takes them away between calls.
/// - **Finish** is called once, after the last packet: every window the
///   input reached is closed and reported. Nothing is called after it.
/// - **Errors** end the run: the caller reports the error and stops
///   feeding the stage (a worker that died, a merger that refused its
///   statistics). Bad packets are never an error; they are counted.
pub trait Stage {
    /// The frames that follow come from input `input` of several (one
    /// capture per host); 0 until told otherwise. Stages of one host's
    /// traffic ignore it.
    fn switch_input(&mut self, _input: usize) {}
    /// A frame that parsed, with its bytes, just before its record joins
    /// the batch for [`Stage::process_batch`] (so in input order, and
    /// before that batch's reports). For what needs the frame itself
    /// (export policies); the bytes are valid for this call only.
    #[inline(always)]
    fn frame(&mut self, _record: &PacketRecord, _raw: &RawPacket<'_>) {}
    fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<Report>) -> Result<(), Error>;
    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) -> Result<(), Error>;
    fn finish(&mut self, out: &mut Vec<Report>) -> Result<(), Error>;
    /// The host's counters so far (summed over its workers or hosts).
    fn counters(&self) -> Counters;
    /// Moves the health records kept since the last call into `out`
    /// (epochs not seen in full; `MonitorConfig::keep_health`). Stages that
    /// keep none (worker threads) add nothing.
    fn take_health(&mut self, _out: &mut Vec<Health>) {}
}

impl Stage for Monitor {
    fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<Report>) -> Result<(), Error> {
        Monitor::process_batch(self, packets, out);
        Ok(())
    }
    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) -> Result<(), Error> {
        Monitor::note_unparsed(self, ts_ns, why, out);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Report>) -> Result<(), Error> {
        Monitor::finish(self, out);
        Ok(())
    }
    fn counters(&self) -> Counters {
        Monitor::counters(self)
    }
    fn take_health(&mut self, out: &mut Vec<Health>) {
        Monitor::take_health(self, out)
    }
}

/// A network fed one capture per host: input `k` is host `hosts[k]`'s
/// (inventory indices), and each of its packets is measured by that host
/// alone ([`Network::process_on`]), as are its frames that do not parse.
#[derive(Debug)]
pub struct PerHost {
    pub network: Network,
    hosts: Vec<usize>,
    input: usize,
}

impl PerHost {
    pub fn new(network: Network, hosts: Vec<usize>) -> PerHost {
        PerHost {
            network,
            hosts,
            input: 0,
        }
    }
}

impl Stage for PerHost {
    fn switch_input(&mut self, input: usize) {
        self.input = input;
    }
    fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<Report>) -> Result<(), Error> {
        // An input without a host (not expected: the caller maps every one) counts as of no host.
        let host = self.hosts.get(self.input).copied().unwrap_or(usize::MAX);
        for p in packets {
            self.network.process_on(host, p, out);
        }
        Ok(())
    }
    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) -> Result<(), Error> {
        let host = self.hosts.get(self.input).copied().unwrap_or(usize::MAX);
        self.network.note_unparsed_on(host, ts_ns, why, out);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Report>) -> Result<(), Error> {
        Stage::finish(&mut self.network, out)
    }
    fn counters(&self) -> Counters {
        Stage::counters(&self.network)
    }
    fn take_health(&mut self, out: &mut Vec<Health>) {
        self.network.take_health(out)
    }
}

impl Stage for Network {
    fn process_batch(&mut self, packets: &[PacketRecord], out: &mut Vec<Report>) -> Result<(), Error> {
        for p in packets {
            Network::process(self, p, out);
        }
        Ok(())
    }
    fn note_unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Vec<Report>) -> Result<(), Error> {
        Network::note_unparsed(self, ts_ns, why, out);
        Ok(())
    }
    fn finish(&mut self, out: &mut Vec<Report>) -> Result<(), Error> {
        Network::finish(self, out);
        Ok(())
    }
    fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for (_, h) in self.host_counters() {
            c.add(&h);
        }
        c
    }
    fn take_health(&mut self, out: &mut Vec<Health>) {
        Network::take_health(self, out)
    }
}
