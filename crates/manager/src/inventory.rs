//! The host inventory: which hosts there are and which addresses each owns,
//! and the placement of an event's triggers on them.
//!
//! The file has one host per line: its name, then its prefixes; `#` starts
//! a comment.
//!
//! ```text
//! # host   prefixes it owns (IPv4 and IPv6)
//! web-1    10.0.128.0/25  2001:db8:80::/64
//! web-2    10.0.128.128/25
//! ```
//!
//! # Placement
//! Each host is assumed to monitor the traffic of its own addresses (sent
//! and received). An event's trigger goes to every host that may see a
//! packet the event's filters match: for each filter, the hosts owning
//! part of its `dst_ip` prefix (they receive the traffic) or of its
//! `src_ip` prefix (they send it). A filter without either, or naming only
//! addresses no host owns (a service's virtual address, a prefix outside
//! the network: any host may send to it or receive from it), goes to every
//! host. The network-wide value of an aggregate is then the aggregate over
//! all the placed hosts' packets together.

use std::net::IpAddr;

use clarion_lang::spec::{EventSpec, IpPrefix};
use foldhash::{HashMap, HashMapExt};

use crate::ManagerError;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    pub name: String,
    pub prefixes: Vec<IpPrefix>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inventory {
    hosts: Vec<Host>,
    /// Each host's position in `hosts`, by name (transports name hosts on the wire).
    by_name: HashMap<String, usize>,
    /// The owners of the prefixes of each family and length, longest first:
    /// [`Inventory::owner`] probes one table per length present (a handful)
    /// instead of every prefix, once or twice for every packet.
    by_prefix: Vec<PrefixTable>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct PrefixTable {
    v6: bool,
    len: u8,
    /// Masked address bits (as [`bits`]) → host; the later host of two listing one prefix.
    owners: HashMap<u128, usize>,
}

fn prefix_tables(hosts: &[Host]) -> Vec<PrefixTable> {
    let mut tables: Vec<PrefixTable> = Vec::new();
    for (i, h) in hosts.iter().enumerate() {
        for p in &h.prefixes {
            let (b, width) = bits(p.addr);
            let (v6, len) = (width == 128, p.len.min(width));
            let at = match tables.iter().position(|t| t.v6 == v6 && t.len == len) {
                Some(at) => at,
                None => {
                    tables.push(PrefixTable {
                        v6,
                        len,
                        owners: HashMap::new(),
                    });
                    tables.len() - 1
                }
            };
            tables[at].owners.insert(b & mask(len), i);
        }
    }
    tables.sort_by(|a, b| b.len.cmp(&a.len).then(a.v6.cmp(&b.v6)));
    tables
}

/// Network order bits of an address, left-aligned in 128 bits, and its width.
pub(crate) fn bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(v) => ((u128::from(u32::from(v))) << 96, 32),
        IpAddr::V6(v) => (u128::from(v), 128),
    }
}

pub(crate) fn mask(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len))
    }
}

/// True when two prefixes share an address (same family, and the shorter contains the longer).
pub fn overlaps(a: &IpPrefix, b: &IpPrefix) -> bool {
    let ((x, wa), (y, wb)) = (bits(a.addr), bits(b.addr));
    if wa != wb {
        return false;
    }
    let m = mask(a.len.min(b.len));
    x & m == y & m
}

fn parse_prefix(word: &str) -> Result<IpPrefix, String> {
    let (addr, len) = match word.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (word, None),
    };
    let addr: IpAddr = addr.parse().map_err(|_| {
        format!("`{word}` is not an address prefix (write e.g. 10.0.128.0/25 or 2001:db8::/64)")
    })?;
    let width = bits(addr).1;
    let len = match len {
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= width)
            .ok_or_else(|| format!("`{word}`: the prefix length must be 0 to {width}"))?,
        None => width,
    };
    let (b, _) = bits(addr);
    if b & !mask(len) != 0 {
        return Err(format!("`{word}` has bits set beyond its /{len}"));
    }
    Ok(IpPrefix { addr, len })
}

/// The longest host name, in characters: a DNS label's. Host names are
/// ASCII letters, digits, `-` and `_`: each is one token of the NATS
/// subjects of its host (`clarion.host.NAME.poll`), a file and metric label.
pub const MAX_HOST_NAME_LEN: usize = 63;

/// What is wrong with `name` as a host name, if anything (it is not
/// repeated when over-long).
pub fn host_name_problem(name: &str) -> Option<String> {
    if name.len() > MAX_HOST_NAME_LEN {
        return Some(format!(
            "a host name is at most {MAX_HOST_NAME_LEN} characters; this one has {}",
            name.chars().count()
        ));
    }
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    (!ok).then(|| format!("`{name}` cannot be a host name: use letters, digits, `-` and `_` only"))
}

