//! The config file as written: parsing, defaults, overrides, validation.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    str::FromStr,
    time::Duration,
};

use serde::{Deserialize, Serialize};

use super::READY_WINDOW;
use super::{
    duration,
    export::{self, LabelFile, RecordsFile, SloFile, WorkloadFile},
    otel::{Otel, OtelFile},
    Config, ConfigError, Connections, Http1Server, LogFormat, MetricsFile, Override, Overrides,
    Pool, Timeouts, Upstream, UpstreamHealth, UpstreamProtocol, UsageMode,
};
use crate::measure::{
    dialect::Dialect,
    read::{CaptureBudget, ReadSettings},
};

/// `request_capture_total_bytes` when unset (and `request_capture_bytes`
/// is not larger): 64 MiB.
const DEFAULT_CAPTURE_TOTAL: usize = 64 * 1024 * 1024;

/// The config file as written: every key optional, defaults filled in.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct File {
    pub(super) listen: SocketAddr,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) upstream: Option<String>,
    pub(super) metrics_listen: SocketAddr,
    pub(super) upstream_protocol: UpstreamProtocol,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) upstream_ca_file: Option<PathBuf>,
    pub(super) preserve_host: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) upstream_health_path: Option<String>,
    #[serde(with = "duration")]
    pub(super) upstream_health_timeout: Duration,
    #[serde(with = "duration")]
    pub(super) connect_timeout: Duration,
    #[serde(with = "duration::option", skip_serializing_if = "Option::is_none")]
    pub(super) response_header_timeout: Option<Duration>,
    #[serde(with = "duration::option", skip_serializing_if = "Option::is_none")]
    pub(super) idle_timeout: Option<Duration>,
    #[serde(with = "duration")]
    pub(super) request_body_timeout: Duration,
    #[serde(with = "duration")]
    pub(super) header_read_timeout: Duration,
    #[serde(with = "duration")]
    pub(super) client_idle_timeout: Duration,
    #[serde(with = "duration")]
    pub(super) client_send_timeout: Duration,
    #[serde(with = "duration")]
    pub(super) http2_keep_alive_interval: Duration,
    #[serde(with = "duration")]
    pub(super) http2_keep_alive_timeout: Duration,
    pub(super) max_connections: usize,
    pub(super) metrics_max_connections: usize,
    pub(super) http1_server: Http1Server,
    #[serde(with = "duration")]
    pub(super) pool_idle_timeout: Duration,
    pub(super) pool_max_idle_per_host: usize,
    #[serde(with = "duration")]
    pub(super) shutdown_grace: Duration,
    pub(super) worker_threads: usize,
    pub(super) log_format: LogFormat,
    pub(super) log_filter: String,
    pub(super) max_event_bytes: usize,
    pub(super) request_capture_bytes: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) request_capture_total_bytes: Option<usize>,
    pub(super) usage_mode: UsageMode,
    pub(super) max_models: usize,
    pub(super) max_label_value_bytes: usize,
    pub(super) models: Vec<String>,
    pub(super) template_opens_reasoning: Vec<String>,
    pub(super) slo_headers: bool,
    pub(super) request_id_headers: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) labels: Vec<LabelFile>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) slo: Vec<SloFile>,
    pub(super) workload: WorkloadFile,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) buckets: BTreeMap<String, Vec<f64>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) records: Option<RecordsFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) otel: Option<OtelFile>,
    #[serde(skip_serializing_if = "MetricsFile::is_empty")]
    pub(super) metrics: MetricsFile,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub(super) dialects: BTreeMap<String, String>,
}

/// The longest timeout a config may set: a deadline is an instant on the
/// monotonic clock, and one past what it can hold (`18446744073709551615s`,
/// taken for "never") failed every connection that reached it. Longer than
/// any wait a proxy has a use for.
const MAX_TIMEOUT: Duration = Duration::from_secs(365 * 24 * 3600);

