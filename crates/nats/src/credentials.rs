//! Per-host credentials: an nkey per host and one for the manager, and the
//! nats-server authorization that lets each host speak only as itself.
//!
//! A host may publish its own subject (`clarion.up.<host>`) and
//! registrations, answer the polls it receives (`allow_responses`, so it
//! cannot answer another host's), and subscribe only to its own control,
//! poll and flows subjects (`clarion.host.<host>.>`) and its own reply
//! inbox (`_INBOX_<host>.>`, the prefix its agent uses). It may also
//! publish its own flow records and reports to a JetStream stream
//! (`clarion.records.<host>`, `clarion.reports.<host>`, see
//! [`crate::stream_sink`]) and look a stream up
//! (`$JS.API.STREAM.INFO.*`), but not create one: a stream's subjects
//! could take other hosts' messages, so the operator (or any client with
//! the manager's key) creates it. The manager may do anything. nats-server
//! enforces it: a host that publishes as another is refused by the
//! server, and since a registration's reply goes to the asking host's
//! inbox, the manager refuses a registration whose reply subject is not
//! the named host's (see [`reply_inbox_prefix`]).

use crate::protocol;
use crate::stream_sink::StreamKind;

/// The inbox prefix of a host's agent: replies to it (its registration)
/// travel on `<prefix>.…`, which only that host may subscribe to.
pub fn reply_inbox_prefix(host: &str) -> String {
    format!("_INBOX_{host}")
}

/// Whether a reply subject belongs to `host`'s inbox.
pub fn is_hosts_reply(host: &str, reply: &str) -> bool {
    reply
        .strip_prefix(&reply_inbox_prefix(host))
        .is_some_and(|rest| rest.starts_with('.'))
}

/// One principal's key: its name, public key (`U…`) and seed (`SU…`).
#[derive(Clone, Debug)]
pub struct UserKey {
    pub name: String,
    pub public: String,
    pub seed: String,
}

/// A new user nkey for `name`.
pub fn new_key(name: &str) -> Result<UserKey, String> {
    let kp = nkeys::KeyPair::new_user();
    let seed = kp
        .seed()
        .map_err(|e| format!("cannot make a key for {name}: {e}"))?;
    Ok(UserKey {
        name: name.to_string(),
        public: kp.public_key(),
        seed,
    })
}

/// The nats-server `authorization` block for the manager's key and each host's.
pub fn server_authorization(manager: &UserKey, hosts: &[UserKey]) -> String {
    let mut out = String::from(
        "# Made by `clarion credentials`: each host may speak only as itself.\nauthorization {\n  users = [\n",
    );
    out.push_str(&format!(
        "    # the manager ({})\n    {{ nkey: \"{}\", permissions: {{ publish: \">\", subscribe: \">\" }} }}\n",
        manager.name, manager.public
    ));
    for h in hosts {
        let inbox = reply_inbox_prefix(&h.name);
        out.push_str(&format!(
            "    # host {name}\n    {{ nkey: \"{key}\", permissions: {{\n        publish: {{ allow: [\"{register}\", \"{up}\", \"{records}\", \"{reports}\", \"$JS.API.STREAM.INFO.*\"] }},\n        subscribe: {{ allow: [\"clarion.host.{name}.>\", \"{inbox}.>\"] }},\n        allow_responses: true\n    }} }}\n",
            name = h.name,
            key = h.public,
            register = protocol::REGISTER,
            up = protocol::up(&h.name),
            records = StreamKind::Records.subject(&h.name),
            reports = StreamKind::Reports.subject(&h.name),
        ));
    }
    out.push_str("  ]\n}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_belong_to_the_host_whose_inbox_they_are_in() {
        assert!(is_hosts_reply("web-1", "_INBOX_web-1.abc.1"));
        assert!(!is_hosts_reply("web-1", "_INBOX_web-10.abc.1"));
        assert!(!is_hosts_reply("web-1", "_INBOX.abc.1"));
        assert!(!is_hosts_reply("web-1", "_INBOX_web-1"));
    }

    #[test]
    fn keys_are_user_nkeys_and_the_config_names_each_host_once() {
        let m = new_key("manager").expect("key");
        assert!(m.public.starts_with('U') && m.seed.starts_with("SU"), "{m:?}");
        let hosts: Vec<UserKey> = ["web-1", "web-2"]
            .iter()
            .map(|h| new_key(h).expect("key"))
            .collect();
        let conf = server_authorization(&m, &hosts);
        for h in &hosts {
            assert_eq!(conf.matches(&h.public).count(), 1);
            assert!(conf.contains(&format!("\"clarion.up.{}\"", h.name)), "{conf}");
            assert!(
                conf.contains(&format!("\"clarion.records.{}\"", h.name)),
                "{conf}"
            );
        }
        assert!(
            !conf.contains(&m.seed) && !conf.contains(&hosts[0].seed),
            "no seed in the server's file"
        );
    }
}
