//! A simulated model server: the wire formats of vLLM, OpenAI, Anthropic and
//! Ollama, with a latency model that queues, batches and decodes like one.
//!
//! It is not a model: the tokens are made-up words. What it is honest about
//! is timing: at most `max_batch` requests decode at once, the rest wait in
//! a FIFO queue after their response head was sent (as vLLM does), prefill
//! takes time proportional to the prompt, and each decode step slows down
//! as the batch grows. Request headers select faults (`x-sim-fault`) or an
//! exact timing schedule (`x-sim-schedule`) for tests and benchmarks.

mod body;
mod engine;
mod fault;
mod generate;
mod metrics;
mod request;
mod schedule;
mod service;
mod text;
mod wire;

pub(crate) use self::request::AUDIO_BYTES_PER_TOKEN;

use std::{future::Future, io, net::SocketAddr, time::Duration};

use serde::Deserialize;
use tokio::net::TcpListener;

pub use self::{fault::Fault, schedule::Schedule};
use crate::{
    config::Timeouts,
    export::metrics::ConnectionMetrics,
    proxy::server::{Drain, Listener, Serve},
};

/// The client-side deadlines of the simulator's connections; the upstream
/// ones do not apply to it.
const SIM_TIMEOUTS: Timeouts = Timeouts {
    connect: Duration::from_secs(5),
    response_header: None,
    idle: None,
    request_body: Duration::from_secs(30),
    header_read: Duration::from_secs(30),
    client_idle: Duration::from_secs(300),
    client_send: Duration::from_secs(300),
    keep_alive_interval: Duration::from_secs(30),
    keep_alive_timeout: Duration::from_secs(20),
};

/// The simulator's knobs. Times are in milliseconds, rates per second.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SimConfig {
    /// Requests decoded at once; later ones wait in a FIFO queue.
    pub max_batch: usize,
    /// Prompt tokens processed per second during prefill.
    pub prefill_tokens_per_s: f64,
    /// Milliseconds per decode step with a batch of one.
    pub decode_ms_per_token: f64,
    /// Extra milliseconds per decode step for each other running sequence.
    pub batch_penalty_ms: f64,
    /// Tokens emitted per streamed event (vLLM's `--stream-interval`).
    pub stream_interval: usize,
    /// Share of each request's tokens that are reasoning, for every request
    /// (models whose name contains "reason" or "think" use 0.5 when this is 0).
    pub reasoning_share: f64,
    /// Mean tokens generated when the request does not say how many; each
    /// such request draws its length from an exponential distribution.
    pub output_tokens: u64,
    /// Seed of the token text; the same seed and request give the same text.
    pub seed: u64,
    /// The model name `/v1/models` lists and responses report.
    pub model: String,
    /// A fault applied to every request without an `x-sim-fault` header.
    pub fault: Option<String>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            max_batch: 8,
            prefill_tokens_per_s: 8000.0,
            decode_ms_per_token: 20.0,
            batch_penalty_ms: 0.5,
            stream_interval: 1,
            reasoning_share: 0.0,
            output_tokens: 128,
            seed: 1,
            model: "sim-llama".to_owned(),
            fault: None,
        }
    }
}

