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
//! - [`server`]: listeners, HTTP/1.1 + h2c connections, graceful shutdown.
//! - [`proxy`]: forwarding: rewriting the request for the upstream, header
//!   rules, timeouts, and the one place errors become responses.
//! - [`observe`]: the observing body wrapper, the only seam between
//!   forwarding and measurement.
//! - [`exchange`]: one request/response as seen by the proxy: bytes,
//!   status, outcome, and its access-log line.
//! - [`metrics`]: the Prometheus families; [`admin`] serves them with
//!   [`health`] on the metrics listener.
//!
//! [`logging`] sets up `tracing`. The binary (`src/main.rs`) only parses
//! the command line and calls [`run`].

#![forbid(unsafe_code)]

pub mod admin;
pub mod config;
pub mod exchange;
pub mod health;
pub mod logging;
pub mod metrics;
pub mod observe;
pub mod proxy;
pub mod server;

pub use crate::{
    config::Config,
    server::{Bound, StartError},
};

/// Runs the proxy on its own runtime until SIGTERM or SIGINT, then drains.
pub fn run(config: Config) -> Result<(), StartError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.worker_threads)
        .enable_all()
        .build()
        .map_err(StartError::Runtime)?;
    runtime.block_on(async move {
        let bound = Bound::bind(config).await?;
        bound.run(termination()).await
    })
}

/// Resolves on the first SIGTERM or SIGINT.
pub async fn termination() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "Cannot listen for SIGINT.");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "Cannot listen for SIGTERM.");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received."),
        () = term => tracing::info!("SIGTERM received."),
    }
}
