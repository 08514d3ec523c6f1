//! Several managers sharing the load (`clarion manager --shared`): the
//! installed events and who decides each live in two JetStream key-value
//! buckets on the NATS server, so any number of managers serve one NATS
//! account and each event is decided by exactly one of them at a time.
//!
//! - [`EVENTS_BUCKET`]: `e.<id>` → the event's name and canonical source.
//!   An id is taken with an atomic `create`, so two managers adding at once
//!   never give one id to two events. Every manager installs every event
//!   (any of them answers a registering agent with all its triggers).
//! - [`OWNERS_BUCKET`]: `o.<id>` → the name of the manager deciding event
//!   `id`, and `m.<name>` → a manager's presence. Entries expire after
//!   [`LEASE`]; an owner refreshes its entries every [`TEND_EVERY`].
//!
//! Ownership moves like this: each manager, every [`TEND_EVERY`], counts
//! the managers present, refreshes what it owns, gives back what exceeds
//! its fair share (⌈events / managers⌉, highest ids first) and claims
//! unowned events up to its share (`create`, which only one claimant
//! wins). A manager that stops gracefully deletes its entries, so the others
//! claim its events at their next tend; one that dies stops refreshing, and
//! its entries expire within [`LEASE`]. Satisfaction reports reach every
//! manager; only the owner decides. Reports of an event that arrive while
//! nobody owns it (at most [`LEASE`] + [`TEND_EVERY`] after its owner died)
//! are not decided: the claimant says when it took the event over.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_nats::jetstream::kv;
use clarion_manager::EventId;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};

use crate::NatsError;

pub const EVENTS_BUCKET: &str = "clarion-events";
pub const OWNERS_BUCKET: &str = "clarion-owners";
/// How long an owner's entry outlives its last refresh.
pub const LEASE: Duration = Duration::from_secs(3);
/// How often a manager refreshes, gives back and claims.
pub const TEND_EVERY: Duration = Duration::from_secs(1);

/// One installed event, as kept in [`EVENTS_BUCKET`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SharedEvent {
    pub id: u64,
    pub name: String,
    pub source: String,
    pub added_ns: u64,
}

/// What a tend changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tended {
    pub claimed: Vec<EventId>,
    pub released: Vec<EventId>,
    /// Owned, but the entry was gone or taken (this manager was too slow
    /// to refresh): another may decide it now.
    pub lost: Vec<EventId>,
    pub managers: usize,
}

/// A key-value bucket (history 1), created if missing. The bucket's stream
/// is made directly, as `create_key_value` would make it: that call first
/// reads the account's limits in a form servers before 2.10 (Debian's
/// nats-server) do not send.
async fn bucket(
    js: &async_nats::jetstream::Context,
    name: &str,
    max_age: Duration,
) -> Result<kv::Store, String> {
    use async_nats::jetstream::stream::{Config, DiscardPolicy};
    let config = Config {
        name: format!("KV_{name}"),
        subjects: vec![format!("$KV.{name}.>")],
        max_messages_per_subject: 1,
        max_age,
        allow_rollup: true,
        deny_delete: true,
        allow_direct: true,
        discard: DiscardPolicy::New,
        ..Default::default()
    };
    js.get_or_create_stream(config).await.map_err(|e| e.to_string())?;
    js.get_key_value(name).await.map_err(|e| e.to_string())
}

/// This manager's view of the buckets, and what it owns.
pub struct Shared {
    name: String,
    events: kv::Store,
    owners: kv::Store,
    /// Owned events and their entries' revisions.
    held: HashMap<EventId, u64>,
}

fn kv_err(what: &str, e: impl std::fmt::Display) -> NatsError {
    NatsError::Nats(format!("{what}: {e}"))
}

impl Shared {
    /// Opens (creating them if missing) both buckets; needs JetStream.
    pub async fn open(client: &async_nats::Client, name: &str) -> Result<Shared, NatsError> {
        let js = async_nats::jetstream::new(client.clone());
        let hint = |e| {
            kv_err(
                "cannot open the shared buckets (is JetStream enabled on the server, nats-server -js?)",
                e,
            )
        };
        let events = bucket(&js, EVENTS_BUCKET, Duration::ZERO).await.map_err(hint)?;
        let owners = bucket(&js, OWNERS_BUCKET, LEASE).await.map_err(hint)?;
        Ok(Shared {
            name: name.to_string(),
            events,
            owners,
            held: HashMap::new(),
        })
    }