impl Default for File {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            upstream: None,
            metrics_listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            upstream_protocol: UpstreamProtocol::Http1,
            upstream_ca_file: None,
            preserve_host: false,
            upstream_health_path: None,
            upstream_health_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            response_header_timeout: None,
            idle_timeout: None,
            request_body_timeout: Duration::from_secs(30),
            header_read_timeout: Duration::from_secs(30),
            client_idle_timeout: Duration::from_secs(90),
            client_send_timeout: Duration::from_secs(60),
            http2_keep_alive_interval: Duration::from_secs(30),
            http2_keep_alive_timeout: Duration::from_secs(20),
            max_connections: 4096,
            metrics_max_connections: 64,
            http1_server: Http1Server::Tokenclock,
            pool_idle_timeout: Duration::from_secs(4),
            pool_max_idle_per_host: 256,
            shutdown_grace: Duration::from_secs(30),
            worker_threads: 0,
            log_format: LogFormat::Text,
            log_filter: "info".to_owned(),
            max_event_bytes: 1024 * 1024,
            request_capture_bytes: 8 * 1024 * 1024,
            request_capture_total_bytes: None,
            usage_mode: UsageMode::Passive,
            max_models: 32,
            max_label_value_bytes: 128,
            models: Vec::new(),
            template_opens_reasoning: Vec::new(),
            slo_headers: false,
            request_id_headers: vec!["x-request-id".to_owned()],
            labels: Vec::new(),
            slo: Vec::new(),
            workload: WorkloadFile::default(),
            buckets: BTreeMap::new(),
            records: None,
            otel: None,
            metrics: MetricsFile::default(),
            dialects: BTreeMap::new(),
        }
    }
}

