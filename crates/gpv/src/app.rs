//! Late-bound metric apps: consumers of the GPV stream that can be added
//! and removed while it runs.
//!
//! *Flow's point (§3.2) is that metrics are chosen after the packets are
//! grouped: the cache exports every packet's features, and any number of
//! apps compute their metrics from the same GPVs. [`AppRuntime`] holds the
//! apps by name and hands every GPV to each, in the order they were added.
//!
//! Contract for an app: [`GpvApp::on_gpv`] sees GPVs in stream order, so a
//! flow's GPVs arrive in packet order (the cache guarantees it) but GPVs
//! of different flows interleave; an app that needs continuity across a
//! flow's GPVs keeps per-flow state. [`GpvApp::report`] may be called at
//! any time and does not reset the app.
//!
//! Cost: one virtual call per app per GPV; no copies.

use std::io::Read;

use clarion_wire::FlowKey;
use serde_json::{json, Value};

use crate::codec::GpvReader;
use crate::gpv::Gpv;
use crate::GpvError;

/// A metric app fed with GPVs.
pub trait GpvApp: Send {
    /// The name the runtime knows it by (unique in a runtime).
    fn name(&self) -> &str;
    fn on_gpv(&mut self, gpv: &Gpv);
    /// The app's results so far, as JSON.
    fn report(&mut self) -> Value;
}

/// Apps bound at run time.
#[derive(Default)]
pub struct AppRuntime {
    apps: Vec<Box<dyn GpvApp>>,
    gpvs: u64,
}

impl AppRuntime {
    pub fn new() -> AppRuntime {
        AppRuntime::default()
    }

    /// Subscribes an app to the GPVs that follow.
    pub fn add(&mut self, app: Box<dyn GpvApp>) -> Result<(), GpvError> {
        if self.apps.iter().any(|a| a.name() == app.name()) {
            return Err(GpvError::DuplicateApp(app.name().to_string()));
        }
        self.apps.push(app);
        Ok(())
    }

    /// Unsubscribes an app and hands it back (its results stay readable).
    pub fn remove(&mut self, name: &str) -> Option<Box<dyn GpvApp>> {
        let at = self.apps.iter().position(|a| a.name() == name)?;
        Some(self.apps.remove(at))
    }

    pub fn get_mut(&mut self, name: &str) -> Option<&mut (dyn GpvApp + 'static)> {
        self.apps
            .iter_mut()
            .find(|a| a.name() == name)
            .map(|a| a.as_mut())
    }

    /// The running apps' names, in the order they were added.
    pub fn names(&self) -> Vec<&str> {
        self.apps.iter().map(|a| a.name()).collect()
    }

    /// GPVs fed so far.
    pub fn gpvs(&self) -> u64 {
        self.gpvs
    }

    pub fn on_gpv(&mut self, gpv: &Gpv) {
        self.gpvs += 1;
        for app in &mut self.apps {
            app.on_gpv(gpv);
        }
    }

    /// Feeds every GPV of a stream to the apps; returns how many, or the
    /// stream's first error (the GPVs before it were fed).
    pub fn run<R: Read>(&mut self, gpvs: GpvReader<R>) -> Result<u64, GpvError> {
        let mut n = 0;
        for gpv in gpvs {
            self.on_gpv(&gpv?);
            n += 1;
        }
        Ok(n)
    }

    /// Every app's report, as an object keyed by app name.
    pub fn report(&mut self) -> Value {
        let mut out = serde_json::Map::new();
        for app in &mut self.apps {
            out.insert(app.name().to_string(), app.report());
        }
        Value::Object(out)
    }
}

/// A flow key in app reports, with the flow records' field names
/// (`clarion.flow/1`: ports and VLAN `null` when absent) and its Community ID.
pub fn key_json(key: &FlowKey) -> Value {
    let port = |p: u16| if key.has_ports() { json!(p) } else { Value::Null };
    json!({
        "src_ip": key.src_addr().to_string(),
        "dst_ip": key.dst_addr().to_string(),
        "src_port": port(key.src_port),
        "dst_port": port(key.dst_port),
        "proto": key.proto,
        "vlan": key.has_vlan().then_some(key.vlan),
        "vni": key.tunnel_id(),
        "community_id": clarion_records::community_id(key, 0),
    })
}
