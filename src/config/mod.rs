//! Configuration: the TOML file, environment and flags merged once at start
//! into a validated [`Config`].
//!
//! Precedence is flag > `TOKENCLOCK_*` environment variable > file > default.
//! Every default lives in [`File::default`]; every check lives in
//! [`File::validate`]. A bad value is a [`ConfigError`] naming its key.

mod buckets;
mod disable;
mod duration;
mod error;
mod export;
mod file;
mod headers;
mod otel;
pub(crate) mod reload;
mod upstream;

use std::{net::SocketAddr, path::Path, str::FromStr, time::Duration};

use serde::{Deserialize, Serialize};

pub(crate) use self::{
    disable::{Disabled, MetricsFile},
    error::ConfigError,
    export::{range_label, ExportSettings, DEFAULT_RANGES},
    upstream::UpstreamProtocol,
};
pub use self::{
    error::{Origin, Override, Overrides},
    export::Records,
    file::File,
    otel::Otel,
    upstream::Upstream,
};
use crate::measure::read::ReadSettings;

/// The validated, ready-to-use configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the proxy accepts client connections.
    pub listen: SocketAddr,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub metrics_listen: SocketAddr,
    /// The model server every request is forwarded to.
    pub upstream: Upstream,
    /// Forward the client's `Host` instead of the upstream's authority.
    pub preserve_host: bool,
    /// How `/readyz` learns that the upstream is healthy.
    pub upstream_health: UpstreamHealth,
    /// Timeouts on both sides of the proxy.
    pub timeouts: Timeouts,
    /// Caps on open client connections, per listener.
    pub connections: Connections,
    /// What speaks HTTP/1.1 to clients.
    pub http1_server: Http1Server,
    /// Upstream connection pool.
    pub pool: Pool,
    /// How request and response bodies are read for measurement.
    pub reading: ReadSettings,
    /// Whether requests may be changed to learn exact token counts.
    pub usage_mode: UsageMode,
    /// What is exported: labels, SLOs, buckets, workload ranges, records.
    pub export: ExportSettings,
    /// How long in-flight requests may run on after SIGTERM/SIGINT.
    pub shutdown_grace: Duration,
    /// Tokio worker threads; at least 1.
    pub worker_threads: usize,
    /// Log line format.
    pub log_format: LogFormat,
    /// `RUST_LOG`-style filter used when `RUST_LOG` is not set.
    pub log_filter: String,
    /// OpenTelemetry trace export (`[otel]`); `None` = off.
    pub otel: Option<Otel>,
}

/// How recent the upstream's last good answer must be for `/readyz` to say
/// ready; `upstream_health_timeout` must fit in it.
pub const READY_WINDOW: Duration = Duration::from_secs(10);

/// The upstream's HTTP health check, which `/readyz` follows when set.
#[derive(Clone, Debug)]
pub struct UpstreamHealth {
    /// Path (and query) of the upstream's health endpoint, sent as a `GET`
    /// every `health::PROBE_INTERVAL`; `None` = a TCP connect probe, and any
    /// proxied answer counts too.
    pub path: Option<http::uri::PathAndQuery>,
    /// Longest wait for the health endpoint's answer (connect, head, and
    /// its body to its end or its first 64 KiB, past which it is not read);
    /// exceeded counts as unhealthy. Unused without `path`: the TCP probe
    /// keeps `connect_timeout`.
    pub timeout: Duration,
}

/// Timeouts, each a span of time without progress.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// TCP (and TLS) connect to the upstream; exceeded → 504.
    pub connect: Duration,
    /// Request sent → upstream response head; exceeded → 504. `None` (the
    /// default): no limit. A model server's answer to a request that is
    /// not streamed comes whole, after the last token, and a streamed one
    /// may wait in its queue for minutes; the client's own timeout (600 s
    /// in the OpenAI and Anthropic SDKs) says how long it will wait, and a
    /// client that leaves has its upstream request dropped at once.
    pub response_header: Option<Duration>,
    /// Between two upstream body frames; exceeded → the client's stream is
    /// aborted. `None` (the default): no limit, for the same reason (a
    /// stream's first event waits for the queue and the prefill). A peer
    /// gone without a word is found by TCP keep-alive on upstream sockets.
    pub idle: Option<Duration>,
    /// Between two request body frames from the client, while the upstream
    /// waits for them; exceeded → 408.
    pub request_body: Duration,
    /// A client must send its request head within this (slowloris guard);
    /// on a new connection this covers the first bytes too, and for h2 the
    /// preface, SETTINGS and first HEADERS.
    pub header_read: Duration,
    /// A client connection with no request in flight is closed after this.
    pub client_idle: Duration,
    /// A client connection whose answer its client took no byte of for
    /// this long (its socket stayed full) is closed, as nginx's
    /// `send_timeout` (60 s) closes it: a client that stops reading would
    /// otherwise hold its connection, its upstream request and a place
    /// under `max_connections` for as long as it stays connected.
    pub client_send: Duration,
    /// An h2 client connection silent for this long is sent a PING.
    pub keep_alive_interval: Duration,
    /// A PING unanswered for this long closes the h2 connection.
    pub keep_alive_timeout: Duration,
}

/// Caps on open client connections, so a flood of sockets cannot take the
/// file descriptors the upstream pool and the metrics listener need.
#[derive(Clone, Copy, Debug)]
pub struct Connections {
    /// Open connections on the proxy listener; beyond it new ones are
    /// closed at once and counted. Also the cap on requests in flight
    /// (each HTTP/2 stream is one), beyond which a request is answered
    /// `503`: each holds an upstream socket.
    pub max: usize,
    /// Open connections on the metrics listener.
    pub metrics_max: usize,
}

/// Upstream keep-alive pool.
#[derive(Clone, Copy, Debug)]
pub struct Pool {
    /// Idle connections are closed after this; keep it below the upstream's
    /// keep-alive (5 s for uvicorn-based servers such as vLLM).
    pub idle_timeout: Duration,
    /// Idle connections kept per upstream host.
    pub max_idle_per_host: usize,
}

/// Whether tokenclock may change requests to learn exact token counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageMode {
    /// Touch nothing.
    #[default]
    Passive,
    /// Add `stream_options.include_usage` to streamed OpenAI requests that
    /// lack it, and remove the resulting usage chunk from the response.
    Inject,
}

/// What speaks HTTP/1.1 to the proxy's clients (h2c is hyper's either way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Http1Server {
    /// tokenclock's own HTTP/1.1 codec (`proxy::server::h1`): hyper's
    /// framing and keep-alive decisions, fewer instructions per event.
    #[default]
    Tokenclock,
    /// hyper's HTTP/1.1 server, the fallback.
    Hyper,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable `key=value` lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            other => Err(format!("expected `text` or `json`, got `{other}`")),
        }
    }
}

/// Loads the file (if any), applies overrides and validates: the one way a
/// [`Config`] is made from user input. Returns the effective file view too.
pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<(File, Config), ConfigError> {
    let mut file = match path {
        Some(path) => File::read(path)?,
        None => File::default(),
    };
    file.apply(overrides)?;
    let config = file.clone().validate()?;
    Ok((file, config))
}

#[cfg(test)]
mod tests;
