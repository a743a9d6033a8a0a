//! `tokenclock sim`: flags into a [`SimConfig`](tokenclock::tools::sim::SimConfig), then the simulator until a signal.

use std::process::ExitCode;

use clap::Args;
use tokenclock::config::LogFormat;

use crate::fail;

/// Flags of `tokenclock sim`.
#[derive(Args)]
pub(crate) struct SimFlags {
    /// Address the simulator listens on
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8000")]
    listen: std::net::SocketAddr,
    /// Requests decoded at once; the rest wait in a FIFO queue [default: 8]
    #[arg(long, value_name = "N")]
    max_batch: Option<usize>,
    /// Prompt tokens prefilled per second [default: 8000]
    #[arg(long, value_name = "F")]
    prefill_tokens_per_s: Option<f64>,
    /// Milliseconds per decode step with a batch of one [default: 20]
    #[arg(long, value_name = "F")]
    decode_ms_per_token: Option<f64>,
    /// Extra milliseconds per decode step per other running request [default: 0.5]
    #[arg(long, value_name = "F")]
    batch_penalty_ms: Option<f64>,
    /// Tokens per streamed event [default: 1]
    #[arg(long, value_name = "N")]
    stream_interval: Option<usize>,
    /// Share of every request's tokens sent as reasoning first, 0 to 1 [default: 0]
    #[arg(long, value_name = "F")]
    reasoning_share: Option<f64>,
    /// Tokens generated when the request sets no length [default: 128]
    #[arg(long, value_name = "N")]
    output_tokens: Option<u64>,
    /// Seed of the token text [default: 1]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Model name /v1/models lists [default: sim-llama]
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
    /// Fault for requests without x-sim-fault, e.g. "abort=3" or "status=500"
    #[arg(long, value_name = "SPEC")]
    fault: Option<String>,
}

/// Runs the simulator until SIGTERM or SIGINT.
pub(crate) fn run(flags: SimFlags) -> ExitCode {
    use tokenclock::tools::sim::{self, SimConfig};
    let d = SimConfig::default();
    let config = SimConfig {
        max_batch: flags.max_batch.unwrap_or(d.max_batch),
        prefill_tokens_per_s: flags.prefill_tokens_per_s.unwrap_or(d.prefill_tokens_per_s),
        decode_ms_per_token: flags.decode_ms_per_token.unwrap_or(d.decode_ms_per_token),
        batch_penalty_ms: flags.batch_penalty_ms.unwrap_or(d.batch_penalty_ms),
        stream_interval: flags.stream_interval.unwrap_or(d.stream_interval),
        reasoning_share: flags.reasoning_share.unwrap_or(d.reasoning_share),
        output_tokens: flags.output_tokens.unwrap_or(d.output_tokens),
        seed: flags.seed.unwrap_or(d.seed),
        model: flags.model.unwrap_or(d.model),
        fault: flags.fault.or(d.fault),
    };
    if let Err(e) = config.validate() {
        return fail(2, &format!("sim: {e}"));
    }
    let _logs = match tokenclock::export::logging::init(LogFormat::Text, "info") {
        Ok(logs) => logs,
        Err(e) => return fail(1, &format!("sim: cannot start the log writer: {e}")),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(1, &format!("sim: cannot start the runtime: {e}")),
    };
    runtime.block_on(async move {
        let shutdown = tokenclock::termination();
        match sim::bind(flags.listen, config).await {
            Ok(bound) => {
                bound.run(shutdown).await;
                ExitCode::SUCCESS
            }
            Err(e) => fail(2, &format!("sim: cannot listen on {}: {e}", flags.listen)),
        }
    })
}
