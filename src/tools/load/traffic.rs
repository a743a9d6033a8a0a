//! Who sends when: closed-loop workers sending back to back, or open-loop Poisson arrivals.

use std::{
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed},
        Arc, Mutex, PoisonError,
    },
    time::Duration,
};

use bytes::Bytes;
use http::{header::CONTENT_TYPE, HeaderValue, Request, Uri};
use http_body_util::Full;
use tokio::{sync::watch, task::JoinSet, time::Instant};

use super::{
    request::{self, HttpClient, Live},
    results::{ClientOutcome, Measured, Recorder},
    LoadConfig, LoadError,
};
use crate::tools::rng::Rng;

/// One workload, ready to send: its URI, body, schedule and fault headers.
struct Plan {
    uri: Uri,
    body: Bytes,
    content_type: HeaderValue,
    schedule: Option<HeaderValue>,
    fault: Option<HeaderValue>,
}

/// State shared by every task of a run.
pub(super) struct Shared {
    /// Taken in turn, one per request (`next`).
    clients: Vec<HttpClient>,
    next: AtomicUsize,
    plans: Vec<Plan>,
    weights: Vec<u32>,
    limit: Option<u64>,
    issued: AtomicU64,
    timeout: Duration,
    /// Live counters for the progress line.
    pub live: Live,
    /// Arrivals skipped because `concurrency` requests were in flight.
    pub skipped: AtomicU64,
    /// Everything measured so far.
    pub recorder: Mutex<Recorder>,
}

impl Shared {
    /// Builds the plans and the client for `config`.
    pub(super) fn new(config: &LoadConfig) -> Result<Self, LoadError> {
        let plans = config
            .workloads
            .iter()
            .map(|w| plan(&config.target, w))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            clients: request::clients(config.concurrency, config.http2),
            next: AtomicUsize::new(0),
            plans,
            weights: config.workloads.iter().map(|w| w.weight).collect(),
            limit: config.requests,
            issued: AtomicU64::new(0),
            timeout: config.request_timeout,
            live: Live::default(),
            skipped: AtomicU64::new(0),
            recorder: Mutex::new(Recorder::new(
                config.workloads.iter().map(|w| w.name.clone()),
            )),
        })
    }

    /// Takes one request from the budget; false once `requests` are issued.
    fn ticket(&self) -> bool {
        let n = self.issued.fetch_add(1, Relaxed);
        self.limit.is_none_or(|limit| n < limit)
    }

    /// Sends one request of workload `index` and records it; whether it
    /// could not connect.
    async fn one(&self, index: usize, stop: &mut watch::Receiver<bool>) -> bool {
        let measured = match self.request(index) {
            Ok(request) => {
                let live = (&self.live, self.timeout);
                let turn = self.next.fetch_add(1, Relaxed) % self.clients.len();
                request::measure(&self.clients[turn], request, index, live, stop).await
            }
            Err(_) => failed(index, "request_build"),
        };
        let unconnected =
            matches!(&measured.outcome, ClientOutcome::Error(kind) if kind == "connect");
        self.recorder
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(measured);
        unconnected
    }

    fn request(&self, index: usize) -> Result<Request<Full<Bytes>>, http::Error> {
        let plan = &self.plans[index];
        let mut builder =
            Request::post(plan.uri.clone()).header(CONTENT_TYPE, plan.content_type.clone());
        if let Some(schedule) = &plan.schedule {
            builder = builder.header("x-sim-schedule", schedule.clone());
        }
        if let Some(fault) = &plan.fault {
            builder = builder.header("x-sim-fault", fault.clone());
        }
        builder.body(Full::new(plan.body.clone()))
    }
}

fn failed(workload: usize, kind: &str) -> Measured {
    Measured::new(workload, ClientOutcome::Error(kind.to_owned()))
}

fn plan(target: &Uri, workload: &super::Workload) -> Result<Plan, LoadError> {
    let prefix = target.path().trim_end_matches('/');
    let authority = target
        .authority()
        .ok_or_else(|| LoadError::Target(target.to_string()))?;
    let uri = format!("http://{authority}{prefix}{}", workload.path)
        .parse()
        .map_err(|_| LoadError::Path(workload.path.clone()))?;
    let header = |value: &Option<String>, error: fn(String) -> LoadError| match value {
        Some(v) => HeaderValue::from_str(v)
            .map(Some)
            .map_err(|_| error(v.clone())),
        None => Ok(None),
    };
    let content_type = HeaderValue::from_str(&workload.content_type())
        .map_err(|_| LoadError::Path(workload.path.clone()))?;
    Ok(Plan {
        uri,
        body: workload.body(),
        content_type,
        schedule: header(&workload.schedule, LoadError::Schedule)?,
        fault: header(&workload.fault, LoadError::Fault)?,
    })
}

/// Starts the run's traffic: `concurrency` closed-loop workers, or one
/// open-loop dispatcher when a rate is set.
pub(super) fn spawn(
    config: &LoadConfig,
    shared: &Arc<Shared>,
    stop: &watch::Receiver<bool>,
) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    let mut seeds = Rng::new(config.seed);
    match config.rate {
        Some(rate) => {
            let (shared, stop, cap) = (shared.clone(), stop.clone(), config.concurrency);
            let rng = Rng::new(seeds.next_u64());
            tasks.spawn(arrivals(shared, (rate, cap), rng, stop));
        }
        None => {
            for _ in 0..config.concurrency {
                let rng = Rng::new(seeds.next_u64());
                tasks.spawn(worker(shared.clone(), rng, stop.clone()));
            }
        }
    }
    tasks
}

/// Closed loop: one request after another until the budget or the stop.
/// A request that could not connect is followed by a pause
/// ([`UNCONNECTED_PAUSE`]): a target that is down refuses at once, and a
/// worker that asked again at once made hundreds of thousands of connects
/// a second, on a machine the target may share.
async fn worker(shared: Arc<Shared>, mut rng: Rng, mut stop: watch::Receiver<bool>) {
    while !*stop.borrow() && shared.ticket() {
        let index = rng.weighted(&shared.weights);
        if shared.one(index, &mut stop).await {
            tokio::select! {
                () = request::stopped(&mut stop) => break,
                () = tokio::time::sleep(UNCONNECTED_PAUSE) => {}
            }
        }
    }
}

/// How long a closed-loop worker waits after a request that could not
/// connect.
const UNCONNECTED_PAUSE: Duration = Duration::from_millis(100);

/// Open loop: Poisson arrivals at `rate` per second, each on its own task,
/// skipped (and counted) when `cap` requests are already in flight.
async fn arrivals(
    shared: Arc<Shared>,
    (rate, cap): (f64, usize),
    mut rng: Rng,
    mut stop: watch::Receiver<bool>,
) {
    let mut requests = JoinSet::new();
    let mut next = Instant::now();
    loop {
        next += Duration::from_secs_f64(rng.exponential(1.0 / rate));
        tokio::select! {
            () = request::stopped(&mut stop) => break,
            () = tokio::time::sleep_until(next) => {}
        }
        while requests.try_join_next().is_some() {}
        // An arrival takes from the budget whether it is sent or skipped,
        // so sent + skipped is `requests`.
        if !shared.ticket() {
            break;
        }
        if requests.len() >= cap {
            shared.skipped.fetch_add(1, Relaxed);
            continue;
        }
        let index = rng.weighted(&shared.weights);
        let (shared, mut stop) = (shared.clone(), stop.clone());
        requests.spawn(async move { shared.one(index, &mut stop).await });
    }
    while requests.join_next().await.is_some() {}
}
