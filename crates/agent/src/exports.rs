//! Where the manager's export policies are applied: one path
//! ([`crate::Agent::apply_exports`]) over what holds the host's exporter,
//! a replay's pipeline or a live host's workers.

use clarion_engine::Monitor;
use clarion_host::LiveHost;
use clarion_lang::spec::ExportSpec;
use clarion_pipeline::{ExportPolicies, Pipeline};

/// What runs the host's export policies; its errors are the messages the
/// manager and standard error are told.
pub trait ExportTarget {
    /// Where a set applies, for the message: "from frame N on".
    fn applied_at(&self) -> String;
    /// The policies running now, the host's own among them.
    fn running(&mut self) -> Result<Vec<ExportSpec>, String>;
    /// Replaces the running policies with `all`; on refusal they stay.
    fn set(&mut self, all: &[ExportSpec]) -> Result<(), String>;
}

const NO_EXPORTER: &str = "this agent has no exporter";

/// A replay's exporter: a set applies from the pipeline's next frame on.
impl ExportTarget for Pipeline<Monitor> {
    fn applied_at(&self) -> String {
        format!("from frame {} on", self.frames())
    }

    fn running(&mut self) -> Result<Vec<ExportSpec>, String> {
        self.stage_mut(|x: &mut ExportPolicies| x.exporter_mut().policies().to_vec())
            .ok_or_else(|| NO_EXPORTER.into())
    }

    fn set(&mut self, all: &[ExportSpec]) -> Result<(), String> {
        self.stage_mut(|x: &mut ExportPolicies| x.exporter_mut().set_policies(all).map_err(|e| e.to_string()))
            .unwrap_or_else(|| Err(NO_EXPORTER.into()))
    }
}

/// A live host: a set applies on every worker, between its batches.
impl ExportTarget for LiveHost {
    fn applied_at(&self) -> String {
        "on every worker".into()
    }

    fn running(&mut self) -> Result<Vec<ExportSpec>, String> {
        Ok(self.export_policies().unwrap_or_default().to_vec())
    }

    fn set(&mut self, all: &[ExportSpec]) -> Result<(), String> {
        self.set_exports(all).map_err(|e| e.to_string())
    }
}

/// The policies' names, for messages.
pub(crate) fn names(specs: &[ExportSpec]) -> String {
    if specs.is_empty() {
        return "none".into();
    }
    specs
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}
