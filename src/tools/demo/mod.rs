//! `tokenclock demo`: the simulator, the proxy in front of it and the load
//! generator driving a mixed workload, on real sockets, with a live view
//! every second and the `report` summary at the end.
//!
//! The workload: summaries (long input, short output), long-form generation
//! (short input, long output) and a reasoning model, steady; then a burst
//! that fills the simulator's batch so requests queue: TTFT rises while the
//! decode cadence (TPOT, ITL) stays flat.

mod view;

use std::{
    io::{IsTerminal, Write},
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use http::Uri;
use tokio::time::Instant;

pub use self::view::LiveView;
use crate::{
    config::{self, ConfigError},
    measure::timeline::TimelineSink,
    tools::load::{self, LoadConfig, Workload},
    tools::sim::{self, SimConfig},
    Bound, StartError,
};

/// What `tokenclock demo` was asked for.
#[derive(Clone, Debug)]
pub struct DemoArgs {
    /// Stop after this long; `None`: at Ctrl-C.
    pub duration: Option<Duration>,
    /// The proxy's listener.
    pub listen: SocketAddr,
    /// The proxy's metrics listener (`/metrics` during the demo).
    pub metrics_listen: SocketAddr,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The demo's own proxy config was refused (a bug) or a flag was bad.
    #[error("config error: {0}")]
    Config(#[from] ConfigError),
    /// A listener could not be bound.
    #[error("{0}")]
    Start(#[from] StartError),
    /// The simulator could not start.
    #[error("cannot start the simulator: {0}")]
    Sim(std::io::Error),
    /// A socket could not report its address.
    #[error("{0}")]
    Io(std::io::Error),
    /// The load generator refused its config (a bug).
    #[error("load: {0}")]
    Load(#[from] load::LoadError),
}

impl DemoError {
    /// Whether the fault is the user's configuration (exit code 2).
    pub fn is_config(&self) -> bool {
        match self {
            Self::Config(_) => true,
            Self::Start(e) => e.is_config(),
            Self::Sim(_) | Self::Io(_) | Self::Load(_) => false,
        }
    }
}

/// The SLO the demo judges goodput against.
const DEMO_SLO: &str = "[[slo]]\nname = \"interactive\"\nttft = \"2s\"\ntpot = \"60ms\"\n";

/// Runs the demo until `duration` or Ctrl-C, printing as it goes.
pub async fn run(args: DemoArgs) -> Result<(), DemoError> {
    let sim = sim::bind(SocketAddr::from(([127, 0, 0, 1], 0)), demo_sim())
        .await
        .map_err(DemoError::Sim)?;
    let sim_addr = sim.local_addr().map_err(DemoError::Sim)?;
    let config = proxy_config(&args, sim_addr)?;
    let live = Arc::new(LiveView::new(config.export.slos.clone()));
    let bound = Bound::bind(config)
        .await?
        .with_sink(live.clone() as Arc<dyn TimelineSink>);
    let (proxy_addr, metrics_addr) = (bound.proxy_addr(), bound.metrics_addr());
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let mut stopped = stop_rx.clone();
    let proxy = tokio::spawn(bound.run(async move {
        let _ = stopped.wait_for(|s| *s).await;
    }));
    let mut stopped = stop_rx.clone();
    let sim = tokio::spawn(sim.run(async move {
        let _ = stopped.wait_for(|s| *s).await;
    }));
    let proxy_addr = proxy_addr.map_err(DemoError::Io)?;
    // A closed stdout (`demo | head -1`) must not panic the demo: what it
    // shows is lost, the run goes on to its end.
    let _ = writeln!(
        std::io::stdout(),
        "tokenclock demo: simulator http://{sim_addr}  proxy http://{proxy_addr}  metrics http://{}/metrics",
        metrics_addr.map_or_else(|e| e.to_string(), |a| a.to_string())
    );
    drive(&args, proxy_addr, &live).await?;
    let _ = stop_tx.send(true);
    let _ = proxy.await;
    let _ = sim.await;
    let _ = write!(std::io::stdout(), "\n{}", live.summary());
    Ok(())
}

/// The load, the live view, and the stop: at `duration` or Ctrl-C.
async fn drive(args: &DemoArgs, proxy: SocketAddr, live: &LiveView) -> Result<(), DemoError> {
    let target: Uri = format!("http://{proxy}")
        .parse()
        .map_err(|_| load::LoadError::Target(proxy.to_string()))?;
    let duration = args.duration.unwrap_or(Duration::from_secs(24 * 3600));
    let in_flight = Arc::new(AtomicU64::new(0));
    let steady = spawn_load(target.clone(), 4, duration, in_flight.clone())?;
    let _ = steady.send(());
    let burst_at = duration.mul_f64(0.5);
    let burst = spawn_load(
        target,
        12,
        duration.saturating_sub(burst_at),
        in_flight.clone(),
    )?;
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let (mut burst, mut burst_started) = (Some(burst), false);
    let ctrl_c = crate::termination();
    tokio::pin!(ctrl_c);
    let terminal = std::io::stdout().is_terminal();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = &mut ctrl_c => break,
        }
        let elapsed = start.elapsed();
        if elapsed >= duration {
            break;
        }
        if !burst_started && elapsed >= burst_at {
            if let Some(burst) = burst.take() {
                let _ = burst.send(());
            }
            burst_started = true;
        }
        show(
            &live.render(elapsed.as_secs_f64(), in_flight.load(Ordering::Relaxed)),
            terminal,
        );
    }
    Ok(())
}

/// A closed-loop load of `concurrency` workers over the mixed workload,
/// started when the returned sender fires (never, if it is dropped).
fn spawn_load(
    target: Uri,
    concurrency: usize,
    duration: Duration,
    in_flight: Arc<AtomicU64>,
) -> Result<tokio::sync::oneshot::Sender<()>, DemoError> {
    let mut config = LoadConfig::new(target);
    config.concurrency = concurrency;
    config.duration = Some(duration);
    config.workloads = workloads();
    config.validate()?;
    let (go, ready) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        if ready.await.is_err() {
            return;
        }
        let mut last = 0;
        let _ = load::run(config, |snapshot| {
            let now = snapshot.in_flight;
            in_flight.fetch_add(now, Ordering::Relaxed);
            in_flight.fetch_sub(last, Ordering::Relaxed);
            last = now;
        })
        .await;
    });
    Ok(go)
}

