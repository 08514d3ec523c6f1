//! The fleet's workload as pure functions of the seed: the inventory, the
//! network-wide events, every host's volume of every event, window and
//! group, and from them the decision the manager must make (the reference).
//!
//! - Host `i` is `h<i>` (five digits) and owns `10.<i / 256>.<i % 256>.0/24`.
//! - Event `f<e>` watches `sum(volume) > T` per `dst_ip`, every one of the
//!   given intervals in turn, `across hosts`, with a `dst_ip` filter over an
//!   aligned block of `per_event` hosts' prefixes (a power of two): the
//!   manager places it on exactly the block's hosts (those that exist).
//!   `T` is the block's host count times [`LOCAL_BYTES`], so each placed
//!   host's split trigger is `sum(volume) > LOCAL_BYTES` exactly.
//! - In each window and group, a placed host satisfies its trigger with
//!   probability `share`, with a volume in `(L, L (1 + heavy)]`, `heavy`
//!   drawn per window and group in `[0, 3 / share]` (so about half the
//!   windows fire network-wide); another host had no packets of the group
//!   (half of them) or a volume in `[0, L)`. Volumes are whole bytes, so
//!   sums are exact in `f64` and the reference cannot differ from the
//!   manager by rounding.
//!
//! The reference ([`Model::expected`]) is the definition itself: the
//! window is decided when some placed host satisfied its trigger, and
//! fires when the sum over the placed hosts exceeds `T`.

use std::net::Ipv4Addr;
use std::ops::Range;

use clarion_report::GroupKey;

/// Every placed host's share of an event's threshold (bytes in a window).
pub const LOCAL_BYTES: u64 = 1_000_000;

/// Most hosts: each owns a /24 of 10.0.0.0/8.
pub const MAX_HOSTS: usize = 1 << 16;

/// Most groups of an event in a window: addresses of one host's /24.
pub const MAX_GROUPS: usize = 254;

#[derive(Clone, Debug)]
pub struct EventModel {
    pub name: String,
    pub interval_ns: u64,
    /// The placed hosts.
    pub hosts: Range<usize>,
    /// The `dst_ip` filter's prefix, covering the block.
    pub prefix: String,
    /// The network-wide threshold, bytes.
    pub threshold: u64,
}

#[derive(Clone, Debug)]
pub struct Model {
    pub hosts: usize,
    pub per_event: usize,
    pub groups: usize,
    pub share: f64,
    pub seed: u64,
    pub events: Vec<EventModel>,
}

/// What the manager must decide for one event, window and group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Expected {
    /// Some placed host satisfied its trigger: the window is decided.
    pub decided: bool,
    /// The network-wide sum exceeds the threshold.
    pub fired: bool,
    /// The network-wide sum, bytes.
    pub total: u64,
    /// Satisfaction reports the placed hosts send.
    pub reports: u64,
}

impl Model {
    /// The workload; `Err` says which flag is out of range.
    pub fn new(
        hosts: usize,
        events: usize,
        per_event: usize,
        groups: usize,
        share: f64,
        intervals_ns: &[u64],
        seed: u64,
    ) -> Result<Model, String> {
        if hosts == 0 || hosts > MAX_HOSTS {
            return Err(format!(
                "--hosts must be 1 to {MAX_HOSTS} (each host owns a /24 of 10.0.0.0/8); got {hosts}"
            ));
        }
        if events == 0 {
            return Err("--events must be at least 1".into());
        }
        if !per_event.is_power_of_two() || per_event > MAX_HOSTS {
            return Err(format!(
                "--per-event must be a power of two up to {MAX_HOSTS} (an event watches an aligned block of hosts' prefixes); got {per_event}"
            ));
        }
        if groups == 0 || groups > MAX_GROUPS {
            return Err(format!("--groups must be 1 to {MAX_GROUPS}; got {groups}"));
        }
        if !(share > 0.0 && share <= 1.0) {
            return Err(format!("--share must be in (0, 1]; got {share}"));
        }
        if intervals_ns.is_empty()
            || intervals_ns
                .iter()
                .any(|&i| i < 1_000_000 || 1_000_000_000_000 % i != 0)
        {
            return Err(
                "--intervals must be whole milliseconds that divide 1000 s (e.g. 10ms,50ms,100ms)".into(),
            );
        }
        let per_event = per_event.min(hosts.next_power_of_two());
        let blocks = hosts.div_ceil(per_event);
        let bits = per_event.trailing_zeros();
        let events = (0..events)
            .map(|e| {
                // Few events spread over the hosts; many go round the blocks.
                let b = if events <= blocks {
                    e * blocks / events
                } else {
                    e % blocks
                };
                let first = b * per_event;
                let placed = first..(first + per_event).min(hosts);
                let base = Ipv4Addr::from((10u32 << 24) | ((first as u32) << 8));
                EventModel {
                    name: format!("f{e}"),
                    interval_ns: intervals_ns[e % intervals_ns.len()],
                    prefix: format!("{base}/{}", 24 - bits),
                    threshold: placed.len() as u64 * LOCAL_BYTES,
                    hosts: placed,
                }
            })
            .collect();
        Ok(Model {
            hosts,
            per_event,
            groups,
            share,
            seed,
            events,
        })
    }

