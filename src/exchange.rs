//! One request/response exchange as the proxy saw it: when it started, what
//! came back, how many bytes crossed each way, and how it ended. Written as
//! one access-log line when the response body ends.
//!
//! The log line never holds bodies, query strings or headers, so no prompt,
//! completion, API key or cookie can reach the logs.

use std::{
    fmt,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
};

use bytes::Bytes;
use http::{Method, Request, StatusCode, Version};
use tokio::time::Instant;

use crate::observe::{End, Observe};

/// How a request ended, as seen by the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The upstream answered below 400 and the whole body was delivered.
    Ok,
    /// The upstream answered with a status of 400 or more; delivered in full.
    HttpError,
    /// The upstream could not be reached, or failed mid-response.
    UpstreamError,
    /// The client went away before the response ended.
    ClientCancelled,
    /// A connect, response-head or idle timeout fired.
    Timeout,
}

impl Outcome {
    /// The label value: `ok`, `http_error`, `upstream_error`,
    /// `client_cancelled`, `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::HttpError => "http_error",
            Self::UpstreamError => "upstream_error",
            Self::ClientCancelled => "client_cancelled",
            Self::Timeout => "timeout",
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The response side of an exchange; observes the body sent to the client.
#[derive(Debug)]
pub struct Exchange {
    start: Instant,
    method: Method,
    /// Path only: query strings may carry keys (`?key=…`).
    path: String,
    version: Version,
    status: StatusCode,
    /// Set when the proxy answered itself: the failure's outcome.
    local_failure: Option<Outcome>,
    bytes_out: u64,
    upload: Arc<UploadState>,
}

/// What the request-body observer shares with the response side.
#[derive(Debug, Default)]
struct UploadState {
    bytes: AtomicU64,
}

/// Observes the request body on its way to the upstream.
#[derive(Debug)]
pub struct Upload {
    state: Arc<UploadState>,
}

// === impl Exchange ===

impl Exchange {
    /// Starts an exchange for a request whose head arrived at `start`.
    pub fn start<B>(start: Instant, request: &Request<B>) -> Self {
        Self {
            start,
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
            version: request.version(),
            status: StatusCode::OK,
            local_failure: None,
            bytes_out: 0,
            upload: Arc::default(),
        }
    }

    /// The observer for this exchange's request body.
    pub fn upload(&self) -> Upload {
        Upload {
            state: self.upload.clone(),
        }
    }

    /// Records the status the client receives.
    pub fn set_status(&mut self, status: StatusCode) {
        self.status = status;
    }

    /// Records that the proxy answered itself because forwarding failed.
    pub fn set_local_failure(&mut self, status: StatusCode, timeout: bool) {
        self.status = status;
        self.local_failure = Some(if timeout {
            Outcome::Timeout
        } else {
            Outcome::UpstreamError
        });
    }

    fn outcome(&self, end: End) -> Outcome {
        match (self.local_failure, end) {
            (Some(failure), _) => failure,
            (None, End::Dropped) => Outcome::ClientCancelled,
            (None, End::Failed { timeout: true }) => Outcome::Timeout,
            (None, End::Failed { timeout: false }) => Outcome::UpstreamError,
            (None, End::Complete) if self.status.as_u16() >= 400 => Outcome::HttpError,
            (None, End::Complete) => Outcome::Ok,
        }
    }
}

impl Observe for Exchange {
    fn on_data(&mut self, data: &Bytes, _at: Instant) {
        self.bytes_out += data.len() as u64;
    }

    fn on_end(self, end: End, at: Instant) {
        let outcome = self.outcome(end);
        let duration = at.saturating_duration_since(self.start);
        tracing::info!(
            target: "tokenclock::access",
            method = %self.method,
            path = %self.path,
            version = ?self.version,
            status = self.status.as_u16(),
            outcome = outcome.as_str(),
            duration_ms = duration.as_secs_f64() * 1e3,
            bytes_in = self.upload.bytes.load(Ordering::Relaxed),
            bytes_out = self.bytes_out,
            "Request finished."
        );
    }
}

// === impl Upload ===

impl Observe for Upload {
    fn on_data(&mut self, data: &Bytes, _at: Instant) {
        self.state
            .bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
    }

    fn on_end(self, _end: End, _at: Instant) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exchange(status: u16) -> Exchange {
        let request = Request::new(());
        let mut e = Exchange::start(Instant::now(), &request);
        e.set_status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK));
        e
    }

    #[test]
    fn outcomes_follow_status_and_end() {
        assert_eq!(exchange(200).outcome(End::Complete), Outcome::Ok);
        assert_eq!(exchange(404).outcome(End::Complete), Outcome::HttpError);
        assert_eq!(
            exchange(200).outcome(End::Dropped),
            Outcome::ClientCancelled
        );
        let failed = End::Failed { timeout: false };
        assert_eq!(exchange(200).outcome(failed), Outcome::UpstreamError);
        let idle = End::Failed { timeout: true };
        assert_eq!(exchange(200).outcome(idle), Outcome::Timeout);
    }

    #[test]
    fn a_local_failure_wins_over_how_its_body_ended() {
        let mut e = exchange(200);
        e.set_local_failure(StatusCode::GATEWAY_TIMEOUT, true);
        assert_eq!(e.outcome(End::Complete), Outcome::Timeout);
        let mut e = exchange(200);
        e.set_local_failure(StatusCode::BAD_GATEWAY, false);
        assert_eq!(e.outcome(End::Dropped), Outcome::UpstreamError);
    }
}
