//! tokenclock: a transparent timing proxy for LLM model servers.
//!
//! tokenclock sits between clients and a model server (vLLM, SGLang, TGI,
//! Ollama, llama.cpp, or a remote OpenAI/Anthropic-style API), forwards every
//! request and response unchanged, byte for byte, and watches the bytes go
//! by so it can time what the client experiences.
//!
//! The pipeline, in the order data flows:
//!
//! - [`config`]: the TOML file, environment and flags, validated once.
//! - [`server`]: listeners, HTTP/1.1 + h2c connections with deadlines and
//!   a cap, graceful shutdown.
//! - [`reload`]: SIGHUP re-reads the config file; what may change live is
//!   swapped in for requests that start afterwards.
//! - [`proxy`]: forwarding: rewriting the request for the upstream, header
//!   rules, timeouts, and the one place errors become responses.
//! - [`observe`]: the observing body wrapper, the only seam between
//!   forwarding and measurement.
//! - [`exchange`]: the observer of one request/response: it reads a copy
//!   of both bodies, feeds the stages below, and writes the access log.
//! - [`sse`] and [`ndjson`]: incremental framing of the response stream
//!   into events.
//! - [`dialect`]: one file per API family, turning events into tokens,
//!   usage and server timings.
//! - [`timeline`]: one plain struct per request: instants, token counts,
//!   phases and outcome; handed to a [`timeline::TimelineSink`].
//! - [`records`]: the opt-in JSONL log of finished timelines.
//! - [`report`]: offline summaries of record files.
//! - [`metrics`]: the Prometheus families; [`admin`] serves them with
//!   [`health`] on the metrics listener.
//! - [`load`]: the load generator used by the demo and the benchmarks.
//!
//! - [`sim`]: a simulated model server for the demo, the tests and the
//!   benchmarks.
//!
//! [`logging`] sets up `tracing`, written by a thread of its own through a
//! bounded, lossy queue. The binary (`src/main.rs`) only parses
//! the command line and calls [`run`].

#![forbid(unsafe_code)]

pub mod admin;
pub mod config;
pub mod demo;
pub mod dialect;
pub mod exchange;
pub mod health;
pub mod load;
pub mod logging;
pub mod metrics;
pub mod ndjson;
pub mod observe;
pub mod proxy;
pub mod records;
pub mod reload;
pub mod report;
pub mod server;
pub mod sim;
pub mod slo;
pub mod sse;
pub mod timeline;

pub use crate::{
    config::Config,
    server::{Bound, StartError},
};

/// Runs the proxy on its own runtime until SIGTERM or SIGINT, then drains;
/// SIGHUP reloads the config file `source` names.
pub fn run(config: Config, source: reload::Source) -> Result<(), StartError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads)
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    runtime.block_on(async move {
        // Handlers first: a signal that arrives once we listen must drain us,
        // not kill us with the default action.
        let shutdown = termination();
        let hangups = reload::Hangups::install();
        let bound = Bound::bind(config).await?.with_reloads(source, hangups);
        bound.run(shutdown).await
    })
}

/// Installs SIGTERM and SIGINT handlers now; the future resolves on the
/// first of them. Must be called within a Tokio runtime.
pub fn termination() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        let (mut term, mut int) = match (term, int) {
            (Ok(term), Ok(int)) => (term, int),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(error = %e, "Cannot install signal handlers; stop with SIGKILL.");
                return std::future::pending().await;
            }
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received."),
            _ = int.recv() => tracing::info!("SIGINT received."),
        }
    }
}
