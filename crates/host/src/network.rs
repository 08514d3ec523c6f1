//! A network of hosts and its manager (`clarion-network`) at a pipeline's head.

use clarion_engine::{Counters, Health, Unparsed};
use clarion_network::Network;
use clarion_pipeline::{Error, Outputs, Stage};
use clarion_wire::PacketRecord;

/// A network fed one capture of all its hosts' traffic (each packet
/// measured by the hosts it concerns, [`Network::process`]) or one
/// capture per host: then input `k` is host `hosts[k]`'s (inventory
/// indices), and each of its packets is measured by that host alone
/// ([`Network::process_on`]), as are its frames that do not parse.
#[derive(Debug)]
pub struct NetworkStage {
    pub network: Network,
    /// By input, its host; `None`: one capture of the whole network.
    hosts: Option<Vec<usize>>,
    input: usize,
}

impl NetworkStage {
    /// One capture of the whole network's traffic.
    pub fn whole(network: Network) -> NetworkStage {
        NetworkStage {
            network,
            hosts: None,
            input: 0,
        }
    }

    /// One capture per host: input `k` is host `hosts[k]`'s.
    pub fn per_host(network: Network, hosts: Vec<usize>) -> NetworkStage {
        NetworkStage {
            network,
            hosts: Some(hosts),
            input: 0,
        }
    }

    /// The current input's host; an input without one (not expected: the
    /// caller maps every one) counts as of no host.
    fn host(&self) -> Option<usize> {
        let hosts = self.hosts.as_ref()?;
        Some(hosts.get(self.input).copied().unwrap_or(usize::MAX))
    }
}

impl Stage for NetworkStage {
    fn switch_input(&mut self, input: usize) {
        self.input = input;
    }

    fn batch(&mut self, packets: &[PacketRecord], out: &mut Outputs) -> Result<(), Error> {
        match self.host() {
            Some(host) => packets
                .iter()
                .for_each(|p| self.network.process_on(host, p, &mut out.reports)),
            None => packets
                .iter()
                .for_each(|p| self.network.process(p, &mut out.reports)),
        }
        Ok(())
    }

    fn unparsed(&mut self, ts_ns: u64, why: Unparsed, out: &mut Outputs) -> Result<(), Error> {
        match self.host() {
            Some(host) => self.network.note_unparsed_on(host, ts_ns, why, &mut out.reports),
            None => self.network.note_unparsed(ts_ns, why, &mut out.reports),
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Outputs) -> Result<(), Error> {
        self.network.finish(&mut out.reports);
        Ok(())
    }

    fn counters(&self) -> Counters {
        let mut c = Counters::default();
        for (_, h) in self.network.host_counters() {
            c.add(&h);
        }
        c
    }

    fn take_health(&mut self, out: &mut Vec<Health>) {
        self.network.take_health(out)
    }
}
