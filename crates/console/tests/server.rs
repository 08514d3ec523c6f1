//! The page's example event and the hosts table's hovers per server
//! (console/src/server.ts), checked against the language: the example a
//! manager's console offers is network-wide (`across hosts`, which a
//! manager requires), a host's is not (a host refuses it), and both
//! parse and lower. Answers of `/v1/server` read as the API writes them.

mod common;

use common::run_node;
use serde_json::{json, Value};

/// The API's answers (crates/control's `ServerInfo`, tested there), written out.
const MANAGER: &str = r#"{"kind":"manager"}"#;
const HOST: &str = r#"{"kind":"host"}"#;

#[test]
fn each_server_is_offered_an_example_it_accepts() {
    let answers = json!([
        serde_json::from_str::<Value>(MANAGER).expect("JSON"),
        serde_json::from_str::<Value>(HOST).expect("JSON"),
        {"kind": "other"},
        null,
        "host",
    ]);
    let Some(out) = run_node("server.mjs", &answers.to_string()) else {
        return;
    };
    let seen: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(
        seen["read"],
        json!(["manager", "host", "manager", "manager", "manager"])
    );
    for (kind, network) in [("manager", true), ("host", false)] {
        let text = seen["kinds"][kind]["example"].as_str().expect("an example");
        let file = clarion_lang::parse(text)
            .unwrap_or_else(|d| panic!("{kind}: {}", d.render("example", text, false)));
        let specs = clarion_lang::lower(&file)
            .unwrap_or_else(|d| panic!("{kind}: {}", d.render("example", text, false)));
        assert_eq!(specs.len(), 1, "{kind}: {text}");
        assert_eq!(specs[0].scope.is_network(), network, "{kind}: {text}");
        // Every counter column of the hosts table says what it counts.
        let titles = &seen["kinds"][kind]["titles"];
        for column in [
            "triggers",
            "satisfaction_reports",
            "polls_answered",
            "polls_missed",
        ] {
            assert!(
                titles[column].as_str().is_some_and(|t| !t.is_empty()),
                "{kind}: {column}"
            );
        }
    }
    // On a host, `triggers` is the manager's, not the host's own events.
    assert!(seen["kinds"]["host"]["titles"]["triggers"]
        .as_str()
        .is_some_and(|t| t.contains("manager")));
}
