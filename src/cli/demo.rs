//! `tokenclock demo`: the simulator, the proxy and a mixed load, with a live view.

use std::{net::SocketAddr, process::ExitCode, time::Duration};

use clap::Args;
use tokenclock::tools::demo::{self, DemoArgs};

use crate::fail;

/// Flags of `tokenclock demo`.
#[derive(Args)]
pub(crate) struct DemoFlags {
    /// Stop after this long, e.g. 60s [default: run until Ctrl-C]
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Address of the demo's proxy
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Address of the proxy's /metrics during the demo
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9464")]
    metrics_listen: SocketAddr,
}

/// Runs the demo; the summary is printed at the end.
pub(crate) fn run(flags: DemoFlags) -> ExitCode {
    let args = DemoArgs {
        duration: flags.duration,
        listen: flags.listen,
        metrics_listen: flags.metrics_listen,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(1, &format!("demo: cannot start the runtime: {e}")),
    };
    match runtime.block_on(demo::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_config() => fail(2, &format!("demo: {e}")),
        Err(e) => fail(1, &format!("demo: {e}")),
    }
}
