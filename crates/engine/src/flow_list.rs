//! The flow lists the sweep walks: per match set and statistics half, the
//! member flows that first wrote that half in its epoch
//! (`crate::match_set::MatchSet::written`).
//!
//! The eight or so triggers a flow matches share its set, so one list per
//! set, not per trigger, names each flow once: a flow's first write in an
//! epoch is one append, not one per trigger, and the sweep reads each
//! flow's entry and statistics once for all its triggers.

/// A flow as a list names it: its entry number. Nothing in the reference
/// says whether it is still valid: the sweep checks the entry (live, in
/// this set, written in the swept epoch) and the half's tag, consumed at
/// the first visit, so a flow listed twice is gathered once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FlowRef {
    pub(crate) entry: u32,
}

/// A list of flows in chunks of at most [`CHUNK`]: compact (4 bytes a
/// flow), appends never move a full chunk. The first chunk's header is
/// inline (most sets list a few flows: the sweep reaches them with one
/// pointer less) and grows by doubling from [`FIRST_CHUNK`]: small lists
/// packed by the allocator share cache lines and sets, where 4 KiB chunks
/// would collide.
#[derive(Debug, Default)]
pub(crate) struct FlowList {
    first: Vec<FlowRef>,
    more: Vec<Vec<FlowRef>>,
}

const CHUNK: usize = 1024;
/// Capacity of a list's first chunk, doubled as it fills.
const FIRST_CHUNK: usize = 4;

impl FlowList {
    /// Appends a flow; `chunked` false keeps one vector (the naive list, for measurements).
    pub(crate) fn push(&mut self, r: FlowRef, chunked: bool) {
        if !chunked {
            self.first.push(r);
            return;
        }
        if self.more.is_empty() && self.first.len() < CHUNK {
            if self.first.len() == self.first.capacity() {
                let n = self.first.len();
                self.first.reserve_exact(n.clamp(FIRST_CHUNK, CHUNK - n));
            }
            self.first.push(r);
            return;
        }
        match self.more.last_mut() {
            Some(c) if c.len() < CHUNK => c.push(r),
            _ => {
                let mut c = Vec::with_capacity(CHUNK);
                c.push(r);
                self.more.push(c);
            }
        }
    }

    pub(crate) fn chunk_count(&self) -> usize {
        1 + self.more.len()
    }

    /// Chunk `k` (`0..chunk_count()`).
    #[inline]
    pub(crate) fn chunk(&self, k: usize) -> Option<&[FlowRef]> {
        match k {
            0 => Some(&self.first),
            _ => self.more.get(k - 1).map(Vec::as_slice),
        }
    }

    /// Where the first chunk's references are (to prefetch them).
    #[inline]
    pub(crate) fn head(&self) -> &[FlowRef] {
        &self.first
    }

    #[cfg(test)]
    pub(crate) fn iter(&self) -> impl Iterator<Item = &FlowRef> {
        self.first.iter().chain(self.more.iter().flatten())
    }

    /// Empties the list, keeping the first chunk's memory.
    pub(crate) fn clear(&mut self) {
        self.first.clear();
        self.more.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.first.len() + self.more.iter().map(Vec::len).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flow_list_chunks() {
        let mut l = FlowList::default();
        for i in 0..2500 {
            l.push(FlowRef { entry: i }, true);
        }
        assert_eq!(l.chunk_count(), 3);
        assert_eq!(
            l.head().len(),
            CHUNK,
            "the first chunk fills before another starts"
        );
        assert_eq!(l.chunk(2).map(<[_]>::len), Some(2500 - 2 * CHUNK));
        let walked: Vec<u32> = l.iter().map(|r| r.entry).collect();
        assert_eq!(walked, (0..2500).collect::<Vec<_>>(), "in append order");
        // Cleared, it keeps the first chunk's memory and fills it again first.
        l.clear();
        assert_eq!((l.chunk_count(), l.len()), (1, 0));
        assert_eq!(l.head().len(), 0);
        l.push(FlowRef { entry: 7 }, true);
        assert_eq!(l.head(), &[FlowRef { entry: 7 }]);
    }
}
