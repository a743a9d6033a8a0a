//! `tokenclock load`: flags into a [`LoadConfig`], a runtime, progress on stderr, the summary on stdout.

use std::{process::ExitCode, time::Duration};

use clap::Args;
use tokenclock::tools::load::{self, LoadConfig, RunSummary, Workload};

use crate::fail;

/// The run's length when neither `--requests` nor `--duration` is given.
const DEFAULT_DURATION: Duration = Duration::from_secs(10);

/// Flags of `tokenclock load`.
#[derive(Args)]
pub(crate) struct LoadFlags {
    /// Base URL of the server (or of tokenclock in front of it), e.g. http://127.0.0.1:8080
    #[arg(long, value_name = "URL")]
    target: String,
    /// Closed loop: workers sending back to back; with --rate: the most requests in flight
    #[arg(long, value_name = "N", default_value_t = 1)]
    concurrency: usize,
    /// Open loop: Poisson arrivals, requests per second
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// Stop after this many requests
    #[arg(long, value_name = "N")]
    requests: Option<u64>,
    /// Stop after this long, cancelling requests in flight, e.g. 10s [default: 10s without --requests]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    duration: Option<std::time::Duration>,
    /// Workload preset, repeatable for a mix: summaries, generation, reasoning, chat [default: chat]
    #[arg(long, value_name = "NAME", value_parser = tokenclock::tools::load::PRESETS)]
    workload: Vec<String>,
    /// Sent as x-sim-schedule on every request, e.g. "ttft_ms=450,gap_ms=25,tokens=120"
    #[arg(long, value_name = "SCHEDULE")]
    schedule: Option<String>,
    /// Ask for whole (non-streamed) answers, which come at once when generated: the client sees no events and no TTFT
    #[arg(long)]
    no_stream: bool,
    /// Speak HTTP/2 with prior knowledge (h2c) instead of HTTP/1.1: every request a stream, on one connection per 100 of --concurrency (servers cap the streams of a connection: nginx at 128, hyper at 200)
    #[arg(long)]
    http2: bool,
    /// Request path, repeatable: every workload is sent to each path in equal shares, e.g. /v1/messages for a mix of API families against the simulator; a speech-to-text path (/v1/audio/transcriptions, /v1/audio/translations) gets a multipart form with an audio file of 640 bytes a prompt token; an embeddings path (/v1/embeddings, /embeddings) gets the prompt as its one input [default: /v1/chat/completions]
    #[arg(long, value_name = "PATH")]
    path: Vec<String>,
    /// Sent as x-sim-fault, repeatable: every workload is also sent with each fault, in equal shares with unfaulted requests, e.g. "abort=3,rate=0.5"
    #[arg(long, value_name = "SPEC")]
    fault: Vec<String>,
    /// Longest a request may take before it counts as a `timeout` error
    #[arg(long, value_name = "DURATION", default_value = "300s", value_parser = humantime::parse_duration)]
    request_timeout: Duration,
    /// Seed for arrivals and the workload mix
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Runtime worker threads of the load generator
    #[arg(long, value_name = "N", default_value_t = 1)]
    worker_threads: usize,
    /// Summary format on stdout: text or json
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json"])]
    format: String,
}

/// Runs the load and prints the summary; exit code 2 for bad flags.
pub(crate) fn run(flags: LoadFlags) -> ExitCode {
    let config = match config(&flags) {
        Ok(config) => config,
        Err(message) => return fail(2, &format!("load: {message}")),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(flags.worker_threads.max(1))
        .enable_all()
        .build();
    let summary = match runtime {
        Ok(rt) => rt.block_on(load::run(config, |s| eprintln!("tokenclock load: {s}"))),
        Err(e) => return fail(1, &format!("load: runtime: {e}")),
    };
    match summary {
        Ok(summary) => print(&summary, &flags.format),
        Err(e) => fail(2, &format!("load: {e}")),
    }
}

fn config(flags: &LoadFlags) -> Result<LoadConfig, String> {
    let target = flags
        .target
        .parse()
        .map_err(|e| format!("invalid --target `{}`: {e}", flags.target))?;
    let mut config = LoadConfig::new(target);
    let names = match flags.workload.as_slice() {
        [] => &["chat".to_owned()][..],
        names => names,
    };
    config.workloads = names.iter().filter_map(|n| Workload::preset(n)).collect();
    for w in &mut config.workloads {
        w.schedule.clone_from(&flags.schedule);
        w.stream = !flags.no_stream;
    }
    config.workloads = mix(config.workloads, &flags.path, &flags.fault);
    config.concurrency = flags.concurrency;
    config.http2 = flags.http2;
    config.rate = flags.rate;
    config.requests = flags.requests;
    config.duration = flags
        .duration
        .or_else(|| flags.requests.is_none().then_some(DEFAULT_DURATION));
    config.seed = flags.seed;
    config.request_timeout = flags.request_timeout;
    Ok(config)
}

/// Every workload once per path (none: its own) and once per fault plus
/// once without, named after what it varies, e.g. `chat /api/chat abort=3`.
fn mix(workloads: Vec<Workload>, paths: &[String], faults: &[String]) -> Vec<Workload> {
    let faults: Vec<Option<&String>> = std::iter::once(None)
        .chain(faults.iter().map(Some))
        .collect();
    let mut out = Vec::new();
    for w in workloads {
        let paths: Vec<&String> = match paths {
            [] => vec![&w.path],
            paths => paths.iter().collect(),
        };
        for path in paths {
            for fault in &faults {
                let mut name = w.name.clone();
                if path != &w.path {
                    name = format!("{name} {path}");
                }
                if let Some(fault) = fault {
                    name = format!("{name} {fault}");
                }
                out.push(Workload {
                    name,
                    path: path.clone(),
                    fault: fault.cloned(),
                    ..w.clone()
                });
            }
        }
    }
    out
}

fn print(summary: &RunSummary, format: &str) -> ExitCode {
    if format != "json" {
        return super::emit(&summary.to_string(), ExitCode::SUCCESS);
    }
    match serde_json::to_string_pretty(summary) {
        Ok(json) => super::emit(&format!("{json}\n"), ExitCode::SUCCESS),
        Err(e) => fail(1, &format!("load: {e}")),
    }
}
