//! The flow lists the sweep walks: one per match set, naming the set's
//! recently active member flows (`crate::match_set::MatchSet::members`).
//!
//! The eight or so triggers a flow matches share its set, so one list per
//! set, not per trigger, names each flow once: a new flow is one append,
//! not one per trigger, and the sweep reads each flow's entry and
//! statistics once for all its triggers.

/// A flow as a list names it: entry number and the entry's listing stamp
/// when it was listed ([`crate::flow_table::FlowEntry::stamp`]). The
/// reference is stale once the entry is listed again (anywhere), freed, or
/// moved to another set ([`crate::flow_table::FlowEntry::listed_by`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FlowRef {
    pub(crate) entry: u32,
    pub(crate) stamp: u32,
}

/// A list of flows in chunks of at most [`CHUNK`]: compact (8 bytes a
/// flow), appends never move a full chunk, and the sweep compacts a chunk in
/// place once it has passed it. The first chunk's header is inline (most
/// sets list a few flows: the sweep reaches them with one pointer less)
/// and grows by doubling from [`FIRST_CHUNK`]: small lists packed by the
/// allocator share cache lines and sets, where 8 KiB chunks would collide.
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
    pub(crate) fn chunk_mut(&mut self, k: usize) -> Option<&mut Vec<FlowRef>> {
        match k {
            0 => Some(&mut self.first),
            _ => self.more.get_mut(k - 1),
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

    /// Drops emptied chunks after the first (except the last, which takes appends).
    pub(crate) fn drop_empty_chunks(&mut self) {
        let n = self.more.len();
        let mut i = 0;
        self.more.retain(|c| {
            i += 1;
            !c.is_empty() || i == n
        });
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
            l.push(FlowRef { entry: i, stamp: 0 }, true);
        }
        assert_eq!(l.chunk_count(), 3);
        assert_eq!(
            l.head().len(),
            CHUNK,
            "the first chunk fills before another starts"
        );
        l.chunk_mut(1).unwrap().clear();
        l.drop_empty_chunks();
        assert_eq!((l.chunk_count(), l.len()), (2, 1476));
        // Appends go to the last chunk even when the first has room again.
        l.chunk_mut(0).unwrap().truncate(10);
        l.push(
            FlowRef {
                entry: 9999,
                stamp: 0,
            },
            true,
        );
        assert_eq!(
            l.iter().last(),
            Some(&FlowRef {
                entry: 9999,
                stamp: 0
            })
        );
    }
}