    pub fn host_name(h: usize) -> String {
        format!("h{h:05}")
    }

    /// The host of a name [`Model::host_name`] made.
    pub fn host_of(&self, name: &str) -> Option<usize> {
        let h: usize = name.strip_prefix('h')?.parse().ok()?;
        (h < self.hosts && Self::host_name(h) == name).then_some(h)
    }

    pub fn host_prefix(h: usize) -> String {
        format!("10.{}.{}.0/24", h >> 8, h & 255)
    }

    /// The event of a name [`Model::events_text`] gave.
    pub fn event_of(&self, name: &str) -> Option<usize> {
        let e: usize = name.strip_prefix('f')?.parse().ok()?;
        (e < self.events.len() && self.events[e].name == name).then_some(e)
    }

    pub fn inventory_text(&self) -> String {
        (0..self.hosts)
            .map(|h| format!("{} {}\n", Self::host_name(h), Self::host_prefix(h)))
            .collect()
    }

    pub fn events_text(&self) -> String {
        let mut out = String::new();
        for e in &self.events {
            out.push_str(&format!(
                "event {}\n  filter dst_ip in {}\n  when sum(volume) > {}\n  per dst_ip\n  every {}ms\n  across hosts\n",
                e.name,
                e.prefix,
                e.threshold,
                e.interval_ns / 1_000_000
            ));
        }
        out
    }

    /// The events placed on host `h`, in order.
    pub fn events_of(&self, h: usize) -> Vec<usize> {
        (0..self.events.len())
            .filter(|&e| self.events[e].hosts.contains(&h))
            .collect()
    }

    /// Group `g` of event `e`: an address of its first host's /24.
    pub fn group_key(&self, e: usize, g: usize) -> GroupKey {
        let first = self.events[e].hosts.start as u32;
        let addr = Ipv4Addr::from((10u32 << 24) | (first << 8) | (g as u32 + 1));
        GroupKey {
            dst_ip: Some((addr.into(), 32)),
            ..GroupKey::default()
        }
    }

    /// The group number of a group key of event `e`.
    pub fn group_of(&self, e: usize, key: &GroupKey) -> Option<usize> {
        (0..self.groups).find(|&g| self.group_key(e, g) == *key)
    }

    fn hash(&self, parts: &[u64]) -> u64 {
        let mut x = self.seed;
        for &p in parts {
            x = splitmix(x ^ splitmix(p));
        }
        x
    }

    /// Host `h`'s bytes of event `e`'s group `g` in the window starting at
    /// `start_ns`; `None`: it had no packets of the group.
    pub fn volume(&self, e: usize, start_ns: u64, g: usize, h: usize) -> Option<u64> {
        let l = LOCAL_BYTES as f64;
        let r = self.hash(&[e as u64, start_ns, g as u64, h as u64]);
        if unit(r) < self.share {
            let heavy = unit(self.hash(&[e as u64, start_ns, g as u64, u64::MAX])) * 3.0 / self.share;
            let extra = (unit(splitmix(r)) * heavy * l) as u64;
            return Some(LOCAL_BYTES + 1 + extra);
        }
        let r2 = splitmix(r ^ 0x5bd1_e995);
        (unit(r2) >= 0.5).then(|| (unit(splitmix(r2)) * l) as u64)
    }

    /// Whether host `h` satisfies its trigger (and so sends a report).
    pub fn satisfies(&self, e: usize, start_ns: u64, g: usize, h: usize) -> bool {
        self.volume(e, start_ns, g, h).is_some_and(|v| v > LOCAL_BYTES)
    }

    /// The host's packets in the window: what bounds its volume for the
    /// manager (at most the largest IP packet each).
    pub fn packets(volume: Option<u64>) -> u64 {
        volume.map_or(0, |v| v / 1000 + 1)
    }

    /// The reference: what the manager must decide (see the module documentation).
    pub fn expected(&self, e: usize, start_ns: u64, g: usize) -> Expected {
        let mut x = Expected {
            decided: false,
            fired: false,
            total: 0,
            reports: 0,
        };
        for h in self.events[e].hosts.clone() {
            let v = self.volume(e, start_ns, g, h);
            x.total += v.unwrap_or(0);
            if v.is_some_and(|v| v > LOCAL_BYTES) {
                x.decided = true;
                x.reports += 1;
            }
        }
        x.fired = x.decided && x.total > self.events[e].threshold;
        x
    }

