//! The `tokenclock` command: parses the command line and calls the library.

use std::{io::Write, path::PathBuf, process::ExitCode};

use clap::{
    parser::ValueSource, ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand,
};
use tokenclock::{
    config::{self, Origin, Override, Overrides},
    proxy::reload::Source,
};

mod cli;

/// jemalloc, not the system's malloc: a held stream's socket buffers (8 KiB
/// each, hyper's on the client's side) are mostly unwritten, and jemalloc
/// keeps its metadata out of the blocks it hands out and its 8 KiB blocks
/// page-aligned, so their unwritten pages are never backed; glibc keeps a
/// header in the 16 bytes before each block, so a block's first and last
/// pages share pages that its neighbours' headers touch. Measured
/// (tests/perf/RESULTS.md, "Memory per held stream"): less RSS per held stream, and
/// CPU per event within the benchmark's noise. `.cargo/config.toml` builds
/// it to return freed pages from a thread of its own ("Freed pages handed
/// back").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A transparent timing proxy for LLM model servers.
#[derive(Parser)]
#[command(name = "tokenclock", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy in front of a model server.
    Serve(Settings),
    /// Validate a config file and print the effective settings.
    CheckConfig {
        /// The TOML config file to check.
        file: PathBuf,
        #[command(flatten)]
        settings: Settings,
    },
    /// Summarize record files (JSONL from `[records]`) like AIPerf's console.
    Report(ReportFlags),
    /// Send chat-completion traffic and measure it from the client's side.
    Load(cli::load::LoadFlags),
    /// Run a simulated model server (queueing, batching, faults; not a model).
    Sim(cli::sim::SimFlags),
    /// Simulator, proxy and load together, with a live view: see tokenclock work.
    Demo(cli::demo::DemoFlags),
}

#[derive(Args)]
struct ReportFlags {
    /// Record files to read (rotated ones too, e.g. records.jsonl.1)
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Judge goodput against objectives, e.g. "ttft:500ms tpot:50ms" (repeatable; plain numbers are ms)
    #[arg(long, value_name = "OBJECTIVES", conflicts_with_all = ["request_id", "trace_id", "missed"])]
    slo: Vec<String>,
    /// Group by model or endpoint [default: one group, all]
    #[arg(long, value_name = "KEY", value_parser = ["model", "endpoint"], conflicts_with_all = ["request_id", "trace_id", "missed"])]
    by: Option<String>,
    /// Output format: text, json or csv (json with --request-id/--trace-id: the matching records)
    #[arg(long, value_name = "FORMAT", default_value = "text", value_parser = ["text", "json", "csv"])]
    format: String,
    /// Print the whole timeline of the request(s) with this request id instead (exit 1 if none)
    #[arg(long, value_name = "ID", conflicts_with = "trace_id")]
    request_id: Option<String>,
    /// Print the whole timeline of the request(s) of this W3C trace id instead (exit 1 if none)
    #[arg(long, value_name = "ID", conflicts_with = "missed")]
    trace_id: Option<String>,
    /// List the requests that missed these objectives instead, worst first, with their ids, e.g. "ttft:2s" (exit 1 if none)
    #[arg(long, value_name = "OBJECTIVES", conflicts_with = "request_id")]
    missed: Option<String>,
}

#[derive(Args)]
struct Settings {
    /// Address clients connect to [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR", env = "TOKENCLOCK_LISTEN")]
    listen: Option<String>,
    /// Model server URL, e.g. http://127.0.0.1:8000 (required unless in the config file)
    #[arg(long, value_name = "URL", env = "TOKENCLOCK_UPSTREAM")]
    upstream: Option<String>,
    /// Address of /metrics, /healthz and /readyz [default: 127.0.0.1:9464]
    #[arg(long, value_name = "ADDR", env = "TOKENCLOCK_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// TOML config file (see config/tokenclock.toml)
    #[arg(long, value_name = "FILE", env = "TOKENCLOCK_CONFIG")]
    config: Option<PathBuf>,
    /// Log line format: text or json [default: text]
    #[arg(long, value_name = "FORMAT", env = "TOKENCLOCK_LOG_FORMAT")]
    log_format: Option<String>,
    /// Runtime worker threads; 0 = one per core [default: 0]
    #[arg(long, value_name = "N", env = "TOKENCLOCK_WORKER_THREADS")]
    worker_threads: Option<String>,
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Serve(settings) => {
            let matches = subcommand(&matches, "serve");
            let path = settings.config.clone();
            let overrides = overrides(&settings, matches);
            match config::load(path.as_deref(), &overrides) {
                Ok((running, config)) => serve(
                    config,
                    Source {
                        path,
                        overrides,
                        running,
                    },
                ),
                Err(e) => fail(2, &format!("config error: {e}")),
            }
        }
        Command::CheckConfig { file, settings } => {
            let matches = subcommand(&matches, "check-config");
            match load(Some(&file), &settings, matches) {
                Ok((effective, _)) => cli::emit(&effective.to_toml(), ExitCode::SUCCESS),
                Err(code) => code,
            }
        }
        Command::Report(flags) => report(flags),
        Command::Load(flags) => cli::load::run(flags),
        Command::Sim(flags) => cli::sim::run(flags),
        Command::Demo(flags) => cli::demo::run(flags),
    }
}

