//! Times a monitor could not see its input, as its driver says (a live
//! interface down or away): a window overlapping one is not complete,
//! however quiet it looks. The engine reads no clock and no interface;
//! the driver notes each span ([`crate::Monitor::note_blind`]), and an
//! ongoing outage again with a later end as time passes.

/// Disjoint half-open spans `[from, to)` of Unix nanoseconds, in time order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct BlindSpans(Vec<(u64, u64)>);

impl BlindSpans {
    /// Adds `[from, to)`, merged with every span it overlaps or touches
    /// (so an outage noted again with a later end stays one span).
    pub(crate) fn add(&mut self, from: u64, to: u64) {
        if to <= from {
            return;
        }
        // Spans before `i` end before `from`; those in `i..j` touch it.
        let i = self.0.partition_point(|&(_, t)| t < from);
        let (mut f, mut t) = (from, to);
        let mut j = i;
        while let Some(&(sf, st)) = self.0.get(j) {
            if sf > t {
                break;
            }
            f = f.min(sf);
            t = t.max(st);
            j += 1;
        }
        self.0.splice(i..j, [(f, t)]);
    }

    /// Nanoseconds of `[start, end)` inside some span.
    pub(crate) fn overlap_ns(&self, start: u64, end: u64) -> u64 {
        self.0
            .iter()
            .map(|&(f, t)| t.min(end).saturating_sub(f.max(start)))
            .sum()
    }

    pub(crate) fn overlaps(&self, start: u64, end: u64) -> bool {
        self.overlap_ns(start, end) > 0
    }

    /// Forgets the spans that end at or before `t` (no window left to close reaches them).
    pub(crate) fn forget_to(&mut self, t: u64) {
        self.0.retain(|&(_, e)| e > t);
    }

    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }

    pub(crate) fn take(&mut self) -> BlindSpans {
        std::mem::take(self)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_merge_when_they_touch_and_overlap_is_measured() {
        let mut b = BlindSpans::default();
        b.add(100, 200);
        // An ongoing outage noted again with later ends stays one span.
        b.add(100, 250);
        b.add(100, 300);
        assert_eq!(b.iter().collect::<Vec<_>>(), [(100, 300)]);
        b.add(500, 600);
        b.add(10, 20);
        b.add(7, 7); // empty: ignored
        assert_eq!(b.iter().collect::<Vec<_>>(), [(10, 20), (100, 300), (500, 600)]);
        // Bridging two spans joins them.
        b.add(250, 500);
        assert_eq!(b.iter().collect::<Vec<_>>(), [(10, 20), (100, 600)]);
        assert_eq!(b.overlap_ns(0, 1000), 10 + 500);
        assert_eq!(b.overlap_ns(20, 100), 0, "half-open on both sides");
        assert!(!b.overlaps(20, 100));
        assert!(b.overlaps(599, 700));
        b.forget_to(20);
        assert_eq!(b.iter().collect::<Vec<_>>(), [(100, 600)]);
    }
}