    /// The windows of event `e` that start at or after `from_ns` and end by `to_ns`.
    pub fn windows(&self, e: usize, from_ns: u64, to_ns: u64) -> impl Iterator<Item = u64> {
        let i = self.events[e].interval_ns;
        let first = from_ns.div_ceil(i) * i;
        (first..).step_by(i as usize).take_while(move |s| s + i <= to_ns)
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// A uniform number in [0, 1) from 53 bits of `x`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn model(hosts: usize, events: usize, per_event: usize) -> Model {
        Model::new(hosts, events, per_event, 2, 0.25, &[10 * MS, 50 * MS], 7).expect("valid")
    }

    #[test]
    fn the_manager_places_and_splits_events_as_the_model_says() {
        let m = model(200, 20, 16);
        let inventory = clarion_manager::Inventory::parse(&m.inventory_text()).expect("inventory");
        let mut manager = clarion_manager::Manager::new("m", inventory);
        let specs = clarion_lang::check(&m.events_text()).expect("events check");
        for (e, spec) in specs.iter().enumerate() {
            let (_, local) = manager.install(spec).expect("installs");
            let hosts: Vec<usize> = local.iter().map(|(h, _)| *h).collect();
            assert_eq!(hosts, m.events[e].hosts.clone().collect::<Vec<_>>(), "event {e}");
            // The split threshold is LOCAL_BYTES on every host.
            let text = format!("{:?}", local[0].1);
            assert!(text.contains("1000000"), "{text}");
        }
        // The last block is cut at the last host.
        let m = model(100, 7, 16);
        assert_eq!(m.events[6].hosts, 96..100);
        assert_eq!(m.events[6].threshold, 4 * LOCAL_BYTES);
    }

    #[test]
    fn the_reference_is_the_definition_and_both_outcomes_occur() {
        let m = model(64, 4, 16);
        let (mut fired, mut quiet, mut undecided) = (0, 0, 0);
        for e in 0..4 {
            for start in m.windows(e, 1_000 * MS, 3_000 * MS) {
                for g in 0..2 {
                    let x = m.expected(e, start, g);
                    let sum: u64 = m.events[e]
                        .hosts
                        .clone()
                        .filter_map(|h| m.volume(e, start, g, h))
                        .sum();
                    let any = m.events[e].hosts.clone().any(|h| m.satisfies(e, start, g, h));
                    assert_eq!((x.total, x.decided), (sum, any));
                    assert_eq!(x.fired, any && sum > m.events[e].threshold);
                    match (x.decided, x.fired) {
                        (true, true) => fired += 1,
                        (true, false) => quiet += 1,
                        _ => undecided += 1,
                    }
                }
            }
        }
        assert!(fired > 50 && quiet > 50, "fired {fired}, decided quiet {quiet}");
        // With 16 hosts at 25 %, about 1 % of windows have no satisfied host.
        assert!(undecided < (fired + quiet) / 20, "{undecided}");
    }

    #[test]
    fn the_same_seed_gives_the_same_volumes_and_another_does_not() {
        let a = model(64, 4, 16);
        let b = model(64, 4, 16);
        let c = Model {
            seed: 8,
            ..model(64, 4, 16)
        };
        let vols = |m: &Model| (0..64).map(|h| m.volume(0, 10 * MS, 0, h)).collect::<Vec<_>>();
        assert_eq!(vols(&a), vols(&b));
        assert_ne!(vols(&a), vols(&c));
    }

    #[test]
    fn names_groups_and_windows_read_back() {
        let m = model(300, 5, 32);
        assert_eq!(m.host_of("h00042"), Some(42));
        assert_eq!(m.host_of("h00300"), None);
        assert_eq!(m.host_of("h42"), None);
        assert_eq!(m.event_of("f4"), Some(4));
        assert_eq!(m.event_of("f5"), None);
        let key = m.group_key(3, 1);
        assert_eq!(m.group_of(3, &key), Some(1));
        assert_eq!(m.group_of(3, &GroupKey::default()), None);
        let w: Vec<u64> = m.windows(0, 5 * MS, 40 * MS).collect();
        assert_eq!(w, vec![10 * MS, 20 * MS, 30 * MS]);
        assert!(Model::new(10, 1, 3, 1, 0.5, &[10 * MS], 1).is_err());
        assert!(Model::new(10, 1, 4, 1, 0.0, &[10 * MS], 1).is_err());
        assert!(Model::new(10, 1, 4, 1, 0.5, &[3 * MS], 1).is_err());
    }
}
