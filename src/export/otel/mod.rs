//! The opt-in OpenTelemetry trace export (`[otel]`): each sampled finished
//! request becomes a span (a child of the caller's `traceparent`, or a
//! root) with a child span per phase, sent to an OTLP/HTTP collector off
//! the request path. Built with the cargo feature `otel` (on by default);
//! without it `[otel]` is refused at config load and nothing here exists
//! but an empty [`Traces`].
//!
//! - `span`: sampling and the spans of one timeline (pure).
//! - `exporter`: the bounded queue, the batching task, the drop counters.
//! - `client`: the hyper client the OTLP exporter sends through.

#[cfg(feature = "otel")]
mod client;
#[cfg(feature = "otel")]
mod exporter;
#[cfg(feature = "otel")]
mod span;

#[cfg(feature = "otel")]
pub(crate) use self::exporter::Traces;

/// The trace exporter could not start.
#[derive(Debug, thiserror::Error)]
pub enum OtelError {
    /// Its counters could not be registered.
    #[error("otel: cannot register the span counters: {0}")]
    Metrics(#[from] prometheus::Error),
    /// TLS for the collector could not be set up.
    #[error("otel: cannot set up TLS for the collector: {0}")]
    Tls(#[from] rustls::Error),
    /// The OTLP exporter refused its settings.
    #[error("otel: cannot build the OTLP exporter: {0}")]
    Exporter(String),
}

/// A build without the `otel` feature: config validation refuses `[otel]`,
/// so there is never an exporter to start.
#[cfg(not(feature = "otel"))]
pub(crate) enum Traces {}

#[cfg(not(feature = "otel"))]
impl Traces {
    /// Always `None`: `[otel]` cannot be configured in this build.
    pub(crate) fn start(
        _otel: Option<&crate::config::Otel>,
        _metrics: &crate::export::metrics::Metrics,
    ) -> Result<Option<Self>, OtelError> {
        Ok(None)
    }

    /// Unreachable: no value of this type exists.
    pub(crate) fn sink(&self) -> std::sync::Arc<dyn crate::measure::timeline::TimelineSink> {
        match *self {}
    }

    /// Unreachable: no value of this type exists.
    pub(crate) async fn close(self) {
        match self {}
    }
}
