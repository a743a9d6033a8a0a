//! The simulator's own `/metrics`: server-side TTFT and queue time, the
//! batch and queue sizes, and tokens generated, in its own registry.

use prometheus::{
    Encoder as _, Histogram, HistogramOpts, IntCounter, IntGauge, Registry, TextEncoder,
};

/// Buckets in seconds, 5 ms to 60 s.
const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
];

/// The simulator's metric families.
#[derive(Clone)]
pub(crate) struct SimMetrics {
    registry: Registry,
    /// Arrival → first token event handed to the body (seconds).
    pub ttft: Histogram,
    /// Arrival → admitted to the batch (seconds).
    pub queue: Histogram,
    /// Sequences decoding now.
    pub running: IntGauge,
    /// Requests waiting for a batch slot.
    pub waiting: IntGauge,
    /// Tokens generated, reasoning included.
    pub tokens: IntCounter,
}

impl SimMetrics {
    /// Registers every family in a fresh registry.
    pub(crate) fn new() -> Result<Self, prometheus::Error> {
        let registry = Registry::new();
        let histogram = |name: &str, help: &str| {
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(BUCKETS.to_vec()))
        };
        let metrics = Self {
            ttft: histogram(
                "sim_time_to_first_token_seconds",
                "Server-side time from request arrival to the first token written.",
            )?,
            queue: histogram(
                "sim_queue_time_seconds",
                "Time from request arrival to admission into the decode batch.",
            )?,
            running: IntGauge::new("sim_requests_running", "Requests in the decode batch.")?,
            waiting: IntGauge::new("sim_requests_waiting", "Requests queued for a batch slot.")?,
            tokens: IntCounter::new(
                "sim_generated_tokens_total",
                "Tokens generated, reasoning included.",
            )?,
            registry,
        };
        metrics.registry.register(Box::new(metrics.ttft.clone()))?;
        metrics.registry.register(Box::new(metrics.queue.clone()))?;
        metrics
            .registry
            .register(Box::new(metrics.running.clone()))?;
        metrics
            .registry
            .register(Box::new(metrics.waiting.clone()))?;
        metrics
            .registry
            .register(Box::new(metrics.tokens.clone()))?;
        Ok(metrics)
    }

    /// The Prometheus text exposition of every family.
    pub(crate) fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "Cannot encode the simulator's metrics.");
        }
        out
    }
}
