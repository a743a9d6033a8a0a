//! Configuration: the TOML file, environment and flags merged once at start
//! into a validated [`Config`].
//!
//! Precedence is flag > `TOKENCLOCK_*` environment variable > file > default.
//! Every default lives in [`File::default`]; every check lives in
//! [`File::validate`]. A bad value is a [`ConfigError`] naming its key.

mod duration;
mod upstream;

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use serde::{Deserialize, Serialize};

pub use self::upstream::{Upstream, UpstreamProtocol};
use crate::dialect::Dialect;

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
    /// Timeouts on both sides of the proxy.
    pub timeouts: Timeouts,
    /// Upstream connection pool.
    pub pool: Pool,
    /// How request and response bodies are read for measurement.
    pub reading: Reading,
    /// Whether requests may be changed to learn exact token counts.
    pub usage_mode: UsageMode,
    /// How long in-flight requests may run on after SIGTERM/SIGINT.
    pub shutdown_grace: Duration,
    /// Tokio worker threads; at least 1.
    pub worker_threads: usize,
    /// Log line format.
    pub log_format: LogFormat,
    /// `RUST_LOG`-style filter used when `RUST_LOG` is not set.
    pub log_filter: String,
}

/// How requests are read, fixed at start from the config.
#[derive(Clone, Debug)]
pub struct Reading {
    /// Longest event (or non-streamed body) read; longer ones are skipped
    /// and counted.
    pub max_event_bytes: usize,
    /// Longest request body copied on the side to learn `model`, `stream`…
    pub request_capture_bytes: usize,
    /// Dialects forced for exact request paths, over [`Dialect::from_path`].
    pub dialects: HashMap<String, Dialect>,
}

impl Reading {
    /// The dialect of a request path.
    pub fn dialect(&self, path: &str) -> Dialect {
        self.dialects
            .get(path)
            .copied()
            .unwrap_or_else(|| Dialect::from_path(path))
    }
}

/// Timeouts, each a span of time without progress.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// TCP (and TLS) connect to the upstream; exceeded → 504.
    pub connect: Duration,
    /// Request sent → upstream response head; exceeded → 504.
    pub response_header: Duration,
    /// Between two upstream body frames; exceeded → the client's stream is aborted.
    pub idle: Duration,
    /// A client must send its request head within this (slowloris guard).
    pub header_read: Duration,
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

/// A configuration problem, displayed as one line naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// A key has a bad value, or is unknown.
    #[error("{key}: {message}{origin}")]
    Invalid {
        /// The key, as written in the file (`connect_timeout`).
        key: String,
        /// What is wrong with it.
        message: String,
        /// Where the value came from (` (from TOKENCLOCK_LISTEN)`), or empty.
        origin: Origin,
    },
}

impl ConfigError {
    fn invalid(key: &str, message: impl fmt::Display) -> Self {
        Self::Invalid {
            key: key.to_owned(),
            message: message.to_string(),
            origin: Origin::File,
        }
    }
}

/// Where a setting came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The config file or the default.
    File,
    /// A command-line flag.
    Flag(&'static str),
    /// An environment variable.
    Env(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File => Ok(()),
            Self::Flag(flag) => write!(f, " (from {flag})"),
            Self::Env(var) => write!(f, " (from {var})"),
        }
    }
}

/// A value given on the command line or in the environment, which wins
/// over the file.
#[derive(Clone, Debug)]
pub struct Override {
    /// The raw text.
    pub value: String,
    /// Where it came from.
    pub origin: Origin,
}

/// Settings that may come from flags or environment variables.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen` / `TOKENCLOCK_LISTEN`.
    pub listen: Option<Override>,
    /// `--upstream` / `TOKENCLOCK_UPSTREAM`.
    pub upstream: Option<Override>,
    /// `--metrics-listen` / `TOKENCLOCK_METRICS_LISTEN`.
    pub metrics_listen: Option<Override>,
    /// `--log-format`.
    pub log_format: Option<Override>,
    /// `--worker-threads`.
    pub worker_threads: Option<Override>,
}

/// The config file as written: every key optional, defaults filled in.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct File {
    listen: SocketAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    upstream: Option<String>,
    metrics_listen: SocketAddr,
    upstream_protocol: UpstreamProtocol,
    #[serde(skip_serializing_if = "Option::is_none")]
    upstream_ca_file: Option<PathBuf>,
    preserve_host: bool,
    #[serde(with = "duration")]
    connect_timeout: Duration,
    #[serde(with = "duration")]
    response_header_timeout: Duration,
    #[serde(with = "duration")]
    idle_timeout: Duration,
    #[serde(with = "duration")]
    header_read_timeout: Duration,
    #[serde(with = "duration")]
    pool_idle_timeout: Duration,
    pool_max_idle_per_host: usize,
    #[serde(with = "duration")]
    shutdown_grace: Duration,
    worker_threads: usize,
    log_format: LogFormat,
    log_filter: String,
    max_event_bytes: usize,
    request_capture_bytes: usize,
    usage_mode: UsageMode,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    dialects: BTreeMap<String, String>,
}

impl Default for File {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            upstream: None,
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            upstream_protocol: UpstreamProtocol::Http1,
            upstream_ca_file: None,
            preserve_host: false,
            connect_timeout: Duration::from_secs(5),
            response_header_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(300),
            header_read_timeout: Duration::from_secs(30),
            pool_idle_timeout: Duration::from_secs(4),
            pool_max_idle_per_host: 256,
            shutdown_grace: Duration::from_secs(30),
            worker_threads: 0,
            log_format: LogFormat::Text,
            log_filter: "info".to_owned(),
            max_event_bytes: 1024 * 1024,
            request_capture_bytes: 8 * 1024 * 1024,
            usage_mode: UsageMode::Passive,
            dialects: BTreeMap::new(),
        }
    }
}

