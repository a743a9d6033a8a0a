//! tokenclock: a transparent timing proxy for LLM model servers.
//!
//! tokenclock sits between clients and a model server (vLLM, SGLang, TGI,
//! Ollama, llama.cpp, or a remote OpenAI/Anthropic-style API), forwards every
//! request and response unchanged, byte for byte, and watches the bytes go
//! by so it can time what the client experiences.
//!
//! The source tree is the pipeline; each folder is one stage, in the order
//! data flows:
//!
//! - [`config`]: the TOML file, environment and flags, validated once at
//!   start into a [`Config`].
//! - [`proxy`]: the data path: listeners and connections ([`proxy::server`]),
//!   forwarding with its header rules, timeouts and the one place errors
//!   become responses ([`proxy::forward`]), config reloads and readiness.
//! - [`measure`]: turns the bytes passing by into one timeline per request:
//!   the observing body (the only seam with forwarding), framing of SSE and
//!   NDJSON (and of a form request's fields), one dialect per API family, the timeline and its SLO judgement.
//!   It does no I/O and imports nothing from the other folders
//!   (`tests/it/layers.rs` fails when it does).
//! - [`export`]: what leaves the process on the side: Prometheus metrics and
//!   the endpoint that serves them, JSONL records, opt-in OpenTelemetry
//!   traces (OTLP/HTTP), and the logs, each through
//!   a bounded, lossy path that can never stop a request.
//! - [`tools`]: apart from the proxy, used by the command line, the tests and
//!   the benchmarks: the simulated model server, the load generator, the demo
//!   and the offline report of record files.
//!
//! The binary (`src/main.rs`, with `src/cli/`) only parses the command line
//! and calls [`run`] or a tool.

#![forbid(unsafe_code)]
// A `pub` item the crate does not export is `pub(crate)`: what is public is
// what the binary and the tests use.
#![warn(unreachable_pub)]

pub mod config;
pub mod export;
pub mod measure;
pub mod proxy;
pub mod tools;

pub use crate::{
    config::Config,
    proxy::server::{Bound, StartError},
};

/// Runs the proxy on its own runtime until SIGTERM or SIGINT, then drains;
/// SIGHUP reloads the config file `source` names.
pub fn run(config: Config, source: proxy::reload::Source) -> Result<(), StartError> {
    // One thread is tokio's current-thread scheduler, not a multi-thread
    // one with a single worker: that would run the connections on the
    // worker and this function's future on the calling thread, and each
    // wake-up would pay for the work-stealing bookkeeping no other worker
    // needs (about 500 instructions an event; tests/perf/RESULTS.md, "One thread,
    // one scheduler").
    let mut builder = match config.worker_threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(n);
            builder
        }
    };
    let runtime = builder.enable_all().build().map_err(StartError::Runtime)?;
    let served = runtime.block_on(async move {
        // Handlers first: a signal that arrives once we listen must drain us,
        // not kill us with the default action.
        let shutdown = termination();
        survive_file_size_limit();
        let hangups = proxy::reload::Hangups::install();
        let bound = Bound::bind(config).await?.with_reloads(source, hangups);
        bound.run(shutdown).await
    });
    // Not the drop's wait for every blocking thread: one a hung mount
    // blocks (a reload's open, a record write given up on) would hold the
    // exit forever.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

/// A write past the process's file-size limit (`RLIMIT_FSIZE`: `ulimit -f`,
/// a container runtime's) raises SIGXFSZ, whose default action ends the
/// process, and every request in flight with it, for a records or log
/// file that grew too large. With a handler installed (tokio's, which
/// stays for the process's life), the write fails with `EFBIG` instead,
/// and its writer loses and counts its output as on a full disk.
fn survive_file_size_limit() {
    use tokio::signal::unix::{signal, SignalKind};
    if let Err(e) = signal(SignalKind::from_raw(libc::SIGXFSZ)) {
        tracing::warn!(error = %e, "Cannot handle SIGXFSZ; a file past its size limit will end the process.");
    }
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
