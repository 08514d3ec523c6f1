//! ClassBench parameter files ("seeds"): the statistics of one real filter
//! set, read into tables that `gen.rs` draws rule sets from.
//!
//! # Format
//!
//! A file is a sequence of sections, each a line `-name`, data lines, and
//! a line `#` (ClassBench's `db_generator` reads them; Fingerhut's
//! `parameter_files/README.md`, named in `seeds/README.md`, documents the
//! format). The sections read here:
//!
//! - `-scale`: the rule count of the analysed set.
//! - `-prots`: per protocol (0 = wildcard), the fraction of rules, then 25
//!   fractions, one per port pair class in [`PAIRS`] order.
//! - `-spar`, `-spem`, `-dpar`, `-dpem`: `fraction lo:hi` lines, the
//!   source and destination arbitrary ranges and exact ports.
//! - one section per port pair class (`-wc_wc` .. `-em_em`): lines
//!   `total,fraction src,fraction ...`, the joint distribution of the source
//!   and destination prefix lengths given the class (total length first,
//!   then the source length given the total).
//! - `-snest`, `-dnest`: the most prefixes of one side that nest.
//! - `-sskew`, `-dskew`: per depth of the prefix tree, the fractions of
//!   nodes with one and two children and the mean skew of two-child nodes.
//!
//! `-flags` (TCP flags), `-extra` and `-pcorr` (source/destination address
//! correlation) are accepted and skipped: [`crate::Rule`] has no flags or
//! extra field, and the generator does not model the correlation.
//!
//! Fractions are weights: `db_generator` treats the last of a list as
//! "the rest"; here every list is renormalised when drawn from, which is
//! the same for the published files (their lists sum to 1 within 1e-6).

use crate::error::ClassifyError;

/// One port condition class (ClassBench, section 3.3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortClass {
    /// Any port.
    Wc,
    /// 1024..=65535.
    Hi,
    /// 0..=1023.
    Lo,
    /// An arbitrary range from the `-spar`/`-dpar` list.
    Ar,
    /// An exact port from the `-spem`/`-dpem` list.
    Em,
}

/// The 25 port pair classes (source, destination) in the order of the
/// `-prots` columns; the prefix-length section of class `i` is named
/// `-{src}_{dst}` in lower case.
pub const PAIRS: [(PortClass, PortClass); 25] = {
    use PortClass::*;
    [
        (Wc, Wc),
        (Wc, Hi),
        (Hi, Wc),
        (Hi, Hi),
        (Wc, Lo),
        (Lo, Wc),
        (Hi, Lo),
        (Lo, Hi),
        (Lo, Lo),
        (Wc, Ar),
        (Ar, Wc),
        (Hi, Ar),
        (Ar, Hi),
        (Wc, Em),
        (Em, Wc),
        (Hi, Em),
        (Em, Hi),
        (Lo, Ar),
        (Ar, Lo),
        (Lo, Em),
        (Em, Lo),
        (Ar, Ar),
        (Ar, Em),
        (Em, Ar),
        (Em, Em),
    ]
};

impl PortClass {
    fn name(self) -> &'static str {
        match self {
            PortClass::Wc => "wc",
            PortClass::Hi => "hi",
            PortClass::Lo => "lo",
            PortClass::Ar => "ar",
            PortClass::Em => "em",
        }
    }
}

/// A protocol's share of the rules and its port pair classes' shares.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtoRow {
    /// `None`: the rules' protocol is a wildcard (0 in the file).
    pub proto: Option<u8>,
    pub weight: f64,
    /// Indexed as [`PAIRS`].
    pub classes: [f64; 25],
}

/// One total prefix length of a port pair class: its weight and the
/// source lengths given it (the destination's is `total - src`).
#[derive(Debug, Clone, PartialEq)]
pub struct LenRow {
    pub total: u8,
    pub weight: f64,
    pub src: Vec<(u8, f64)>,
}

/// A port list entry: weight, low, high.
pub type PortEntry = (f64, u16, u16);

/// One depth of a prefix tree: fractions of nodes with one and with two
/// children, and the mean skew (1 - light/heavy subtree weight) of
/// two-child nodes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Skew {
    pub one_child: f64,
    pub two_children: f64,
    pub skew: f64,
}

/// One side's (source or destination) address parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Tree {
    /// The most prefixes of this side one address can match.
    pub nest: u32,
    /// Indexed by depth 0..=32; depths the file omits are "one child".
    pub skew: [Skew; 33],
}