/// The mixed workload, one model name per workload so the view and the
/// summary show them apart; lengths sized so requests finish in seconds.
fn workloads() -> Vec<Workload> {
    let sized = |mut w: Workload, model: &str, max_tokens: u32| {
        w.model = model.to_owned();
        w.max_tokens = max_tokens;
        w
    };
    vec![
        sized(Workload::summaries(), "sim-summaries", 48),
        sized(Workload::generation(), "sim-generation", 192),
        sized(Workload::reasoning(), "sim-reasoner", 128),
    ]
}

/// The simulator as the demo runs it: a small batch, so the burst queues,
/// and a decode step of 10 ms.
fn demo_sim() -> SimConfig {
    SimConfig {
        max_batch: 6,
        decode_ms_per_token: 10.0,
        ..SimConfig::default()
    }
}

fn proxy_config(args: &DemoArgs, upstream: SocketAddr) -> Result<config::Config, ConfigError> {
    let text = format!(
        "listen = \"{}\"\nmetrics_listen = \"{}\"\nupstream = \"http://{upstream}\"\nusage_mode = \"inject\"\nshutdown_grace = \"2s\"\nlog_filter = \"warn\"\n{DEMO_SLO}",
        args.listen, args.metrics_listen
    );
    config::File::parse(&text, "demo").and_then(config::File::validate)
}

fn show(screen: &str, terminal: bool) {
    let mut out = std::io::stdout().lock();
    if terminal {
        let _ = write!(out, "\x1b[2J\x1b[H");
    }
    let _ = write!(out, "{screen}");
    let _ = out.flush();
}
