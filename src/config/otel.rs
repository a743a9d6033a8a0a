//! `[otel]`: OpenTelemetry trace export over OTLP/HTTP (protobuf), as
//! written in the file and as validated. Absent, nothing is exported and
//! nothing runs.

use std::{collections::BTreeMap, time::Duration};

use http::{HeaderName, HeaderValue, Uri};
use serde::{Deserialize, Serialize};

use super::{duration, ConfigError};

/// `[otel]` as written.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OtelFile {
    endpoint: String,
    #[serde(default = "default_service_name")]
    service_name: String,
    #[serde(default = "default_sample_ratio")]
    sample_ratio: f64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<String, String>,
    #[serde(default = "default_queue")]
    queue: usize,
    #[serde(default = "default_max_batch")]
    max_batch: usize,
    #[serde(default = "default_batch_delay", with = "duration")]
    batch_delay: Duration,
    #[serde(default = "default_export_timeout", with = "duration")]
    export_timeout: Duration,
}

fn default_service_name() -> String {
    "tokenclock".to_owned()
}
fn default_sample_ratio() -> f64 {
    1.0
}
fn default_queue() -> usize {
    2048
}
fn default_max_batch() -> usize {
    512
}
fn default_batch_delay() -> Duration {
    Duration::from_secs(1)
}
fn default_export_timeout() -> Duration {
    Duration::from_secs(5)
}

/// What `check-config` prints instead of a header value.
const REDACTED: &str = "<redacted>";

/// Longest `batch_delay` or `export_timeout`: a span older than this is
/// of little use, and shutdown must not wait on a long export.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// Where and how spans are exported.
#[derive(Clone, Debug)]
pub struct Otel {
    /// Where spans are POSTed: the `endpoint` with `/v1/traces` appended.
    pub traces_url: Uri,
    /// The `service.name` resource attribute.
    pub service_name: String,
    /// Fraction of traces sampled when the request carried no
    /// `traceparent` (0 to 1), decided on the trace id.
    pub sample_ratio: f64,
    /// Headers sent with every export (auth); never logged or printed.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Spans queued for export before new ones are dropped and counted.
    pub queue: usize,
    /// Spans sent in one export request, at most.
    pub max_batch: usize,
    /// Longest a span waits in the queue for its batch to fill.
    pub batch_delay: Duration,
    /// Longest one export request may take; beyond it the batch is dropped.
    pub export_timeout: Duration,
}

impl OtelFile {
    /// Replaces every header value with a placeholder, for printing.
    pub(super) fn redact(&mut self) {
        self.headers
            .values_mut()
            .for_each(|v| REDACTED.clone_into(v));
    }

    /// Validates every key; errors name `otel.KEY`.
    pub(super) fn validate(&self) -> Result<Otel, ConfigError> {
        Ok(Otel {
            traces_url: traces_url(&self.endpoint)?,
            service_name: self.service_name()?,
            sample_ratio: self.sample_ratio()?,
            headers: self.headers()?,
            queue: self.queue()?,
            max_batch: at_least_one("otel.max_batch", self.max_batch)?,
            batch_delay: wait("otel.batch_delay", self.batch_delay)?,
            export_timeout: wait("otel.export_timeout", self.export_timeout)?,
        })
    }

    fn service_name(&self) -> Result<String, ConfigError> {
        let name = self.service_name.trim();
        if name.is_empty() {
            return Err(ConfigError::invalid(
                "otel.service_name",
                "must not be empty",
            ));
        }
        Ok(name.to_owned())
    }

    fn sample_ratio(&self) -> Result<f64, ConfigError> {
        if !(0.0..=1.0).contains(&self.sample_ratio) {
            let message = format!("must be between 0 and 1, got {}", self.sample_ratio);
            return Err(ConfigError::invalid("otel.sample_ratio", message));
        }
        Ok(self.sample_ratio)
    }

    /// Names and values as HTTP allows them; the message never shows a value.
    fn headers(&self) -> Result<Vec<(HeaderName, HeaderValue)>, ConfigError> {
        self.headers
            .iter()
            .map(|(name, value)| {
                let key = format!("otel.headers.{name}");
                let name = HeaderName::from_bytes(name.as_bytes())
                    .map_err(|_| ConfigError::invalid(&key, "is not a valid header name"))?;
                if matches!(name.as_str(), "content-type" | "content-length" | "host") {
                    return Err(ConfigError::invalid(&key, "is set by the exporter itself"));
                }
                let mut value = HeaderValue::from_str(value).map_err(|_| {
                    ConfigError::invalid(&key, "the value is not a valid header value")
                })?;
                value.set_sensitive(true);
                Ok((name, value))
            })
            .collect()
    }
}

/// `endpoint` + `/v1/traces`; `http` or `https`, a host, no credentials
/// (the endpoint is logged; credentials go in `headers`).
fn traces_url(endpoint: &str) -> Result<Uri, ConfigError> {
    let key = "otel.endpoint";
    let shown = super::upstream::shown(endpoint);
    let uri: Uri = endpoint
        .trim()
        .parse()
        .map_err(|e| ConfigError::invalid(key, format!("`{shown}` is not a URL: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(ConfigError::invalid(
            key,
            "must start with http:// or https://",
        ));
    }
    let Some(authority) = uri.authority() else {
        return Err(ConfigError::invalid(key, "must name a host"));
    };
    if authority.as_str().contains('@') {
        let message = "must not carry credentials; put them in otel.headers";
        return Err(ConfigError::invalid(key, message));
    }
    if uri.query().is_some() {
        return Err(ConfigError::invalid(key, "must not have a query string"));
    }
    super::upstream::port(authority).map_err(|e| ConfigError::invalid(key, e))?;
    let base = uri.path().trim_end_matches('/');
    let url = format!(
        "{}://{authority}{base}/v1/traces",
        uri.scheme_str().unwrap_or("http")
    );
    url.parse()
        .map_err(|e| ConfigError::invalid(key, format!("`{url}` is not a URL: {e}")))
}