fn report(flags: ReportFlags) -> ExitCode {
    use tokenclock::tools::report::{self, ReportError, Select};
    let select = match (flags.request_id, flags.trace_id, flags.missed) {
        (Some(id), _, _) => Some(Select::RequestId(id)),
        (None, Some(id), _) => Some(Select::TraceId(id)),
        (None, None, Some(objectives)) => match report::SloSpec::parse(&objectives) {
            Ok(spec) => Some(Select::Missed(spec)),
            Err(e) => return fail(2, &format!("report: --missed: {e}")),
        },
        (None, None, None) => None,
    };
    let args = report::ReportArgs {
        files: flags.files,
        slos: flags.slo,
        by: flags.by.as_deref().and_then(|b| b.parse().ok()),
        format: flags.format.parse().unwrap_or_default(),
        select,
    };
    match report::run(&args) {
        Ok(output) => {
            for warning in &output.warnings {
                let _ = writeln!(std::io::stderr(), "tokenclock: report: {warning}");
            }
            cli::emit(&output.stdout, ExitCode::SUCCESS)
        }
        Err(e @ ReportError::NoMatch { .. }) => fail(1, &format!("report: {e}")),
        Err(e) => fail(2, &format!("report: {e}")),
    }
}

fn serve(config: tokenclock::Config, source: Source) -> ExitCode {
    let logs = match tokenclock::export::logging::init(config.log_format, &config.log_filter) {
        Ok(logs) => logs,
        Err(e) => return fail(1, &format!("cannot start the log writer: {e}")),
    };
    let result = tokenclock::run(config, source);
    // Queued log lines first (bounded wait), then the last word.
    drop(logs);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_config() => fail(2, &format!("config error: {e}")),
        Err(e) => fail(1, &e.to_string()),
    }
}

fn load(
    file: Option<&std::path::Path>,
    settings: &Settings,
    matches: &ArgMatches,
) -> Result<(config::File, tokenclock::Config), ExitCode> {
    config::load(file, &overrides(settings, matches))
        .map_err(|e| fail(2, &format!("config error: {e}")))
}

fn overrides(settings: &Settings, matches: &ArgMatches) -> Overrides {
    let pick = |id: &str, flag: &'static str, env: &'static str, value: &Option<String>| {
        let origin = match matches.value_source(id) {
            Some(ValueSource::EnvVariable) => Origin::Env(env),
            _ => Origin::Flag(flag),
        };
        value.clone().map(|value| Override { value, origin })
    };
    Overrides {
        listen: pick("listen", "--listen", "TOKENCLOCK_LISTEN", &settings.listen),
        upstream: pick(
            "upstream",
            "--upstream",
            "TOKENCLOCK_UPSTREAM",
            &settings.upstream,
        ),
        metrics_listen: pick(
            "metrics_listen",
            "--metrics-listen",
            "TOKENCLOCK_METRICS_LISTEN",
            &settings.metrics_listen,
        ),
        log_format: pick(
            "log_format",
            "--log-format",
            "TOKENCLOCK_LOG_FORMAT",
            &settings.log_format,
        ),
        worker_threads: pick(
            "worker_threads",
            "--worker-threads",
            "TOKENCLOCK_WORKER_THREADS",
            &settings.worker_threads,
        ),
    }
}

fn subcommand<'a>(matches: &'a ArgMatches, name: &str) -> &'a ArgMatches {
    matches.subcommand_matches(name).unwrap_or(matches)
}

/// Writes `tokenclock: message` to stderr and returns `code`. A failed
/// write is ignored: `eprintln!` would panic (exit 101) when stderr is a
/// closed pipe or a full disk.
pub(crate) fn fail(code: u8, message: &str) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "tokenclock: {message}");
    ExitCode::from(code)
}
