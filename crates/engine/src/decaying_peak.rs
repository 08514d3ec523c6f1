//! The room a reused buffer keeps: what its recent uses needed, not the
//! most it ever held.
//!
//! The epoch logs and the sweep's report vector are emptied and reused
//! every epoch, keeping their capacity, so a burst (a flash crowd, a
//! primed run's first epochs) would hold its memory for good. Each notes
//! its length at every use into a peak that decays by an eighth a use, and
//! is cut to a quarter over the peak once it holds more than twice it: a
//! few quiet uses after a burst (four for a buffer a quarter over the
//! burst), and never for the ups and downs of steady traffic (a busy use
//! grows the buffer again).

/// See the module documentation.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DecayingPeak(usize);

impl DecayingPeak {
    /// Notes a use of `len` elements.
    pub(crate) fn note(&mut self, len: usize) {
        self.0 = len.max(self.0 - self.0 / 8);
    }

    /// The capacity to cut a buffer of `capacity` elements to, if it holds
    /// more than twice the peak (taken as at least `floor`): a quarter
    /// over it.
    pub(crate) fn cut(self, capacity: usize, floor: usize) -> Option<usize> {
        let keep = self.0.max(floor);
        (capacity > 2 * keep).then_some(keep + keep / 4)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_cut_after_quiet_uses_and_steady_traffic_never() {
        let mut p = DecayingPeak::default();
        p.note(1_000);
        assert_eq!(p.cut(1_250, 16), None, "room for the burst while it is recent");
        let quiet = (1..)
            .find(|_| {
                p.note(10);
                p.cut(1_250, 16).is_some()
            })
            .unwrap_or(0);
        // 875, 766, 671, 588: under half of 1,250 at the fourth.
        assert_eq!(quiet, 4, "cut after four quiet uses");
        // Steady traffic between 800 and 1,000 in a buffer grown to 1,250.
        let mut s = DecayingPeak::default();
        for len in [1_000, 800, 900, 1_000, 850, 800, 950].repeat(10) {
            s.note(len);
            assert_eq!(s.cut(1_250, 16), None);
        }
        // The floor: a tiny peak keeps at least a quarter over it.
        assert_eq!(DecayingPeak::default().cut(1_000, 64), Some(80));
    }
}
