//! Export policies (Trident) installed from the manager onto its agents,
//! with no I/O: the manager's set ([`ExportBook`]) and an agent's view of
//! what it last applied ([`AppliedExports`]).
//!
//! The manager keeps the policies' canonical sources by name, in the order
//! they were added, and stamps every change with a new version. What goes
//! to an agent is the whole set as one text ([`ExportSet`]): the agent
//! checks it with the language itself (`clarion_lang::check_exports`), so
//! a manager and an agent of different versions never disagree about what
//! a policy means without the agent saying so; and a whole set, not a
//! change, so a lost or reordered message cannot leave an agent with a
//! mix. An agent applies a set only if its version is newer than the one
//! it applied last: one arriving late (the registration reply racing a
//! change) is ignored.
//!
//! Versions are the manager's wall clock in nanoseconds when the set
//! changed, bumped to stay increasing: a restarted manager sends newer
//! versions than the run before it, never older. With a store, a restarted
//! manager starts with the set it last stored, under the same version, so
//! an agent that kept running keeps it without applying it again
//! ([`ExportBook::restored`]). Placement: every host gets the same set.
//!
//! Invariants: names are unique in a set; a set's text checks (it was
//! checked piece by piece when added). Cost: every change re-checks only
//! the added text; the set's text is built on each send (policies are few).

use clarion_control::ControlError;
use clarion_lang::spec::ExportSpec;
use serde::{Deserialize, Serialize};

/// A host's whole current set of export policies, as the manager sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExportSet {
    /// Increases with every change of the manager's set.
    pub version: u64,
    /// The policies' canonical sources, one `export` block each (empty: none).
    pub source: String,
}

/// One installed policy, as the manager lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyInfo {
    pub name: String,
    /// The canonical source (one `export` block).
    pub source: String,
    /// When it was added (Unix nanoseconds).
    pub added_ns: u64,
}

/// The manager's export policies (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct ExportBook {
    policies: Vec<PolicyInfo>,
    version: u64,
}

impl ExportBook {
    pub fn new() -> ExportBook {
        ExportBook::default()
    }

    /// The set a previous run stored, at `version`. Each policy is checked
    /// again by this version's language; one that no longer checks (or
    /// repeats a name) is left out and returned with the reason, and the
    /// set then gets a newer version at `now_ns`, so that hosts still
    /// running the old set take the one without it.
    pub fn restored(
        policies: Vec<PolicyInfo>,
        version: u64,
        now_ns: u64,
    ) -> (ExportBook, Vec<(String, String)>) {
        let mut book = ExportBook {
            policies: Vec::new(),
            version,
        };
        let mut skipped = Vec::new();
        for p in policies {
            let why = match clarion_lang::check_exports(&p.source) {
                Ok(specs) if specs.len() == 1 && specs[0].name == p.name => {
                    if book.show(&p.name).is_some() {
                        Some("a policy of its name comes before it".to_string())
                    } else {
                        None
                    }
                }
                Ok(_) => Some("the stored source is not that one export policy".to_string()),
                Err(d) => Some(d.render("store", &p.source, false)),
            };
            match why {
                None => book.policies.push(p),
                Some(why) => skipped.push((p.name, why)),
            }
        }
        if !skipped.is_empty() {
            book.bump(now_ns);
        }
        (book, skipped)
    }

    /// The set's version (0: never changed).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Adds every policy of `text`, all or none, at wall-clock time
    /// `now_ns`: refused with the language's diagnostics if it does not
    /// check, if it defines none, or if a name is installed already.
    pub fn add(&mut self, text: &str, now_ns: u64) -> Result<Vec<PolicyInfo>, ControlError> {
        let specs = clarion_lang::check_exports(text)
            .map_err(|d| ControlError::Invalid(d.render("request", text, false)))?;
        if specs.is_empty() {
            return Err(ControlError::Invalid(
                "the request defines no export policy (`export NAME filter ... send ...`)".into(),
            ));
        }
        // It checked, so it parses; the tree gives each policy's canonical text.
        let file =
            clarion_lang::parse(text).map_err(|d| ControlError::Invalid(d.render("request", text, false)))?;
        if file.exports.len() != specs.len() {
            return Err(ControlError::Invalid(
                "the request must hold export policies only".into(),
            ));
        }
        let mut added: Vec<PolicyInfo> = Vec::new();
        for (ast, spec) in file.exports.iter().zip(&specs) {
            if self.show(&spec.name).is_some() || added.iter().any(|p| p.name == spec.name) {
                return Err(ControlError::Invalid(format!(
                    "an export policy named `{}` is installed already; remove it first (clarion exports rm {})",
                    spec.name, spec.name
                )));
            }
            added.push(PolicyInfo {
                name: spec.name.clone(),
                source: ast.to_string(),
                added_ns: now_ns,
            });
        }
        self.policies.extend(added.iter().cloned());
        self.bump(now_ns);
        Ok(added)
    }