/// A parsed parameter file.
#[derive(Debug, Clone, PartialEq)]
pub struct Seed {
    pub scale: usize,
    pub protos: Vec<ProtoRow>,
    pub spar: Vec<PortEntry>,
    pub spem: Vec<PortEntry>,
    pub dpar: Vec<PortEntry>,
    pub dpem: Vec<PortEntry>,
    /// Indexed as [`PAIRS`].
    pub lengths: Vec<Vec<LenRow>>,
    pub src: Tree,
    pub dst: Tree,
}

/// ClassBench's `acl1_seed` (see `seeds/README.md` for origin and terms).
pub const ACL1: &str = include_str!("../seeds/acl1_seed");
/// ClassBench's `fw1_seed` (see `seeds/README.md` for origin and terms).
pub const FW1: &str = include_str!("../seeds/fw1_seed");

fn err(line: usize, reason: impl Into<String>) -> ClassifyError {
    ClassifyError::SeedFormat {
        line,
        reason: reason.into(),
    }
}

fn num<T: std::str::FromStr>(line: usize, s: &str, what: &str) -> Result<T, ClassifyError> {
    s.parse()
        .map_err(|_| err(line, format!("{what} {s:?} is not a number of the expected kind")))
}

fn weight(line: usize, s: &str) -> Result<f64, ClassifyError> {
    let w: f64 = num(line, s, "fraction")?;
    if !(0.0..=1.0 + 1e-6).contains(&w) {
        return Err(err(line, format!("fraction {w} is outside 0..1")));
    }
    Ok(w)
}

/// `a,b` into its two halves.
fn pair(line: usize, s: &str) -> Result<(&str, &str), ClassifyError> {
    s.split_once(',')
        .ok_or_else(|| err(line, format!("{s:?} is not a `value,fraction` pair")))
}

fn port(line: usize, s: &str) -> Result<u16, ClassifyError> {
    num(line, s, "port")
}

fn prefix_len(line: usize, s: &str) -> Result<u8, ClassifyError> {
    let v: u8 = num(line, s, "prefix length")?;
    Ok(v)
}

/// The data lines of one section with their 1-based line numbers.
type Lines<'a> = Vec<(usize, Vec<&'a str>)>;

fn ports(lines: &Lines<'_>) -> Result<Vec<PortEntry>, ClassifyError> {
    lines
        .iter()
        .map(|(n, t)| {
            let [w, range] = t.as_slice() else {
                return Err(err(*n, "a port line is `fraction lo:hi`"));
            };
            let (lo, hi) = range
                .split_once(':')
                .ok_or_else(|| err(*n, format!("{range:?} is not `lo:hi`")))?;
            let (lo, hi) = (port(*n, lo)?, port(*n, hi)?);
            if lo > hi {
                return Err(err(*n, format!("port range {lo}:{hi} is empty")));
            }
            Ok((weight(*n, w)?, lo, hi))
        })
        .collect()
}

