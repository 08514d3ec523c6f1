//! A threshold on an integer sum, tested without floating point.
//!
//! The sweep tests most triggers as `sum(x) op c` on each flow of the
//! swept epoch (`monitor/sweep.rs`): the sum is an integer, and its value
//! is its conversion to `f64` compared with the constant `c` (which
//! rounds above 2^53). Converting and matching on `op` for every flow and
//! trigger was a third of a sweep's instructions; this turns the test
//! into two integer comparisons, exactly.
//!
//! # Why it is exact
//! Conversion from `i64` to `f64` rounds to nearest, so it is monotone
//! (non-decreasing): `x <= y` implies `x as f64 <= y as f64`. Hence the
//! integers passing `x as f64 > c` (or `>=`) are all those from some
//! first one up, those passing `<` or `<=` all those below some first
//! failing one, those passing `==` the integers between the first passing
//! `>= c` and the first passing `> c` (one interval, possibly empty), and
//! those passing `!=` its complement (none when `c` is NaN, as
//! `trigger::compare` says). Each bound is found by bisection over the
//! whole `i64` range on the very comparison the general path makes, so
//! no reasoning about rounding modes is needed; the test beside checks
//! the ranges against that comparison at and around every bound.
//!
//! # Cost
//! Built once per threshold (two bisections of 64 steps, when a trigger
//! is installed); a test is a subtraction, one comparison and an xor
//! ([`IntRange::span`]).

use clarion_lang::spec::CmpOp;

/// The `i64` values for which `x as f64 op c` holds: `lo..=hi`, or its
/// complement when `invert`. See the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IntRange {
    lo: i64,
    hi: i64,
    invert: bool,
}

/// No integer.
const EMPTY: IntRange = IntRange {
    lo: 0,
    hi: -1,
    invert: false,
};

impl IntRange {
    /// The integers `x` for which `compare(op, x as f64, c)` holds.
    pub(crate) fn of(op: CmpOp, c: f64) -> IntRange {
        let range = |lo: Option<i64>, end: Option<i64>| match lo {
            // `end` is the first integer past the range (`None`: none is).
            Some(lo) => match end {
                Some(i64::MIN) => EMPTY,
                Some(end) if end <= lo => EMPTY,
                Some(end) => IntRange {
                    lo,
                    hi: end - 1,
                    invert: false,
                },
                None => IntRange {
                    lo,
                    hi: i64::MAX,
                    invert: false,
                },
            },
            None => EMPTY,
        };
        let at_least = first(|x| x as f64 >= c);
        let above = first(|x| x as f64 > c);
        match op {
            CmpOp::Gt => range(above, None),
            CmpOp::Ge => range(at_least, None),
            CmpOp::Lt => range(Some(i64::MIN), first(|x| !(x as f64).lt(&c))),
            CmpOp::Le => range(Some(i64::MIN), first(|x| !(x as f64).le(&c))),
            CmpOp::Eq => range(at_least, above),
            CmpOp::Ne if c.is_nan() => EMPTY,
            CmpOp::Ne => IntRange {
                invert: true,
                ..range(at_least, above)
            },
        }
    }

    /// Whether the threshold holds for the sum `x`: the plain form, which
    /// the tests hold [`IntRange::span`] to.
    #[cfg(test)]
    pub(crate) fn contains(&self, x: i64) -> bool {
        (self.lo <= x && x <= self.hi) != self.invert
    }

    /// The integers it holds for as at most two intervals (`lo..=hi`).
    fn intervals(&self) -> impl Iterator<Item = (i64, i64)> {
        let inside = (!self.invert && self.lo <= self.hi).then_some((self.lo, self.hi));
        let (below, above) = match (self.invert, self.lo <= self.hi) {
            (true, true) => (
                (self.lo > i64::MIN).then(|| (i64::MIN, self.lo - 1)),
                (self.hi < i64::MAX).then(|| (self.hi + 1, i64::MAX)),
            ),
            // The complement of nothing.
            (true, false) => (Some((i64::MIN, i64::MAX)), None),
            (false, _) => (None, None),
        };
        inside.into_iter().chain(below).chain(above)
    }

