//! A sweep's firings of triggers tested flow by flow, kept small until the
//! sweep ends, then made into reports once, in their canonical order.
//!
//! At a million flows a sweep makes tens of thousands of reports (0.11 a
//! packet in the benchmark: a flow has less than one packet a window, and
//! its lowest threshold fires on every second). Each report is ~300 bytes.
//! Made as each flow fired, a report was built, pushed, then read at a
//! random place by the sort into the canonical order and moved to the
//! output: two moves of every report through memory far larger than the
//! caches, and that, with the sort, was most of the sweep (median 5.7 to
//! 9.7 ms a 1 M-flow sweep with reports, 2.1 ms without them, same run).
//! Here a firing is its trigger, its group and where its values are (~70
//! bytes, written in sequence); the order is computed over the firings
//! and the reports made the usual way (windows closed after the gather),
//! and each firing's report is built once, straight into the output.
//!
//! Invariants: every firing shares the sweep's window and completeness
//! (those of the triggers tested flow by flow: the swept epoch's). A
//! trigger removed during the sweep has no report of it (its window being
//! swept is dropped, as `Monitor::remove` says; before, the reports of the
//! flows visited by then came out, a part of the window): a trigger's
//! number is never given to another, so its firings are told by it. Used
//! only where the sweep's reports go to `out` as they are (not to the
//! merger, not in degraded mode, which read and amend the reports of each
//! trigger before the sweep ends).

use clarion_report::{canonical_order_by, Completeness, GroupKey, Origin, Report, SortParts, Window};

use crate::trigger::Trigger;
use crate::trigger_index::TriggerId;

/// One flow's firing of a trigger tested flow by flow.
#[derive(Clone, Copy, Debug)]
struct Firing {
    tid: TriggerId,
    /// Where its values start in [`Firings::values`] (as many as its
    /// trigger has value names).
    values_at: u32,
    group: GroupKey,
}

/// The firings of one sweep. See the module documentation.
#[derive(Debug, Default)]
pub(super) struct Firings {
    firings: Vec<Firing>,
    values: Vec<f64>,
}

/// What every report of a sweep's firings shares.
pub(super) struct Shared<'a> {
    pub(super) window: Window,
    pub(super) origin: &'a Origin,
    pub(super) completeness: Completeness,
}

impl Firings {
    #[inline]
    pub(super) fn push(&mut self, tid: TriggerId, group: GroupKey, values: &[f64]) {
        self.firings.push(Firing {
            tid,
            values_at: self.values.len() as u32,
            group,
        });
        self.values.extend_from_slice(values);
    }

    pub(super) fn len(&self) -> usize {
        self.firings.len()
    }

    pub(super) fn capacity(&self) -> usize {
        self.firings.capacity()
    }

    /// Keeps room for at most `keep` firings (and their values at the same ratio).
    pub(super) fn shrink_to(&mut self, keep: usize) {
        let per = self
            .values
            .capacity()
            .checked_div(self.firings.capacity())
            .unwrap_or(1);
        self.firings.shrink_to(keep);
        self.values.shrink_to(keep.saturating_mul(per.max(1)));
    }

    /// Bytes of memory held.
    pub(super) fn heap_bytes(&self) -> usize {
        self.firings.capacity() * std::mem::size_of::<Firing>()
            + self.values.capacity() * std::mem::size_of::<f64>()
    }

    fn report(&self, f: &Firing, trig: &Trigger, shared: &Shared) -> Report {
        let at = f.values_at as usize;
        let values = self
            .values
            .get(at..at + trig.value_names.len())
            .unwrap_or_default();
        trig.group_report(shared.window, f.group, values, shared.origin, shared.completeness)
    }

    /// Appends to `out` the reports of the firings and those in `made`,
    /// in the canonical order (`clarion_report::sort_reports`); leaves
    /// both empty, with their capacity.
    pub(super) fn report_into(
        &mut self,
        made: &mut Vec<Report>,
        triggers: &[Option<Box<Trigger>>],
        shared: &Shared,
        out: &mut Vec<Report>,
    ) {
        let trigger = |tid: TriggerId| triggers.get(tid as usize).and_then(Option::as_deref);
        let n_made = made.len();
        // A removed trigger's firings sort anywhere (an empty name) and
        // make no report.
        let order = canonical_order_by(n_made + self.firings.len(), |i| match i.checked_sub(n_made) {
            None => made[i].sort_parts(),
            Some(j) => {
                let f = &self.firings[j];
                SortParts {
                    window: shared.window,
                    event: trigger(f.tid).map_or("", |t| &t.name),
                    group: &f.group,
                }
            }
        });
        out.reserve(order.len());
        let mut made: Vec<Option<Report>> = made.drain(..).map(Some).collect();
        for i in order {
            let i = i as usize;
            match i.checked_sub(n_made) {
                None => out.extend(made.get_mut(i).and_then(Option::take)),
                Some(j) => {
                    let f = &self.firings[j];
                    if let Some(t) = trigger(f.tid) {
                        out.push(self.report(f, t, shared));
                    }
                }
            }
        }
        self.firings.clear();
        self.values.clear();
    }
}