/// Spans of one request, at most: the request span and six phases. A
/// request's spans are queued whole, so the queue must hold them.
pub(crate) const MAX_SPANS_PER_REQUEST: usize = 7;

impl OtelFile {
    fn queue(&self) -> Result<usize, ConfigError> {
        if self.queue < MAX_SPANS_PER_REQUEST {
            let message = format!("must be at least {MAX_SPANS_PER_REQUEST} (one request's spans)");
            return Err(ConfigError::invalid("otel.queue", message));
        }
        Ok(self.queue)
    }
}

fn at_least_one(key: &str, value: usize) -> Result<usize, ConfigError> {
    if value == 0 {
        return Err(ConfigError::invalid(key, "must be at least 1"));
    }
    Ok(value)
}

fn wait(key: &str, value: Duration) -> Result<Duration, ConfigError> {
    if value.is_zero() || value > MAX_WAIT {
        return Err(ConfigError::invalid(
            key,
            "must be more than 0 and at most 60s",
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn otel(text: &str) -> Result<Otel, String> {
        let file: OtelFile = toml::from_str(text).map_err(|e| e.message().to_owned())?;
        file.validate().map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_fill_in_and_the_traces_path_is_appended() {
        let o = otel("endpoint = \"http://collector:4318\"").expect("valid");
        assert_eq!(o.traces_url.to_string(), "http://collector:4318/v1/traces");
        assert_eq!(o.service_name, "tokenclock");
        assert_eq!(o.sample_ratio, 1.0);
        assert!(o.headers.is_empty());
        assert_eq!((o.queue, o.max_batch), (2048, 512));
        assert_eq!(o.batch_delay, Duration::from_secs(1));
        assert_eq!(o.export_timeout, Duration::from_secs(5));
        let o = otel("endpoint = \"https://c.example/otlp/\"").expect("valid");
        assert_eq!(o.traces_url.to_string(), "https://c.example/otlp/v1/traces");
    }

    #[test]
    fn each_bad_key_is_named() {
        for (text, key) in [
            ("endpoint = \"collector:4318\"", "otel.endpoint"),
            ("endpoint = \"ftp://c:4318\"", "otel.endpoint"),
            ("endpoint = \"http://u:p@c:4318\"", "otel.endpoint"),
            ("endpoint = \"http://c:4318/?a=1\"", "otel.endpoint"),
            (
                "endpoint = \"http://c\"\nservice_name = \" \"",
                "otel.service_name",
            ),
            (
                "endpoint = \"http://c\"\nsample_ratio = 1.5",
                "otel.sample_ratio",
            ),
            (
                "endpoint = \"http://c\"\nsample_ratio = -0.1",
                "otel.sample_ratio",
            ),
            (
                "endpoint = \"http://c\"\nsample_ratio = nan",
                "otel.sample_ratio",
            ),
            ("endpoint = \"http://c\"\nqueue = 6", "otel.queue"),
            ("endpoint = \"http://c\"\nmax_batch = 0", "otel.max_batch"),
            (
                "endpoint = \"http://c\"\nbatch_delay = \"0s\"",
                "otel.batch_delay",
            ),
            (
                "endpoint = \"http://c\"\nexport_timeout = \"2m\"",
                "otel.export_timeout",
            ),
            (
                "endpoint = \"http://c\"\nheaders = { \"a b\" = \"x\" }",
                "otel.headers.a b",
            ),
            (
                "endpoint = \"http://c\"\nheaders = { host = \"x\" }",
                "otel.headers.host",
            ),
        ] {
            let error = otel(text).expect_err(text);
            assert!(error.contains(key), "{text}: {error}");
        }
    }

    #[test]
    fn a_bad_header_value_is_refused_without_showing_it() {
        let error =
            otel("endpoint = \"http://c\"\nheaders = { authorization = \"Bearer s3cr\\net\" }")
                .expect_err("a newline is not a header value");
        assert!(error.contains("otel.headers.authorization"), "{error}");
        assert!(!error.contains("s3cr"), "{error}");
    }

    #[test]
    fn headers_are_sensitive_and_redacted_for_printing() {
        let text = "endpoint = \"http://c\"\nheaders = { authorization = \"Bearer s3cret\" }";
        let mut file: OtelFile = toml::from_str(text).expect("parses");
        let o = file.validate().expect("valid");
        assert!(o.headers[0].1.is_sensitive());
        assert!(!format!("{o:?}").contains("s3cret"));
        file.redact();
        let shown = toml::to_string(&file).expect("renders");
        assert!(
            !shown.contains("s3cret") && shown.contains(REDACTED),
            "{shown}"
        );
    }

    #[test]
    fn unknown_keys_are_refused() {
        let error = otel("endpoint = \"http://c\"\nsampling = 1").expect_err("unknown key");
        assert!(error.contains("sampling"), "{error}");
    }
}