/// A regular file's text (a symlink to one, as Kubernetes mounts a
/// ConfigMap, too). Opened without blocking and refused unless regular: a
/// FIFO's open would block until a writer came, the start's or a
/// reload's, and with it the thread that opened it.
fn read_regular(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

// === impl File ===

impl File {
    /// Reads and parses a config file. Unknown keys are errors.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = read_regular(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses config text; `path` names it in errors.
    pub fn parse(text: &str, path: &str) -> Result<Self, ConfigError> {
        let syntax = |err: toml::de::Error| {
            let (line, column) = line_column(text, err.span().map_or(0, |s| s.start));
            let mut message = err.message().trim().to_owned();
            // toml says only "duplicate key", its span on the key (never
            // the value, which may be a secret): name it, as every other
            // error names its key.
            if message == "duplicate key" {
                let key = err.span().and_then(|span| text.get(span));
                if let Some(key) = key.filter(|key| !key.contains('\n')) {
                    message = format!("duplicate key `{}`", key.trim().trim_matches('"'));
                }
            }
            ConfigError::Syntax {
                path: path.to_owned(),
                line,
                column,
                message,
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
    pub(crate) fn apply(&mut self, overrides: &Overrides) -> Result<(), ConfigError> {
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
        let upstream_health = self.upstream_health()?;
        if self.listen == self.metrics_listen && self.listen.port() != 0 {
            return Err(ConfigError::invalid(
                "metrics_listen",
                "must differ from `listen`",
            ));
        }
        for (key, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_body_timeout", self.request_body_timeout),
            ("header_read_timeout", self.header_read_timeout),
            ("client_idle_timeout", self.client_idle_timeout),
            ("client_send_timeout", self.client_send_timeout),
            ("http2_keep_alive_interval", self.http2_keep_alive_interval),
            ("http2_keep_alive_timeout", self.http2_keep_alive_timeout),
            ("pool_idle_timeout", self.pool_idle_timeout),
            ("shutdown_grace", self.shutdown_grace),
        ] {
            if value.is_zero() && key != "shutdown_grace" {
                return Err(ConfigError::invalid(key, "must be greater than zero"));
            }
            if value > MAX_TIMEOUT {
                return Err(ConfigError::invalid(key, "must be at most 365d"));
            }
        }
        for (key, value) in [
            ("response_header_timeout", self.response_header_timeout),
            ("idle_timeout", self.idle_timeout),
        ] {
            if value.is_some_and(|d| d.is_zero() || d > MAX_TIMEOUT) {
                return Err(ConfigError::invalid(
                    key,
                    "must be greater than zero and at most 365d (leave it out for no limit)",
                ));
            }
        }
        for (key, value) in [
            ("max_connections", self.max_connections),
            ("metrics_max_connections", self.metrics_max_connections),
        ] {
            if value == 0 {
                return Err(ConfigError::invalid(key, "must be at least 1"));
            }
        }
        if self.worker_threads > MAX_WORKER_THREADS {
            return Err(ConfigError::invalid(
                "worker_threads",
                format_args!(
                    "must be at most {MAX_WORKER_THREADS} (0: one per usable core, up to {AUTO_WORKER_THREADS})"
                ),
            ));
        }
        tracing_subscriber::EnvFilter::try_new(&self.log_filter)
            .map_err(|e| ConfigError::invalid("log_filter", e))?;
        if self.max_event_bytes == 0 {
            return Err(ConfigError::invalid(
                "max_event_bytes",
                "must be greater than zero",
            ));
        }
        // Unset: 64 MiB, or one whole copy when `request_capture_bytes`
        // is larger (a config written before the key keeps working).
        let capture_total = self
            .request_capture_total_bytes
            .unwrap_or(DEFAULT_CAPTURE_TOTAL.max(self.request_capture_bytes));
        if capture_total < self.request_capture_bytes {
            return Err(ConfigError::invalid(
                "request_capture_total_bytes",
                format_args!(
                    "must be at least request_capture_bytes ({}), or no body that large is ever read",
                    self.request_capture_bytes
                ),
            ));
        }
        let export = export::validate(
            (self.max_models, self.max_label_value_bytes),
            &self.models,
            &self.labels,
            &self.slo,
            self.slo_headers,
            &self.buckets,
            &self.workload,
            &self.records,
            &self.metrics,
        )?;
        let otel = self.otel()?;
        let reading = ReadSettings {
            max_event_bytes: self.max_event_bytes,
            request_capture_bytes: self.request_capture_bytes,
            dialects: self.dialect_overrides()?,
            label_headers: export.labels.iter().map(|l| l.header.clone()).collect(),
            slo_headers: export.slo_headers,
            request_id_headers: self.request_id_headers()?,
            max_logged_model_bytes: export.max_value_bytes,
            template_opens_reasoning: self.template_opens_reasoning()?,
            learnt: Default::default(),
            capture_budget: CaptureBudget::new(capture_total),
        };
        Ok(Config {
            listen: self.listen,
            metrics_listen: self.metrics_listen,
            upstream,
            preserve_host: self.preserve_host,
            upstream_health,
            timeouts: Timeouts {
                connect: self.connect_timeout,
                response_header: self.response_header_timeout,
                idle: self.idle_timeout,
                request_body: self.request_body_timeout,
                header_read: self.header_read_timeout,
                client_idle: self.client_idle_timeout,
                client_send: self.client_send_timeout,
                keep_alive_interval: self.http2_keep_alive_interval,
                keep_alive_timeout: self.http2_keep_alive_timeout,
            },
            connections: Connections {
                max: self.max_connections,
                metrics_max: self.metrics_max_connections,
            },
            http1_server: self.http1_server,
            pool: Pool {
                idle_timeout: self.pool_idle_timeout,
                max_idle_per_host: self.pool_max_idle_per_host,
            },
            reading,
            usage_mode: self.usage_mode,
            export,
            shutdown_grace: self.shutdown_grace,
            worker_threads: match self.worker_threads {
                0 => default_worker_threads(
                    std::thread::available_parallelism().map_or(1, |n| n.get()),
                ),
                n => n,
            },
            log_format: self.log_format,
            log_filter: self.log_filter,
            otel,
        })
    }

    /// `[otel]`, refused by a build without the `otel` feature rather than
    /// ignored: the operator asked for traces.
    fn otel(&self) -> Result<Option<Otel>, ConfigError> {
        let Some(otel) = &self.otel else {
            return Ok(None);
        };
        if !cfg!(feature = "otel") {
            let message = "this build has no OpenTelemetry export (cargo feature `otel`)";
            return Err(ConfigError::invalid("otel", message));
        }
        otel.validate().map(Some)
    }

    /// The upstream health probe: a path of the upstream's own (so the
    /// probe can only ever reach the configured upstream) and a timeout
    /// short enough for a verdict inside the readiness window.
    fn upstream_health(&self) -> Result<UpstreamHealth, ConfigError> {
        let timeout = self.upstream_health_timeout;
        if timeout.is_zero() || timeout > READY_WINDOW {
            return Err(ConfigError::invalid(
                "upstream_health_timeout",
                format!(
                    "must be greater than zero and at most {}s (the readiness window)",
                    READY_WINDOW.as_secs()
                ),
            ));
        }
        let path = match &self.upstream_health_path {
            None => None,
            Some(text) => {
                let bad = |why: &str| {
                    ConfigError::invalid(
                        "upstream_health_path",
                        format!("`{text}`: {why}; write a path such as \"/health\""),
                    )
                };
                if !text.starts_with('/') {
                    return Err(bad("a path starts with `/`"));
                }
                Some(
                    http::uri::PathAndQuery::try_from(text.as_str())
                        .map_err(|e| bad(&e.to_string()))?,
                )
            }
        };
        Ok(UpstreamHealth { path, timeout })
    }

    /// `template_opens_reasoning`: model globs, none empty (an empty one
    /// would match only a request that names no model, surely not meant).
    fn template_opens_reasoning(&self) -> Result<std::sync::Arc<[String]>, ConfigError> {
        for (i, glob) in self.template_opens_reasoning.iter().enumerate() {
            if glob.trim().is_empty() {
                let key = format!("template_opens_reasoning[{i}]");
                return Err(ConfigError::invalid(
                    &key,
                    "must name a model or a glob of them",
                ));
            }
        }
        Ok(self.template_opens_reasoning.as_slice().into())
    }

    /// `request_id_headers`: valid header names, in order of preference.
    fn request_id_headers(&self) -> Result<Vec<http::HeaderName>, ConfigError> {
        self.request_id_headers
            .iter()
            .enumerate()
            .map(|(i, name)| super::headers::readable(&format!("request_id_headers[{i}]"), name))
            .collect()
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
    /// Secrets (`otel.headers` values) are replaced by a placeholder.
    pub fn to_toml(&self) -> String {
        let mut shown = self.clone();
        if let Some(otel) = &mut shown.otel {
            otel.redact();
        }
        toml::to_string(&shown).unwrap_or_else(|e| format!("# cannot render settings: {e}\n"))
    }
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

/// The most worker threads `worker_threads = 0` starts.
const AUTO_WORKER_THREADS: usize = 4;

/// The most worker threads that may be asked for: more than the largest
/// nodes have cores. 100,000 took the machine's PIDs and half a GB
/// starting threads, before any listener or signal handler, without a
/// word (a black-box pass found it).
const MAX_WORKER_THREADS: usize = 1024;

/// `worker_threads = 0`: one per core the process may use, at most
/// [`AUTO_WORKER_THREADS`]. `cores` honours the CPU affinity and the
/// cgroup CPU quota (a pod's CPU limit), not just the node's cores. A
/// sidecar shares its pod with the model server: on a 64-core GPU node
/// with no CPU limit, 64 workers would only add idle threads and wake-ups
/// spread over cores, where four forward several hundred thousand events
/// a second.
pub(super) fn default_worker_threads(cores: usize) -> usize {
    cores.clamp(1, AUTO_WORKER_THREADS)
}
