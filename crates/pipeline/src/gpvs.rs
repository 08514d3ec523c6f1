//! Grouped packet vectors beside the events: *Flow's GPV cache
//! (`clarion-gpv`), fed the batches the head was fed. Its scans run on a
//! grid of the interval, against the packets' times or the driver's ticks.

use clarion_gpv::{CacheConfig, CacheStats, GpvCache, GpvError};
use clarion_wire::PacketRecord;

use crate::{Error, Outputs, Stage};

/// A GPV cache (`--gpv`, `--app`): its GPVs go to [`Outputs::gpvs`].
pub struct Gpvs {
    cache: GpvCache,
}

impl Gpvs {
    /// Fails on a configuration the cache refuses.
    pub fn new(config: CacheConfig) -> Result<Gpvs, GpvError> {
        Ok(Gpvs {
            cache: GpvCache::new(config)?,
        })
    }

    /// The cache's counters.
    pub fn stats(&self) -> CacheStats {
        *self.cache.stats()
    }
}

impl Stage for Gpvs {
    fn batch(&mut self, packets: &[PacketRecord], out: &mut Outputs) -> Result<(), Error> {
        for p in packets {
            self.cache.push(p, &mut out.gpvs);
        }
        Ok(())
    }

    fn tick(&mut self, clock_ns: u64, out: &mut Outputs) -> Result<(), Error> {
        self.cache.tick(clock_ns, &mut out.gpvs);
        Ok(())
    }

    fn finish(&mut self, out: &mut Outputs) -> Result<(), Error> {
        self.cache.finish(&mut out.gpvs);
        Ok(())
    }
}