impl Inventory {
    /// Reads the file format of the module documentation.
    pub fn parse(text: &str) -> Result<Inventory, ManagerError> {
        let mut hosts: Vec<Host> = Vec::new();
        let mut by_name = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or_default();
            let mut words = line.split_whitespace();
            let Some(name) = words.next() else { continue };
            let err = |why: String| ManagerError::Inventory { line: i + 1, why };
            if let Some(why) = host_name_problem(name) {
                return Err(err(why));
            }
            if by_name.contains_key(name) {
                return Err(err(format!("host `{name}` is listed twice")));
            }
            let prefixes = words
                .map(parse_prefix)
                .collect::<Result<Vec<_>, _>>()
                .map_err(err)?;
            if prefixes.is_empty() {
                return Err(err(format!(
                    "host `{name}` owns no prefix; list its addresses after its name, e.g. `{name} 10.0.0.0/24`"
                )));
            }
            by_name.insert(name.to_string(), hosts.len());
            hosts.push(Host {
                name: name.to_string(),
                prefixes,
            });
        }
        if hosts.is_empty() {
            return Err(ManagerError::EmptyInventory);
        }
        let by_prefix = prefix_tables(&hosts);
        Ok(Inventory {
            hosts,
            by_name,
            by_prefix,
        })
    }

    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The position of the host named `name`, if the inventory lists it.
    pub fn host_id(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    /// The host owning `addr` (the longest matching prefix), if any.
    pub fn owner(&self, addr: IpAddr) -> Option<usize> {
        let (b, width) = bits(addr);
        let v6 = width == 128;
        self.by_prefix
            .iter()
            .filter(|t| t.v6 == v6)
            .find_map(|t| t.owners.get(&(b & mask(t.len))).copied())
    }

    /// The hosts (indices, ascending) that get a trigger of `event`.
    pub fn placement(&self, event: &EventSpec) -> Vec<usize> {
        let owns = |h: &Host, p: &IpPrefix| h.prefixes.iter().any(|q| overlaps(p, q));
        let sees = |h: &Host, f: &clarion_lang::spec::Filter| {
            f.src_ip.as_ref().is_some_and(|p| owns(h, p)) || f.dst_ip.as_ref().is_some_and(|p| owns(h, p))
        };
        // A filter naming only addresses no host owns (a service's virtual
        // address, an outside prefix): any host may send to them or receive
        // from them.
        // Once per filter, not once per host and filter: that was O(hosts²)
        // per event (1,000 events over 10,000 hosts took minutes to install).
        let anywhere = event
            .filters
            .iter()
            .any(|f| !self.hosts.iter().any(|h| sees(h, f)));
        if anywhere {
            return (0..self.hosts.len()).collect();
        }
        (0..self.hosts.len())
            .filter(|&i| {
                let h = &self.hosts[i];
                event.filters.iter().any(|f| sees(h, f))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clarion_lang::spec::{Filter, Granularity, Pred, Scope};

    const TEXT: &str = "# the test network\nweb-1  10.0.128.0/25 2001:db8:80::/64\nweb-2 10.0.128.128/25 # second half\n\ndb 10.0.200.7\n";

    fn prefix(s: &str) -> IpPrefix {
        parse_prefix(s).expect("prefix")
    }

    fn event(filters: Vec<Filter>) -> EventSpec {
        EventSpec {
            capture: None,
            priority: None,
            name: "e".into(),
            filters,
            predicate: Pred::Num(1.0),
            granularity: Granularity::FIVE_TUPLE,
            interval_ns: 10_000_000,
            scope: Scope::Network,
            drill_downs: Vec::new(),
            on_demand: false,
        }
    }

    #[test]
    fn reads_hosts_prefixes_and_comments() {
        let inv = Inventory::parse(TEXT).expect("valid");
        let names: Vec<&str> = inv.hosts().iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["web-1", "web-2", "db"]);
        assert_eq!(inv.hosts()[0].prefixes.len(), 2);
        assert_eq!(inv.hosts()[2].prefixes, vec![prefix("10.0.200.7/32")]);
        assert_eq!(inv.owner("10.0.128.200".parse().expect("addr")), Some(1));
        assert_eq!(inv.owner("2001:db8:80::9".parse().expect("addr")), Some(0));
        assert_eq!(inv.owner("192.0.2.1".parse().expect("addr")), None);
        assert_eq!((inv.host_id("db"), inv.host_id("web-9")), (Some(2), None));
    }

    #[test]
    fn mistakes_name_the_line() {
        let e = |t: &str| Inventory::parse(t).expect_err("invalid").to_string();
        assert_eq!(
            e("a 10.0.0.0/24\na 10.0.1.0/24"),
            "inventory line 2: host `a` is listed twice"
        );
        assert!(e("a 10.0.0.1/24").contains("bits set beyond its /24"));
        assert!(e("a 10.0.0.0/33").contains("0 to 32"));
        assert!(e("a ten").contains("not an address prefix"));
        assert!(e("a").contains("owns no prefix"));
        assert!(e("# nothing\n").contains("lists no host"));
        assert_eq!(
            e("web.1 10.0.0.0/24"),
            "inventory line 1: `web.1` cannot be a host name: use letters, digits, `-` and `_` only"
        );
        assert_eq!(
            e(&format!("{} 10.0.0.0/24", "h".repeat(64))),
            "inventory line 1: a host name is at most 63 characters; this one has 64"
        );
    }

    #[test]
    fn placement_follows_the_filters_addresses() {
        let inv = Inventory::parse(TEXT).expect("valid");
        let to = |p: &str| Filter {
            dst_ip: Some(prefix(p)),
            ..Filter::default()
        };
        // Traffic to the whole /24: both web hosts.
        assert_eq!(inv.placement(&event(vec![to("10.0.128.0/24")])), vec![0, 1]);
        // To one address of web-2.
        assert_eq!(inv.placement(&event(vec![to("10.0.128.130/32")])), vec![1]);
        // From the database, to web-1's IPv6 prefix: the sender and the receiver.
        let f = Filter {
            src_ip: Some(prefix("10.0.200.7/32")),
            ..to("2001:db8:80::/48")
        };
        assert_eq!(inv.placement(&event(vec![f])), vec![0, 2]);
        // No address condition: everywhere.
        assert_eq!(inv.placement(&event(vec![Filter::default()])), vec![0, 1, 2]);
        // Addresses no host owns (a VIP, an outside prefix): every host.
        assert_eq!(inv.placement(&event(vec![to("192.0.2.0/24")])), vec![0, 1, 2]);
        // ... unless the filter also names owned ones: their owners only.
        let mut vip_from_web = to("192.0.2.10/32");
        vip_from_web.src_ip = Some(prefix("10.0.128.0/25"));
        assert_eq!(inv.placement(&event(vec![vip_from_web])), vec![0]);
        assert!(overlaps(&prefix("10.0.0.0/8"), &prefix("10.1.2.3/32")));
        assert!(!overlaps(&prefix("10.0.0.0/8"), &prefix("::/0")));
    }

    proptest::proptest! {
        /// The prefix tables find the owner the longest matching prefix
        /// names, as a scan over every prefix does (ties: the later host).
        #[test]
        fn owner_is_the_longest_matching_prefix(
            nets in proptest::collection::vec((0u8..4, 0u8..=32, proptest::bool::ANY), 1..12),
            probes in proptest::collection::vec((0u8..4, proptest::num::u8::ANY, proptest::bool::ANY), 1..40),
        ) {
            let text: String = nets
                .iter()
                .enumerate()
                .map(|(i, (a, len, v6))| {
                    let p = if *v6 {
                        let l = u16::from(*len) * 4;
                        let bits = u128::from(*a) << 120;
                        format!("{}/{l}", std::net::Ipv6Addr::from(bits & mask(l as u8)))
                    } else {
                        let bits = u32::from(*a) << 30;
                        let m = if *len == 0 { 0 } else { u32::MAX << (32 - u32::from(*len)) };
                        format!("{}/{len}", std::net::Ipv4Addr::from(bits & m))
                    };
                    format!("h{i} {p}\n")
                })
                .collect();
            let inv = Inventory::parse(&text).expect("inventory");
            for (a, low, v6) in probes {
                let addr: IpAddr = if v6 {
                    std::net::Ipv6Addr::from((u128::from(a) << 120) | u128::from(low)).into()
                } else {
                    std::net::Ipv4Addr::from((u32::from(a) << 30) | u32::from(low)).into()
                };
                let one = IpPrefix { addr, len: bits(addr).1 };
                let scan = inv
                    .hosts
                    .iter()
                    .enumerate()
                    .flat_map(|(i, h)| h.prefixes.iter().map(move |p| (i, p)))
                    .filter(|(_, p)| overlaps(p, &one))
                    .max_by_key(|(_, p)| p.len)
                    .map(|(i, _)| i);
                proptest::prop_assert_eq!(inv.owner(addr), scan, "{} in {}", addr, text);
            }
        }
    }
}