    /// The range as a start, a width and a flip, for a test without
    /// branches: `x` is in it iff `(x - start) as u64 <= width` differs
    /// from `flip` (one subtraction and one compare, where `contains`
    /// takes two compares and their branches).
    #[inline]
    pub(crate) fn span(&self) -> (i64, u64, bool) {
        if self.hi < self.lo {
            // Empty: every `x` is "inside" the full width, flipped.
            (0, u64::MAX, !self.invert)
        } else {
            (self.lo, self.hi.wrapping_sub(self.lo) as u64, self.invert)
        }
    }
}

/// The smallest `i64` for which `pred` holds, `pred` being false below
/// some point and true from it on; `None` if it holds for none.
fn first(pred: impl Fn(i64) -> bool) -> Option<i64> {
    // The answer lies in `lo..=hi`, `hi` one past `i64::MAX` meaning none.
    let (mut lo, mut hi) = (i128::from(i64::MIN), i128::from(i64::MAX) + 1);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        // `mid < hi <= i64::MAX + 1`: it is an `i64`.
        if pred(mid as i64) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    i64::try_from(lo).ok()
}

/// The integers for which any of `ranges` holds, as disjoint intervals
/// (`lo..=hi`) in order, into `out` (emptied first; reused so that a
/// sweep allocates nothing): a sweep tests a flow's sum against the union
/// of its set's thresholds on that sum once, not against each.
pub(crate) fn union_into(ranges: impl Iterator<Item = IntRange>, out: &mut Vec<(i64, i64)>) {
    out.clear();
    for r in ranges {
        out.extend(r.intervals());
    }
    out.sort_unstable();
    let mut merged = 0usize;
    for i in 0..out.len() {
        let (lo, hi) = out[i];
        match merged.checked_sub(1).map(|m| &mut out[m]) {
            // Overlapping or adjacent: one interval.
            Some(last) if i128::from(lo) <= i128::from(last.1) + 1 => last.1 = last.1.max(hi),
            _ => {
                out[merged] = (lo, hi);
                merged += 1;
            }
        }
    }
    out.truncate(merged);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trigger::compare;

    const OPS: [CmpOp; 6] = [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge, CmpOp::Eq, CmpOp::Ne];

    /// Constants at every kind of edge: integers, halves, where f64 stops
    /// holding every integer (2^53), near `i64`'s ends, infinities, NaN.
    fn constants() -> Vec<f64> {
        let mut cs = vec![
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.0,
            4.0,
            4.5,
            -7.25,
            9_007_199_254_740_992.0,  // 2^53
            9_007_199_254_740_994.0,  // 2^53 + 2
            -9_007_199_254_740_992.0, // -2^53
            9.223_372_036_854_775e18,
            9_223_372_036_854_775_807.0, // rounds to 2^63
            -9_223_372_036_854_775_808.0,
            1e300,
            -1e300,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
        ];
        // Pseudo-random constants of every magnitude (a fixed LCG: the test is the same every run).
        let mut s: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..300 {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            let mag = (s >> 58) as i32; // 0..63
            let frac = (s >> 11) as f64 / (1u64 << 53) as f64;
            let sign = if s & 1 == 0 { 1.0 } else { -1.0 };
            cs.push(sign * frac * 2f64.powi(mag));
            cs.push((sign * frac * 2f64.powi(mag)).round());
        }
        cs
    }

    /// Integers to try against `c`: around its truncation, every bound
    /// the range found, and both ends of `i64`.
    fn probes(c: f64, r: &IntRange) -> Vec<i64> {
        let mut xs = vec![i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX];
        let near = |x: i64| (-3..=3).map(move |d| x.saturating_add(d));
        if c.is_finite() {
            // `as` saturates: the nearest `i64`.
            xs.extend(near(c as i64));
            // Integers whose f64 neighbours straddle c above 2^53.
            xs.extend(near((c as i64).saturating_add(1 << 12)));
            xs.extend(near((c as i64).saturating_sub(1 << 12)));
        }
        xs.extend(near(r.lo));
        xs.extend(near(r.hi));
        xs
    }

    #[test]
    fn a_range_holds_exactly_the_integers_the_comparison_passes() {
        for c in constants() {
            for op in OPS {
                let r = IntRange::of(op, c);
                for x in probes(c, &r) {
                    assert_eq!(
                        r.contains(x),
                        compare(op, x as f64, c),
                        "{x} {op:?} {c:e}: range {r:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn ranges_of_plain_thresholds() {
        assert_eq!(
            IntRange::of(CmpOp::Gt, 4.0),
            IntRange {
                lo: 5,
                hi: i64::MAX,
                invert: false
            }
        );
        assert_eq!(
            IntRange::of(CmpOp::Ge, 4.5),
            IntRange {
                lo: 5,
                hi: i64::MAX,
                invert: false
            }
        );
        assert_eq!(
            IntRange::of(CmpOp::Lt, 4.0),
            IntRange {
                lo: i64::MIN,
                hi: 3,
                invert: false
            }
        );
        assert_eq!(IntRange::of(CmpOp::Eq, 4.5), EMPTY);
        assert_eq!(
            IntRange::of(CmpOp::Ne, 4.0),
            IntRange {
                lo: 4,
                hi: 4,
                invert: true
            }
        );
        assert_eq!(IntRange::of(CmpOp::Gt, f64::NAN), EMPTY);
        assert_eq!(
            IntRange::of(CmpOp::Lt, f64::INFINITY),
            IntRange {
                lo: i64::MIN,
                hi: i64::MAX,
                invert: false
            }
        );
        assert_eq!(IntRange::of(CmpOp::Lt, i64::MIN as f64), EMPTY);
    }

    /// Sums at the ends of `i64` and around small thresholds.
    const EDGES: [i64; 12] = [
        i64::MIN,
        i64::MIN + 1,
        -7,
        -1,
        0,
        1,
        2,
        7,
        8,
        100,
        i64::MAX - 1,
        i64::MAX,
    ];

    #[test]
    fn a_span_holds_what_its_range_holds() {
        let edges = EDGES;
        let mut ranges = vec![EMPTY];
        for &lo in &edges {
            for &hi in &edges {
                for invert in [false, true] {
                    ranges.push(IntRange { lo, hi, invert });
                }
            }
        }
        ranges.push(IntRange {
            invert: true,
            ..EMPTY
        });
        for r in ranges {
            let (start, width, flip) = r.span();
            for &x in &edges {
                let held = (x.wrapping_sub(start) as u64 <= width) != flip;
                assert_eq!(held, r.contains(x), "{r:?} at {x}");
            }
        }
    }

    #[test]
    fn a_union_holds_where_any_of_its_ranges_does() {
        let edges = EDGES;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..2_000 {
            let n = 1 + next() as usize % 4;
            let ranges: Vec<IntRange> = (0..n)
                .map(|_| {
                    let (op, c) = (
                        OPS[next() as usize % OPS.len()],
                        edges[next() as usize % edges.len()],
                    );
                    IntRange::of(op, c as f64 + [0.0, 0.5, -0.5][next() as usize % 3])
                })
                .collect();
            let mut spans = vec![(5, 5)];
            union_into(ranges.iter().copied(), &mut spans);
            for w in spans.windows(2) {
                assert!(w[0].1 < w[1].0, "in order and apart: {spans:?}");
            }
            for v in edges
                .iter()
                .flat_map(|&e| [e.wrapping_sub(1), e, e.wrapping_add(1)])
            {
                let any = ranges.iter().any(|r| r.contains(v));
                let held = spans.iter().any(|&(lo, hi)| (lo..=hi).contains(&v));
                assert_eq!(held, any, "{ranges:?} at {v}: {spans:?}");
            }
        }
    }
}
