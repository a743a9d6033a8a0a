//! The latency model: a FIFO queue in front of a batch of `max_batch`
//! decoding sequences, prefill proportional to the prompt, and decode steps
//! that slow down as the batch grows. Or, per request, an exact schedule.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{
    sync::{OwnedSemaphorePermit, Semaphore},
    time::{sleep_until, Instant},
};

use super::{metrics::SimMetrics, schedule::Schedule, SimConfig};

/// The shared serving state: batch slots and who is running.
pub(crate) struct Engine {
    /// The validated configuration.
    pub config: SimConfig,
    /// The simulator's metrics.
    pub metrics: SimMetrics,
    /// Batch slots; Tokio's semaphore is FIFO-fair, so this is the queue.
    slots: Arc<Semaphore>,
    running: AtomicUsize,
}

/// A request's place in the batch; leaving frees the slot.
pub(crate) struct Admission {
    _permit: OwnedSemaphorePermit,
    engine: Arc<Engine>,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.engine.running.fetch_sub(1, Ordering::Relaxed);
        self.engine.metrics.running.dec();
    }
}

/// Counts a request as waiting until it is admitted or gives up.
struct Waiting<'a>(&'a SimMetrics);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiting.dec();
    }
}

impl Engine {
    /// An engine with `config.max_batch` free slots.
    pub(crate) fn new(config: SimConfig, metrics: SimMetrics) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(config.max_batch)),
            running: AtomicUsize::new(0),
            config,
            metrics,
        }
    }

    /// Waits in the FIFO queue for a batch slot; `None` if the engine closed.
    pub(crate) async fn admit(self: &Arc<Self>, arrival: Instant) -> Option<Admission> {
        self.metrics.waiting.inc();
        let waiting = Waiting(&self.metrics);
        let permit = self.slots.clone().acquire_owned().await.ok()?;
        drop(waiting);
        self.running.fetch_add(1, Ordering::Relaxed);
        self.metrics.running.inc();
        self.metrics.queue.observe(arrival.elapsed().as_secs_f64());
        Some(Admission {
            _permit: permit,
            engine: self.clone(),
        })
    }

    /// Prefill time of `input` prompt tokens.
    pub(crate) fn prefill(&self, input: u64) -> Duration {
        Duration::from_secs_f64(input as f64 / self.config.prefill_tokens_per_s)
    }

    /// One decode step with the batch as it is now.
    pub(crate) fn decode_step(&self) -> Duration {
        let others = self.running.load(Ordering::Relaxed).saturating_sub(1);
        let ms = self.config.decode_ms_per_token + self.config.batch_penalty_ms * others as f64;
        Duration::from_secs_f64(ms / 1000.0)
    }
}

/// When each step of one response happens.
pub(crate) enum Pacer {
    /// The queue model: admission, prefill, then one decode step per event.
    Model {
        /// The shared engine.
        engine: Arc<Engine>,
        /// Held while decoding.
        admission: Option<Admission>,
        /// Deadline of the previous step.
        next: Instant,
    },
    /// An exact schedule from `x-sim-schedule`, bypassing the queue.
    Schedule {
        /// The schedule.
        schedule: Schedule,
        /// Arrival, plus any injected stall.
        base: Instant,
    },
}

/// What the pacer measured while getting to the first step.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Start {
    /// Arrival → admission.
    pub queue: Duration,
    /// Prefill time.
    pub prefill: Duration,
}

impl Pacer {
    /// Waits in the queue and through prefill (model), or does nothing.
    pub(crate) async fn start(&mut self, arrival: Instant, input: u64) -> Option<Start> {
        let Self::Model {
            engine,
            admission,
            next,
        } = self
        else {
            return Some(Start::default());
        };
        *admission = Some(engine.admit(arrival).await?);
        let admitted = Instant::now();
        let prefill = engine.prefill(input);
        *next = admitted + prefill;
        Some(Start {
            queue: admitted - arrival,
            prefill,
        })
    }

    /// Waits until step `i` (0-based) is due: absolute deadlines, so timer
    /// lateness does not accumulate.
    pub(crate) async fn wait(&mut self, i: u64) {
        match self {
            Self::Model { engine, next, .. } => {
                *next += engine.decode_step();
                sleep_until(*next).await;
            }
            Self::Schedule { schedule, base } => {
                if !schedule.gap.is_zero() || i == 0 {
                    sleep_until(*base + schedule.offset(i)).await;
                } else if schedule.yield_each {
                    // The connection takes the event sent last and, finding
                    // no other, writes it before this task sends the next.
                    tokio::task::yield_now().await;
                }
            }
        }
    }

    /// Waits until the prefill is done (model), or until the schedule's
    /// first instant: when an answer that generates nothing (embeddings)
    /// is ready, where a first token would be one decode step later.
    pub(crate) async fn prefilled(&self) {
        match self {
            Self::Model { next, .. } => sleep_until(*next).await,
            Self::Schedule { schedule, base } => sleep_until(*base + schedule.offset(0)).await,
        }
    }

    /// Moves every later deadline back by `stall` (the stall fault).
    pub(crate) fn shift(&mut self, stall: Duration) {
        match self {
            Self::Model { next, .. } => *next += stall,
            Self::Schedule { base, .. } => *base += stall,
        }
    }
}
