//! The control API's client (`clarion events`): blocking, one request at a time.

use std::io::{BufRead, BufReader};

use serde::de::DeserializeOwned;
use thiserror::Error;

use crate::model::{AppRequest, AppsInfo, ErrorBody, EventInfo, ExportInfo, HostInfo};

#[derive(Debug, Error)]
pub enum ClientError {
    #[error(
        "cannot reach the manager's API at {url}: {message} (is `clarion manager` running with --api there?)"
    )]
    Unreachable { url: String, message: String },
    /// The API answered with an error; the text is the manager's.
    #[error("{message}")]
    Refused { status: u16, message: String },
    #[error("the manager's answer could not be read: {0}")]
    Body(String),
    #[error("the manager closed the stream ({0}); it stopped or restarted")]
    Closed(String),
}

#[derive(Debug)]
pub struct Client {
    base: String,
    token: Option<String>,
    agent: ureq::Agent,
}

impl Client {
    /// `base` is the API's address, e.g. `http://127.0.0.1:8700`.
    pub fn new(base: &str, token: Option<String>) -> Client {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        Client {
            base: base.trim_end_matches('/').to_string(),
            token,
            agent,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn unreachable(&self, e: ureq::Error) -> ClientError {
        ClientError::Unreachable {
            url: self.base.clone(),
            message: e.to_string(),
        }
    }

    fn auth<B>(&self, req: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => req.header("Authorization", format!("Bearer {t}")),
            None => req,
        }
    }

    fn read<T: DeserializeOwned>(
        &self,
        resp: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
    ) -> Result<T, ClientError> {
        let mut resp = resp.map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .read_to_string()
            .map_err(|e| ClientError::Body(e.to_string()))?;
        if !(200..300).contains(&status) {
            let message = serde_json::from_str::<ErrorBody>(&text)
                .map(|b| b.error)
                .unwrap_or_else(|_| format!("HTTP {status}: {}", text.trim()));
            return Err(ClientError::Refused { status, message });
        }
        serde_json::from_str(&text).map_err(|e| ClientError::Body(e.to_string()))
    }

    pub fn list(&self) -> Result<Vec<EventInfo>, ClientError> {
        self.read(self.auth(self.agent.get(self.url("/v1/events"))).call())
    }

    pub fn show(&self, name: &str) -> Result<EventInfo, ClientError> {
        self.read(
            self.auth(self.agent.get(self.url(&format!("/v1/events/{name}"))))
                .call(),
        )
    }

    pub fn add(&self, source: &str) -> Result<Vec<EventInfo>, ClientError> {
        let req = self
            .auth(self.agent.post(self.url("/v1/events")))
            .header("Content-Type", "text/plain; charset=utf-8");
        self.read(req.send(source))
    }

    pub fn remove(&self, name: &str) -> Result<EventInfo, ClientError> {
        self.read(
            self.auth(self.agent.delete(self.url(&format!("/v1/events/{name}"))))
                .call(),
        )
    }

    pub fn hosts(&self) -> Result<Vec<HostInfo>, ClientError> {
        self.read(self.auth(self.agent.get(self.url("/v1/hosts"))).call())
    }

    pub fn apps(&self) -> Result<AppsInfo, ClientError> {
        self.read(self.auth(self.agent.get(self.url("/v1/apps"))).call())
    }

    pub fn add_app(&self, name: &str) -> Result<AppsInfo, ClientError> {
        let body = serde_json::to_string(&AppRequest {
            name: name.to_string(),
        })
        .map_err(|e| ClientError::Body(e.to_string()))?;
        let req = self
            .auth(self.agent.post(self.url("/v1/apps")))
            .header("Content-Type", "application/json");
        self.read(req.send(body))
    }

    /// A running app's report so far.
    pub fn show_app(&self, name: &str) -> Result<serde_json::Value, ClientError> {
        self.read(
            self.auth(self.agent.get(self.url(&format!("/v1/apps/{name}"))))
                .call(),
        )
    }

    /// Stops an app; its last report.
    pub fn remove_app(&self, name: &str) -> Result<serde_json::Value, ClientError> {
        self.read(
            self.auth(self.agent.delete(self.url(&format!("/v1/apps/{name}"))))
                .call(),
        )
    }

    /// A live host's export policies.
    pub fn exports(&self) -> Result<Vec<ExportInfo>, ClientError> {
        self.read(self.auth(self.agent.get(self.url("/v1/exports"))).call())
    }

    /// Installs every policy of `source` (one or more `export` blocks).
    pub fn add_exports(&self, source: &str) -> Result<Vec<ExportInfo>, ClientError> {
        let req = self
            .auth(self.agent.post(self.url("/v1/exports")))
            .header("Content-Type", "text/plain; charset=utf-8");
        self.read(req.send(source))
    }

    pub fn show_export(&self, name: &str) -> Result<ExportInfo, ClientError> {
        self.read(
            self.auth(self.agent.get(self.url(&format!("/v1/exports/{name}"))))
                .call(),
        )
    }

    /// Removes a policy; what it was.
    pub fn remove_export(&self, name: &str) -> Result<ExportInfo, ClientError> {
        self.read(
            self.auth(self.agent.delete(self.url(&format!("/v1/exports/{name}"))))
                .call(),
        )
    }

    /// Follows fired events: calls `each` with every report's JSON text,
    /// and with the count of reports the server dropped for this watcher
    /// (it fell behind: the API says so in a comment line, ": lagged: N
    /// reports lost"), until the stream ends or `each` returns false. A
    /// stream the manager drops (it stopped) is [`ClientError::Closed`].
    pub fn watch(&self, mut each: impl FnMut(Watched<'_>) -> bool) -> Result<(), ClientError> {
        let resp = self.auth(self.agent.get(self.url("/v1/reports"))).call();
        let mut resp = resp.map_err(|e| self.unreachable(e))?;
        let status = resp.status().as_u16();
        if status != 200 {
            let text = resp.body_mut().read_to_string().unwrap_or_default();
            let message = serde_json::from_str::<ErrorBody>(&text)
                .map(|b| b.error)
                .unwrap_or_else(|_| format!("HTTP {status}"));
            return Err(ClientError::Refused { status, message });
        }
        let reader = BufReader::new(resp.into_body().into_reader());
        for line in reader.lines() {
            let line = line.map_err(|e| ClientError::Closed(e.to_string()))?;
            let seen = match line.strip_prefix("data:") {
                Some(data) => Watched::Report(data.trim_start()),
                None => match lost_in(&line) {
                    Some(n) => Watched::Lost(n),
                    None => continue,
                },
            };
            if !each(seen) {
                break;
            }
        }
        Ok(())
    }
}

/// What [`Client::watch`] hands on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watched<'a> {
    /// A report's JSON text.
    Report(&'a str),
    /// Reports the server dropped for this watcher, which fell behind.
    Lost(u64),
}

/// The count of a server-sent comment line saying reports were lost
/// (`: lagged: N reports lost`, as the control API writes it).
fn lost_in(line: &str) -> Option<u64> {
    let rest = line.strip_prefix(':')?.trim_start().strip_prefix("lagged:")?;
    rest.split_whitespace().next()?.parse().ok()
}

#[cfg(test)]
mod watched_tests {
    use super::lost_in;

    #[test]
    fn a_lag_comment_gives_its_count_and_nothing_else_does() {
        assert_eq!(lost_in(": lagged: 17 reports lost"), Some(17));
        assert_eq!(lost_in(":lagged: 3 reports lost"), Some(3));
        assert_eq!(lost_in(": keep-alive"), None);
        assert_eq!(lost_in(""), None);
        assert_eq!(lost_in("data: {}"), None);
        assert_eq!(lost_in(": lagged: many reports lost"), None);
    }
}