    /// Every event in the bucket, by id.
    pub async fn stored(&self) -> Result<BTreeMap<EventId, SharedEvent>, NatsError> {
        let mut keys = self
            .events
            .keys()
            .await
            .map_err(|e| kv_err("listing events", e))?;
        let mut out = BTreeMap::new();
        while let Some(key) = keys.next().await {
            let key = key.map_err(|e| kv_err("listing events", e))?;
            let Some(value) = self
                .events
                .get(&key)
                .await
                .map_err(|e| kv_err("reading an event", e))?
            else {
                continue;
            };
            if let Ok(e) = serde_json::from_slice::<SharedEvent>(&value) {
                if let Ok(id) = EventId::try_from(e.id) {
                    out.insert(id, e);
                }
            }
        }
        Ok(out)
    }

    /// Stores a new event under the lowest free id from `from` on.
    pub async fn add(&self, mut e: SharedEvent, from: EventId) -> Result<EventId, NatsError> {
        let mut id = from;
        loop {
            e.id = id as u64;
            let value = serde_json::to_vec(&e).map_err(|err| kv_err("encoding an event", err))?;
            match self.events.create(format!("e.{id}"), value.into()).await {
                Ok(_) => return Ok(id),
                Err(err) if err.kind() == kv::CreateErrorKind::AlreadyExists => id += 1,
                Err(err) => return Err(kv_err("storing an event", err)),
            }
        }
    }

    pub async fn remove(&self, id: EventId) -> Result<(), NatsError> {
        self.events
            .purge(format!("e.{id}"))
            .await
            .map_err(|e| kv_err("removing an event", e))?;
        let _ = self.owners.purge(format!("o.{id}")).await;
        Ok(())
    }

    /// Whether this manager decides event `id`.
    pub fn owns(&self, id: EventId) -> bool {
        self.held.contains_key(&id)
    }

    /// The events this manager decides, ascending.
    pub fn owned(&self) -> Vec<EventId> {
        let mut v: Vec<EventId> = self.held.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// Announces this manager, refreshes its events, gives back what
    /// exceeds its share of `events` and claims unowned ones up to it.
    pub async fn tend(&mut self, events: &[EventId]) -> Result<Tended, NatsError> {
        let mut t = Tended::default();
        self.owners
            .put(format!("m.{}", self.name), crate::wall_ns().to_string().into())
            .await
            .map_err(|e| kv_err("announcing the manager", e))?;
        t.managers = self.managers().await?.len();
        let managers = t.managers.max(1);
        // Refresh what is held; drop what is no longer installed.
        let mut held: Vec<(EventId, u64)> = self.held.drain().collect();
        held.sort_unstable();
        for (id, rev) in held {
            if !events.contains(&id) {
                let _ = self.owners.purge(format!("o.{id}")).await;
                continue;
            }
            match self
                .owners
                .update(format!("o.{id}"), self.name.clone().into(), rev)
                .await
            {
                Ok(rev) => {
                    self.held.insert(id, rev);
                }
                Err(_) => t.lost.push(id),
            }
        }
        let share = events.len().div_ceil(managers);
        let mut owned = self.owned();
        while owned.len() > share {
            let Some(id) = owned.pop() else { break };
            self.held.remove(&id);
            let _ = self.owners.purge(format!("o.{id}")).await;
            t.released.push(id);
        }
        for &id in events {
            if self.held.len() >= share {
                break;
            }
            if self.held.contains_key(&id) {
                continue;
            }
            if let Ok(rev) = self
                .owners
                .create(format!("o.{id}"), self.name.clone().into())
                .await
            {
                self.held.insert(id, rev);
                t.claimed.push(id);
            }
        }
        Ok(t)
    }

    /// The names of the managers present (this one included, once it tended).
    async fn managers(&self) -> Result<Vec<String>, NatsError> {
        let mut keys = self
            .owners
            .keys()
            .await
            .map_err(|e| kv_err("listing managers", e))?;
        let mut out = Vec::new();
        while let Some(key) = keys.next().await {
            if let Some(name) = key.ok().and_then(|k| k.strip_prefix("m.").map(str::to_string)) {
                out.push(name);
            }
        }
        Ok(out)
    }

    /// How many other managers are present (none if the bucket cannot be read).
    pub async fn others(&self) -> usize {
        let present = self.managers().await.unwrap_or_default();
        present.iter().filter(|n| **n != self.name).count()
    }

    /// Leaves: gives back every event and the presence entry, so that the
    /// other managers claim them at their next tend.
    pub async fn leave(&mut self) {
        for id in self.owned() {
            let _ = self.owners.purge(format!("o.{id}")).await;
        }
        self.held.clear();
        let _ = self.owners.purge(format!("m.{}", self.name)).await;
    }
}