/// A configuration the simulator cannot run with.
#[derive(Debug, thiserror::Error)]
pub enum SimConfigError {
    /// A count that must be at least 1 was 0.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// A rate or time that must be finite and not negative (or positive).
    #[error("{0} must be a finite number {1}")]
    Range(&'static str, &'static str),
    /// The share is outside 0..=1.
    #[error("reasoning_share must be between 0 and 1")]
    Share,
    /// The `fault` setting does not parse.
    #[error("fault: {0}")]
    Fault(#[from] fault::FaultError),
}

impl SimConfig {
    /// Checks every value once, so the engine can trust them.
    pub fn validate(&self) -> Result<(), SimConfigError> {
        if self.max_batch == 0 {
            return Err(SimConfigError::Zero("max_batch"));
        }
        if self.stream_interval == 0 {
            return Err(SimConfigError::Zero("stream_interval"));
        }
        let finite = |v: f64| v.is_finite() && v >= 0.0;
        if !(finite(self.prefill_tokens_per_s) && self.prefill_tokens_per_s > 0.0) {
            return Err(SimConfigError::Range("prefill_tokens_per_s", "above 0"));
        }
        if !finite(self.decode_ms_per_token) {
            return Err(SimConfigError::Range(
                "decode_ms_per_token",
                "of at least 0",
            ));
        }
        if !finite(self.batch_penalty_ms) {
            return Err(SimConfigError::Range("batch_penalty_ms", "of at least 0"));
        }
        if !(0.0..=1.0).contains(&self.reasoning_share) {
            return Err(SimConfigError::Share);
        }
        if let Some(fault) = &self.fault {
            fault.parse::<Fault>()?;
        }
        Ok(())
    }
}

/// A simulator bound to its port, not yet serving.
pub struct Sim {
    listener: TcpListener,
    service: service::SimService,
    connections: ConnectionMetrics,
}

/// Binds `listen` and prepares the simulator; fails on a bad config
/// (`InvalidInput`) or a port that cannot be bound.
pub async fn bind(listen: SocketAddr, config: SimConfig) -> io::Result<Sim> {
    config
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let service = service::SimService::new(config).map_err(io::Error::other)?;
    let connections = ConnectionMetrics::unexported().map_err(io::Error::other)?;
    let listener = TcpListener::bind(listen).await?;
    Ok(Sim {
        listener,
        service,
        connections,
    })
}

impl Sim {
    /// The address clients connect to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` resolves, then stops accepting and closes
    /// the open connections (in-flight generations are cut).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let Self {
            listener,
            service,
            connections,
        } = self;
        if let Ok(listen) = listener.local_addr() {
            tracing::info!(%listen, "Simulator listening.");
        }
        let drain = Drain::new();
        let serve = Serve::new(&SIM_TIMEOUTS, connections);
        Listener::new(listener, usize::MAX, serve)
            .accept(service, &drain, shutdown)
            .await;
        // Streams may be long; give them a moment, not a minute.
        let _ = tokio::time::timeout(Duration::from_secs(1), drain.shutdown()).await;
        tracing::info!("Simulator stopped.");
    }
}

#[cfg(test)]
mod tests {
    use super::{SimConfig, SimConfigError};

    #[test]
    fn config_reads_partial_toml_and_refuses_unknown_keys() {
        let config: SimConfig = toml::from_str("max_batch = 2\nseed = 9").expect("valid");
        assert_eq!(
            config,
            SimConfig {
                max_batch: 2,
                seed: 9,
                ..SimConfig::default()
            }
        );
        assert!(toml::from_str::<SimConfig>("max_batches = 2").is_err());
    }

    #[test]
    fn validate_names_the_bad_value() {
        let bad = |config: SimConfig| config.validate().expect_err("invalid").to_string();
        let d = SimConfig::default;
        assert!(d().validate().is_ok());
        assert_eq!(
            bad(SimConfig {
                max_batch: 0,
                ..d()
            }),
            "max_batch must be at least 1"
        );
        assert!(bad(SimConfig {
            prefill_tokens_per_s: 0.0,
            ..d()
        })
        .starts_with("prefill"));
        assert!(bad(SimConfig {
            decode_ms_per_token: f64::NAN,
            ..d()
        })
        .starts_with("decode"));
        assert!(matches!(
            SimConfig {
                reasoning_share: 1.5,
                ..d()
            }
            .validate(),
            Err(SimConfigError::Share)
        ));
        let fault = Some("explode".to_owned());
        assert!(matches!(
            SimConfig { fault, ..d() }.validate(),
            Err(SimConfigError::Fault(_))
        ));
    }
}