fn lengths(lines: &Lines<'_>) -> Result<Vec<LenRow>, ClassifyError> {
    lines
        .iter()
        .map(|(n, t)| {
            let Some((first, rest)) = t.split_first() else {
                return Err(err(*n, "an empty prefix-length line"));
            };
            let (total, w) = pair(*n, first)?;
            let total = prefix_len(*n, total)?;
            if total > 64 {
                return Err(err(*n, format!("total prefix length {total} is above 64")));
            }
            let src = rest
                .iter()
                .map(|s| {
                    let (len, w) = pair(*n, s)?;
                    let len = prefix_len(*n, len)?;
                    if len > 32 || len > total || total - len > 32 {
                        return Err(err(
                            *n,
                            format!("source length {len} does not fit total {total} (each side 0..=32)"),
                        ));
                    }
                    Ok((len, weight(*n, w)?))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if src.is_empty() {
                return Err(err(*n, format!("total length {total} has no source lengths")));
            }
            Ok(LenRow {
                total,
                weight: weight(*n, w)?,
                src,
            })
        })
        .collect()
}

fn single<T: std::str::FromStr>(name: &str, lines: &Lines<'_>, at: usize) -> Result<T, ClassifyError> {
    match lines.as_slice() {
        [(n, t)] if t.len() == 1 => num(*n, t[0], name),
        _ => Err(err(at, format!("-{name} holds one number"))),
    }
}

fn tree(nest: u32, lines: &Lines<'_>) -> Result<Tree, ClassifyError> {
    let one = Skew {
        one_child: 1.0,
        two_children: 0.0,
        skew: 1.0,
    };
    let mut skew = [one; 33];
    for (n, t) in lines {
        let [d, p1, p2, s] = t.as_slice() else {
            return Err(err(*n, "a skew line is `depth one_child two_children skew`"));
        };
        let d: usize = num(*n, d, "depth")?;
        let slot = skew
            .get_mut(d)
            .ok_or_else(|| err(*n, format!("depth {d} is above 32")))?;
        *slot = Skew {
            one_child: weight(*n, p1)?,
            two_children: weight(*n, p2)?,
            skew: weight(*n, s)?,
        };
    }
    if nest == 0 {
        return Err(err(0, "a nesting threshold of 0 allows no prefix"));
    }
    Ok(Tree { nest, skew })
}

impl Seed {
    /// Reads a parameter file. Every section listed in the module doc must
    /// be there; unknown sections, malformed lines and impossible values
    /// (a fraction outside 0..1, a port range low above high, a source
    /// prefix longer than its total, a protocol whose port classes have no
    /// weight, a class or port list drawn from but empty) are refused with
    /// the line at fault.
    pub fn parse(text: &str) -> Result<Seed, ClassifyError> {
        let mut sections: Vec<(&str, usize, Lines<'_>)> = Vec::new();
        let mut open: Option<(&str, usize, Lines<'_>)> = None;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let line = raw.trim();
            if line.is_empty() {
                continue;
            }
            match (&mut open, line) {
                (None, l) => {
                    let name = l
                        .strip_prefix('-')
                        .ok_or_else(|| err(n, format!("expected a `-section` line, found {l:?}")))?;
                    open = Some((name, n, Vec::new()));
                }
                (Some(_), "#") => {
                    if let Some(s) = open.take() {
                        sections.push(s);
                    }
                }
                (Some((_, _, lines)), l) => lines.push((n, l.split_whitespace().collect())),
            }
        }
        if let Some((name, n, _)) = open {
            return Err(err(n, format!("section -{name} is not closed by `#`")));
        }
        let end = text.lines().count();
        let mut take = |name: &str| -> Result<(usize, Lines<'_>), ClassifyError> {
            let i = sections
                .iter()
                .position(|s| s.0 == name)
                .ok_or_else(|| err(end, format!("section -{name} is missing")))?;
            let (_, at, lines) = sections.swap_remove(i);
            Ok((at, lines))
        };
        let (at, l) = take("scale")?;
        let scale = single("scale", &l, at)?;
        let (_, l) = take("prots")?;
        let protos = l
            .iter()
            .map(|(n, t)| {
                if t.len() != 27 {
                    return Err(err(*n, format!("a -prots line has 27 columns, not {}", t.len())));
                }
                let p: u8 = num(*n, t[0], "protocol")?;
                let mut classes = [0.0; 25];
                for (c, s) in classes.iter_mut().zip(&t[2..]) {
                    *c = weight(*n, s)?;
                }
                if classes.iter().sum::<f64>() <= 0.0 {
                    return Err(err(*n, format!("protocol {p} has no port class with weight")));
                }
                Ok(ProtoRow {
                    proto: (p != 0).then_some(p),
                    weight: weight(*n, t[1])?,
                    classes,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (spar, spem, dpar, dpem) = (
            ports(&take("spar")?.1)?,
            ports(&take("spem")?.1)?,
            ports(&take("dpar")?.1)?,
            ports(&take("dpem")?.1)?,
        );
        let mut tables = Vec::with_capacity(PAIRS.len());
        for (s, d) in PAIRS {
            let (_, l) = take(&format!("{}_{}", s.name(), d.name()))?;
            tables.push(lengths(&l)?);
        }
        let (at, l) = take("snest")?;
        let snest = single("snest", &l, at)?;
        let src = tree(snest, &take("sskew")?.1)?;
        let (at, l) = take("dnest")?;
        let dnest = single("dnest", &l, at)?;
        let dst = tree(dnest, &take("dskew")?.1)?;
        for skipped in ["flags", "extra", "pcorr"] {
            take(skipped)?;
        }
        if let Some((name, n, _)) = sections.first() {
            return Err(err(*n, format!("unknown or repeated section -{name}")));
        }
        let seed = Seed {
            scale,
            protos,
            spar,
            spem,
            dpar,
            dpem,
            lengths: tables,
            src,
            dst,
        };
        seed.check_drawable()?;
        Ok(seed)
    }

    /// Every class some protocol draws needs its prefix-length table and
    /// the port lists its AR and EM sides draw from.
    fn check_drawable(&self) -> Result<(), ClassifyError> {
        if self.protos.iter().map(|p| p.weight).sum::<f64>() <= 0.0 {
            return Err(err(0, "-prots gives no protocol a weight"));
        }
        for (i, &(s, d)) in PAIRS.iter().enumerate() {
            if !self.protos.iter().any(|p| p.classes[i] > 0.0) {
                continue;
            }
            let name = format!("{}_{}", s.name(), d.name());
            if self.lengths[i].is_empty() {
                return Err(err(0, format!("class {name} is drawn but -{name} is empty")));
            }
            for (class, list, list_name) in [
                (s, &self.spar, "spar"),
                (s, &self.spem, "spem"),
                (d, &self.dpar, "dpar"),
                (d, &self.dpem, "dpem"),
            ] {
                let needs = matches!(
                    (class, list_name),
                    (PortClass::Ar, "spar" | "dpar") | (PortClass::Em, "spem" | "dpem")
                );
                if needs && list.is_empty() {
                    return Err(err(0, format!("class {name} is drawn but -{list_name} is empty")));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_seeds_parse() {
        let acl = Seed::parse(ACL1).expect("acl1_seed");
        assert_eq!(acl.scale, 733);
        assert_eq!(acl.protos.len(), 4);
        let tcp = acl.protos.iter().find(|p| p.proto == Some(6)).expect("tcp row");
        assert!((tcp.weight - 0.873_124_12).abs() < 1e-9);
        assert!((tcp.classes[13] - 0.653_124_99).abs() < 1e-9, "wc_em");
        assert_eq!(acl.protos[0].proto, None, "0 is the wildcard");
        assert!(acl.spar.is_empty());
        assert_eq!(acl.dpem[0].1, acl.dpem[0].2);
        assert_eq!((acl.src.nest, acl.dst.nest), (4, 4));
        let wc_em = &acl.lengths[13];
        assert_eq!(wc_em.len(), 8);
        assert_eq!(wc_em[3].total, 54);
        assert_eq!(wc_em[3].src, vec![(23, 0.052_631_58), (32, 0.947_368_44)]);

        let fw = Seed::parse(FW1).expect("fw1_seed");
        assert_eq!(fw.scale, 283);
        assert_eq!(fw.protos.len(), 5);
        assert_eq!(fw.protos[4].proto, Some(47));
        assert_eq!(fw.spar, vec![(1.0, 33434, 33600)]);
        assert_eq!(fw.dpem.len(), 40);
        assert_eq!(fw.lengths[3].len(), 3, "hi_hi");
        assert!((fw.src.skew[3].skew - 0.0).abs() < 1e-12);
        assert!((fw.dst.skew[31].two_children - 0.156_862_75).abs() < 1e-9);
    }

    /// Each way a file can be wrong names its line.
    #[test]
    fn refuses_bad_files() {
        let open = ACL1.trim_end().strip_suffix('#').expect("ends with #");
        let e = Seed::parse(open).expect_err("open section").to_string();
        assert!(e.contains("-pcorr is not closed"), "{e}");
        let cases: [(&str, &str, &str); 6] = [
            ("-scale\n733\n#", "-scale\nmany\n#", "not a number"),
            ("-snest\n4\n#", "-snest\n4\n#\n-bogus\n#", "unknown"),
            ("-dskew\n", "-dskew\n40\t0.5\t0.5\t0.5\n", "above 32"),
            ("17\t0.01091405", "17\t1.5", "outside 0..1"),
            (
                "64,0.84705883\t32,1.00000000",
                "64,0.84705883\t33,1.0",
                "does not fit",
            ),
            ("0.18823530\t1521:1521", "0.18823530\t1521:20", "empty"),
        ];
        for (from, to, why) in cases {
            assert!(ACL1.contains(from), "{from:?}");
            let bad = ACL1.replacen(from, to, 1);
            let e = Seed::parse(&bad).expect_err(why).to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
        let missing = ACL1.replacen("-pcorr", "-pcorrx", 1);
        assert!(Seed::parse(&missing).is_err());
        // A class drawn from a list the file leaves empty.
        let (head, tail) = FW1.split_once("-dpem\n").expect("-dpem");
        let (_, rest) = tail.split_once("#\n").expect("end of -dpem");
        let e = Seed::parse(&format!("{head}-dpem\n#\n{rest}")).expect_err("no dpem");
        assert!(e.to_string().contains("-dpem is empty"), "{e}");
    }
}