    /// Removes the policy named `name`.
    pub fn remove(&mut self, name: &str, now_ns: u64) -> Result<PolicyInfo, ControlError> {
        let i = self
            .policies
            .iter()
            .position(|p| p.name == name)
            .ok_or_else(|| not_found(name))?;
        let gone = self.policies.remove(i);
        self.bump(now_ns);
        Ok(gone)
    }

    pub fn list(&self) -> &[PolicyInfo] {
        &self.policies
    }

    pub fn show(&self, name: &str) -> Option<&PolicyInfo> {
        self.policies.iter().find(|p| p.name == name)
    }

    /// The set to send every host (version 0: never changed, nothing to send).
    pub fn set(&self) -> Option<ExportSet> {
        (self.version > 0).then(|| ExportSet {
            version: self.version,
            source: self
                .policies
                .iter()
                .map(|p| p.source.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        })
    }

    fn bump(&mut self, now_ns: u64) {
        self.version = now_ns.max(self.version + 1);
    }
}

pub fn not_found(name: &str) -> ControlError {
    ControlError::NotFound(format!("no export policy is named `{name}`"))
}

/// What an agent applied last, to ignore sets older than it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AppliedExports {
    version: u64,
}

/// What an agent does with a set that arrived.
#[derive(Clone, Debug, PartialEq)]
pub enum Arrived {
    /// Older than (or the same as) the one applied: nothing.
    Stale,
    /// Apply these (empty: remove every policy the manager installed).
    Apply(Vec<ExportSpec>),
    /// It does not check here: the set applied stays; the reason.
    Refused(String),
}

impl AppliedExports {
    /// The version applied last (0: none).
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Checks a set that arrived. A set that checks is taken as applied
    /// only once [`AppliedExports::applied`] says so (the host may still
    /// refuse it, e.g. a pcapng policy without an export directory); a
    /// set refused is not retried at the same version.
    pub fn arrived(&mut self, set: &ExportSet) -> Arrived {
        if set.version <= self.version {
            return Arrived::Stale;
        }
        match clarion_lang::check_exports(&set.source) {
            Ok(specs) => Arrived::Apply(specs),
            Err(d) => {
                self.version = set.version;
                Arrived::Refused(d.render("the manager's export policies", &set.source, false))
            }
        }
    }

