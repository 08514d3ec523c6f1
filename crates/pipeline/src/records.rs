//! Flow records beside the events: TurboFlow's microflow cache and
//! aggregator (`clarion-flows`), fed the batches the head was fed.
//!
//! A record ends on its flow's idle or active timeout, tested on a grid
//! of the scan interval against the packets' times, on a quiet wire
//! against the driver's ticks, so a file and a live capture of the same
//! packets end the same records in the same order.

use clarion_flows::{FlowConfig, FlowError, FlowMeter, FlowStats};
use clarion_wire::PacketRecord;

use crate::{Error, Outputs, Stage};

/// A flow meter (`--records`): its records go to [`Outputs::records`].
#[derive(Debug)]
pub struct FlowRecords {
    meter: FlowMeter,
}

impl FlowRecords {
    /// Fails on a configuration the meter refuses (cache slots not a
    /// multiple of its ways).
    pub fn new(config: FlowConfig) -> Result<FlowRecords, FlowError> {
        Ok(FlowRecords {
            meter: FlowMeter::new(config)?,
        })
    }

    /// The meter's counters.
    pub fn stats(&self) -> FlowStats {
        self.meter.stats()
    }
}

impl Stage for FlowRecords {
    fn batch(&mut self, packets: &[PacketRecord], out: &mut Outputs) -> Result<(), Error> {
        self.meter.process_batch(packets, &mut out.records);
        Ok(())
    }

    fn tick(&mut self, clock_ns: u64, out: &mut Outputs) -> Result<(), Error> {
        self.meter.tick(clock_ns, &mut out.records);
        Ok(())
    }

    fn finish(&mut self, out: &mut Outputs) -> Result<(), Error> {
        self.meter.finish(&mut out.records);
        Ok(())
    }
}