// === impl File ===

impl File {
    /// Reads and parses a config file. Unknown keys are errors.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses config text; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Self, ConfigError> {
        let syntax = |err: toml::de::Error| {
            let (line, column) = line_column(text, err.span().map_or(0, |s| s.start));
            ConfigError::Syntax {
                path: path.to_owned(),
                line,
                column,
                message: err.message().trim().to_owned(),
            }
        };
        let de = toml::de::Deserializer::parse(text).map_err(syntax)?;
        serde_path_to_error::deserialize(de).map_err(|err| {
            let key = err.path().to_string();
            let inner = err.into_inner();
            if key == "." {
                return syntax(inner);
            }
            ConfigError::invalid(&key, inner.message().trim())
        })
    }

    /// Applies flag and environment values, which win over the file.
    pub fn apply(&mut self, overrides: &Overrides) -> Result<(), ConfigError> {
        if let Some(o) = &overrides.listen {
            self.listen = parse_override("listen", o)?;
        }
        if let Some(o) = &overrides.metrics_listen {
            self.metrics_listen = parse_override("metrics_listen", o)?;
        }
        if let Some(o) = &overrides.upstream {
            // Checked with the rest in `validate`; keep the origin for its error.
            Upstream::parse(&o.value).map_err(|message| ConfigError::Invalid {
                key: "upstream".to_owned(),
                message,
                origin: o.origin.clone(),
            })?;
            self.upstream = Some(o.value.clone());
        }
        if let Some(o) = &overrides.log_format {
            self.log_format = parse_override("log_format", o)?;
        }
        if let Some(o) = &overrides.worker_threads {
            self.worker_threads = parse_override("worker_threads", o)?;
        }
        Ok(())
    }

    /// Checks every value and builds the ready-to-use [`Config`].
    pub fn validate(self) -> Result<Config, ConfigError> {
        let upstream_text = self.upstream.as_deref().ok_or_else(|| {
            ConfigError::invalid(
                "upstream",
                "required (--upstream, TOKENCLOCK_UPSTREAM or `upstream = \"http://host:port\"`)",
            )
        })?;
        let mut upstream = Upstream::parse(upstream_text)
            .map_err(|m| ConfigError::invalid("upstream", m))?
            .with_protocol(self.upstream_protocol);
        if let Some(path) = &self.upstream_ca_file {
            upstream = upstream
                .with_ca_file(path)
                .map_err(|m| ConfigError::invalid("upstream_ca_file", m))?;
        }
        if self.listen == self.metrics_listen && self.listen.port() != 0 {
            return Err(ConfigError::invalid(
                "metrics_listen",
                "must differ from `listen`",
            ));
        }
        for (key, value) in [
            ("connect_timeout", self.connect_timeout),
            ("response_header_timeout", self.response_header_timeout),
            ("idle_timeout", self.idle_timeout),
            ("header_read_timeout", self.header_read_timeout),
            ("pool_idle_timeout", self.pool_idle_timeout),
        ] {
            if value.is_zero() {
                return Err(ConfigError::invalid(key, "must be greater than zero"));
            }
        }
        tracing_subscriber::EnvFilter::try_new(&self.log_filter)
            .map_err(|e| ConfigError::invalid("log_filter", e))?;
        if self.max_event_bytes == 0 {
            return Err(ConfigError::invalid(
                "max_event_bytes",
                "must be greater than zero",
            ));
        }
        let reading = Reading {
            max_event_bytes: self.max_event_bytes,
            request_capture_bytes: self.request_capture_bytes,
            dialects: self.dialect_overrides()?,
        };
        Ok(Config {
            listen: self.listen,
            metrics_listen: self.metrics_listen,
            upstream,
            preserve_host: self.preserve_host,
            timeouts: Timeouts {
                connect: self.connect_timeout,
                response_header: self.response_header_timeout,
                idle: self.idle_timeout,
                header_read: self.header_read_timeout,
            },
            pool: Pool {
                idle_timeout: self.pool_idle_timeout,
                max_idle_per_host: self.pool_max_idle_per_host,
            },
            reading,
            usage_mode: self.usage_mode,
            shutdown_grace: self.shutdown_grace,
            worker_threads: match self.worker_threads {
                0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                n => n,
            },
            log_format: self.log_format,
            log_filter: self.log_filter,
        })
    }

    fn dialect_overrides(&self) -> Result<HashMap<String, Dialect>, ConfigError> {
        self.dialects
            .iter()
            .map(|(path, name)| {
                let key = format!("dialects.\"{path}\"");
                if !path.starts_with('/') {
                    return Err(ConfigError::invalid(&key, "a path starts with `/`"));
                }
                let dialect = Dialect::from_name(name).ok_or_else(|| {
                    let names: Vec<_> = Dialect::ALL.iter().map(|d| d.as_str()).collect();
                    ConfigError::invalid(
                        &key,
                        format!("unknown dialect `{name}`; one of {}", names.join(", ")),
                    )
                })?;
                Ok((path.clone(), dialect))
            })
            .collect()
    }

    /// The effective settings as TOML, as `check-config` prints them.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot render settings: {e}\n"))
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

fn parse_override<T>(key: &str, o: &Override) -> Result<T, ConfigError>
where
    T: FromStr,
    T::Err: fmt::Display,
{
    o.value
        .trim()
        .parse()
        .map_err(|e: T::Err| ConfigError::Invalid {
            key: key.to_owned(),
            message: format!("invalid value `{}`: {e}", o.value),
            origin: o.origin.clone(),
        })
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text.as_bytes()[..offset.min(text.len())];
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    let column = before.iter().rev().take_while(|&&b| b != b'\n').count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests;