    /// The host applied (or refused) the set of `version`.
    pub fn applied(&mut self, version: u64) {
        self.version = self.version.max(version);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const A: &str = "export a\n  filter proto = udp\n  send packets to pcapng\n";
    const B: &str = "export b\n  filter dst_port = 53\n  send headers to collector 127.0.0.1\n";

    #[test]
    fn adds_all_or_none_and_removes_by_name() {
        let mut book = ExportBook::new();
        assert_eq!(book.set(), None, "nothing to send before any change");
        let added = book.add(A, 10).expect("checks");
        assert_eq!(added[0].name, "a");
        let v1 = book.set().expect("a set").version;
        // A name taken, even beside a new one: nothing is added.
        let e = book.add(&format!("{B}\n{A}"), 5).expect_err("a duplicate");
        assert!(e.to_string().contains("`a` is installed already"), "{e}");
        assert_eq!(book.list().len(), 1);
        assert_eq!(
            book.set().expect("a set").version,
            v1,
            "a refusal changes nothing"
        );
        let e = book
            .add("export c\n  filter prot = udp\n  send packets to pcapng\n", 20)
            .expect_err("bad");
        assert!(e.to_string().contains("prot"), "the language's diagnostic: {e}");
        assert!(
            book.add("event e\n  when count() > 1\n", 20).is_err(),
            "an event is not a policy"
        );
        assert!(book.add("", 20).is_err(), "no policy");
        book.add(B, 5).expect("checks");
        // The clock went back: the version still increases.
        let v2 = book.set().expect("a set").version;
        assert!(v2 > v1);
        assert_eq!(
            book.show("b").expect("shown").source,
            clarion_lang::parse(B).expect("parses").exports[0].to_string()
        );
        assert_eq!(book.remove("a", 30).expect("removed").name, "a");
        assert!(book.remove("a", 31).is_err());
        let s = book.set().expect("a set");
        assert!(s.version > v2);
        let names: Vec<String> = clarion_lang::check_exports(&s.source)
            .expect("checks")
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(names, ["b"]);
        book.remove("b", 40).expect("removed");
        let s = book.set().expect("a set");
        assert_eq!(
            clarion_lang::check_exports(&s.source).expect("checks"),
            vec![],
            "empty: remove all"
        );
    }

    #[test]
    fn a_restored_set_keeps_its_version_unless_a_policy_no_longer_checks() {
        let mut book = ExportBook::new();
        book.add(A, 10).expect("checks");
        book.add(B, 20).expect("checks");
        let stored = book.list().to_vec();
        let (again, skipped) = ExportBook::restored(stored.clone(), book.version(), 30);
        assert!(skipped.is_empty());
        assert_eq!(again.set(), book.set(), "the same set, same version");
        let mut damaged = stored.clone();
        damaged[0].source = "export a\n  filter prot = udp\n  send packets to pcapng\n".into();
        damaged.push(stored[1].clone());
        let (again, skipped) = ExportBook::restored(damaged, book.version(), 30);
        let why: Vec<&str> = skipped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(why, ["a", "b"], "{skipped:?}");
        assert!(skipped[0].1.contains("prot"), "{skipped:?}");
        assert_eq!(again.list(), &stored[1..]);
        assert!(again.version() > book.version(), "hosts take the smaller set");
    }

    #[test]
    fn an_agent_ignores_older_sets_and_reports_bad_ones() {
        let mut at = AppliedExports::default();
        let new = ExportSet {
            version: 5,
            source: A.into(),
        };
        let Arrived::Apply(specs) = at.arrived(&new) else {
            panic!("applies")
        };
        assert_eq!(specs, clarion_lang::check_exports(A).expect("checks"));
        at.applied(5);
        assert_eq!(
            at.arrived(&ExportSet {
                version: 4,
                source: B.into()
            }),
            Arrived::Stale
        );
        assert_eq!(at.arrived(&new), Arrived::Stale, "the same one again");
        let bad = ExportSet {
            version: 6,
            source: "export x\n  send packets to nowhere\n".into(),
        };
        assert!(matches!(at.arrived(&bad), Arrived::Refused(_)));
        assert_eq!(at.arrived(&bad), Arrived::Stale, "refused once");
        assert_eq!(at.version(), 6);
    }

    proptest! {
        /// Whatever order the sets of a run of changes arrive in, an agent
        /// ends with the newest one (the reference: the last change).
        #[test]
        fn any_arrival_order_ends_with_the_newest_set(
            ops in prop::collection::vec((any::<bool>(), 0u8..4), 1..12),
            order in any::<u64>(),
        ) {
            let mut book = ExportBook::new();
            let mut sent = Vec::new();
            let mut t = 100;
            for (add, n) in ops {
                t += 1;
                let name = format!("p{n}");
                let changed = if add {
                    book.add(&format!("export {name}\n  filter dst_port = {n}\n  send packets to pcapng\n"), t).is_ok()
                } else {
                    book.remove(&name, t).is_ok()
                };
                if changed {
                    sent.push(book.set().expect("changed"));
                }
            }
            prop_assume!(!sent.is_empty());
            let newest = sent.last().cloned().expect("one");
            // Shuffle by a seed: a Fisher-Yates on a small LCG.
            let mut s = order | 1;
            for i in (1..sent.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                sent.swap(i, (s >> 33) as usize % (i + 1));
            }
            let mut at = AppliedExports::default();
            let mut last = None;
            for set in &sent {
                if let Arrived::Apply(specs) = at.arrived(set) {
                    at.applied(set.version);
                    last = Some(specs);
                }
            }
            prop_assert_eq!(last, Some(clarion_lang::check_exports(&newest.source).expect("checks")));
        }
    }
}
