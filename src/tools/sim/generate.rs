//! One response from arrival to last event: plan the steps, pace them with
//! the engine (or the schedule), and hand them to the wire encoder.

use std::{future::Future, sync::Arc};

use tokio::time::Instant;

use super::{
    body::{Emitter, Event},
    engine::{Engine, Pacer},
    fault::Fault,
    request::SimRequest,
    schedule::Schedule,
    text,
    wire::{self, Encoder, Kind, Step, Text, Totals, Whole},
    SimConfig,
};
use crate::tools::rng::Rng;

/// Everything about one request the generator needs.
pub(crate) struct Job {
    /// The parsed request.
    pub request: SimRequest,
    /// Faults to inject.
    pub fault: Fault,
    /// An exact schedule, bypassing the queue model.
    pub schedule: Option<Schedule>,
    /// The token text source.
    pub rng: Rng,
    /// When the request head arrived.
    pub arrival: Instant,
    /// A unique number for response ids.
    pub id: u64,
}

/// The steps of a response: kind and tokens per event, reasoning first.
fn plan(job: &Job, config: &SimConfig, reasoning_ok: bool) -> Vec<(Kind, u64)> {
    if job.request.format.generates_nothing() {
        // Nothing is generated: the answer follows the prefill
        // (`Generation::prefill_only`).
        return Vec::new();
    }
    if let Some(schedule) = job.schedule {
        return scheduled(&schedule, reasoning_ok);
    }
    let total = job
        .request
        .max_tokens
        .unwrap_or_else(|| drawn_length(job.rng.clone(), config.output_tokens))
        .max(1);
    let share = match config.reasoning_share {
        share if share > 0.0 => share,
        _ if job.request.reasoning_model() || job.request.think_in_prompt => 0.5,
        _ => 0.0,
    };
    let reasoning = if reasoning_ok {
        ((total as f64 * share).round() as u64).min(total)
    } else {
        0
    };
    let per = config.stream_interval as u64;
    let chunks = |kind, mut left: u64| {
        std::iter::from_fn(move || {
            let n = left.min(per);
            left -= n;
            (n > 0).then_some((kind, n))
        })
    };
    chunks(Kind::Reasoning, reasoning)
        .chain(chunks(Kind::Output, total - reasoning))
        .collect()
}

/// An output length when the request sets none: exponentially distributed
/// with mean `mean` (most answers short, a few long, as real traffic),
/// capped at 8× the mean; drawn from the request's own seeded generator,
/// so the same seed and request give the same length.
fn drawn_length(mut rng: Rng, mean: u64) -> u64 {
    let length = rng.exponential(mean as f64).round() as u64;
    length.clamp(1, mean.saturating_mul(8).max(1))
}

/// The steps of a scheduled response: `per_event` tokens each (the last
/// may have fewer), reasoning while the schedule says so.
fn scheduled(s: &Schedule, reasoning_ok: bool) -> Vec<(Kind, u64)> {
    let kind = |i| match reasoning_ok && s.is_reasoning(i) {
        true => Kind::Reasoning,
        false => Kind::Output,
    };
    (0..s.events())
        .map(|i| (kind(i), s.per_event.min(s.tokens - i * s.per_event)))
        .collect()
}

/// Generates one response. Streaming (`out` given): events go to the body
/// and `None` is returned; otherwise the whole body is returned. `None`
/// also when the client went away.
pub(crate) async fn run(job: Job, engine: Arc<Engine>, out: Option<Emitter>) -> Option<Whole> {
    let encoder = wire::encoder(&job.request, job.id);
    let reasoning_ok = encoder.supports_reasoning() || encoder.inline_reasoning();
    let steps = plan(&job, &engine.config, reasoning_ok);
    let pacer = match job.schedule {
        Some(schedule) => Pacer::Schedule {
            schedule,
            base: job.arrival,
        },
        None => Pacer::Model {
            engine: engine.clone(),
            admission: None,
            next: job.arrival,
        },
    };
    let mut generation = Generation {
        totals: Totals {
            input: job.request.input_tokens,
            ..Totals::default()
        },
        job,
        engine,
        encoder,
        pacer,
        out,
        text: Text::default(),
    };
    generation.start().await?;
    let first = match steps.is_empty() {
        true => generation.prefill_only().await?,
        false => generation.steps(&steps).await?,
    };
    generation.totals.decode = first.elapsed();
    generation.finish().await
}

/// One response being generated.
struct Generation {
    job: Job,
    engine: Arc<Engine>,
    encoder: Box<dyn Encoder>,
    pacer: Pacer,
    out: Option<Emitter>,
    totals: Totals,
    text: Text,
}

impl Generation {
    /// Waits for `future` unless the client leaves first.
    async fn unless_gone<T>(out: &Option<Emitter>, future: impl Future<Output = T>) -> Option<T> {
        match out {
            Some(out) => tokio::select! {
                value = future => Some(value),
                () = out.closed() => None,
            },
            None => Some(future.await),
        }
    }

    /// Queue and prefill.
    async fn start(&mut self) -> Option<()> {
        let (arrival, input) = (self.job.arrival, self.job.request.input_tokens);
        let start = Self::unless_gone(&self.out, self.pacer.start(arrival, input)).await??;
        self.totals.queue = start.queue;
        self.totals.prefill = start.prefill;
        Some(())
    }

    /// Every step, paced; returns when the first token went out.
    async fn steps(&mut self, steps: &[(Kind, u64)]) -> Option<Instant> {
        let mut first = None;
        let malformed_at = self.job.fault.malformed.then_some(steps.len() / 2);
        // A chat's template that opened `<think>` (a DeepSeek-R1 served
        // without a reasoning parser) puts the reasoning in the answer too.
        let opened = self.job.request.think_in_prompt;
        let inline = self.encoder.inline_reasoning() || opened;
        let last_reasoning = steps.iter().rposition(|s| s.0 == Kind::Reasoning);
        for (i, &(kind, n)) in steps.iter().enumerate() {
            Self::unless_gone(&self.out, self.pacer.wait(i as u64)).await?;
            let mut words: Vec<&'static str> =
                (0..n).map(|_| text::word(&mut self.job.rng)).collect();
            let kind = match kind {
                Kind::Reasoning if inline => {
                    tag(&mut words, i == 0 && !opened, Some(i) == last_reasoning);
                    Kind::Output
                }
                kind => kind,
            };
            let step = Step {
                kind,
                words: &words,
                last: i + 1 == steps.len(),
            };
            self.emit(&step, i == 0, malformed_at == Some(i)).await?;
            self.engine.metrics.tokens.inc_by(n);
            if first.is_none() {
                first = Some(Instant::now());
                let ttft = self.job.arrival.elapsed().as_secs_f64();
                self.engine.metrics.ttft.observe(ttft);
                if let Some(stall) = self.job.fault.stall {
                    Self::unless_gone(&self.out, tokio::time::sleep(stall)).await?;
                    self.pacer.shift(stall);
                }
            }
        }
        first
    }

    /// An answer that generates nothing (embeddings): ready once the
    /// prefill is done (or at the schedule's first instant), then delayed
    /// by a `stall` fault as a first token would be; returns when.
    async fn prefill_only(&mut self) -> Option<Instant> {
        Self::unless_gone(&self.out, self.pacer.prefilled()).await?;
        if let Some(stall) = self.job.fault.stall {
            Self::unless_gone(&self.out, tokio::time::sleep(stall)).await?;
        }
        Some(Instant::now())
    }

    /// Counts one step and streams its events (or keeps its text).
    async fn emit(&mut self, step: &Step<'_>, first: bool, malformed: bool) -> Option<()> {
        let mut events = match (&self.out, first) {
            (Some(_), true) => self.encoder.prologue(&self.totals),
            _ => Vec::new(),
        };
        add(&mut self.totals, &mut self.text, step, self.out.is_none());
        let Some(out) = &mut self.out else {
            return Some(());
        };
        if malformed {
            events.push(Event::Malformed);
        }
        events.extend(self.encoder.step(step, &self.totals));
        out.send_all(events).await.ok()
    }

    /// The closing events, or the whole body; the batch slot is freed first.
    async fn finish(self) -> Option<Whole> {
        let Self {
            pacer,
            mut encoder,
            out,
            totals,
            text,
            ..
        } = self;
        drop(pacer);
        match out {
            Some(mut out) => {
                let _ = out.send_all(encoder.epilogue(&totals)).await;
                None
            }
            None => Some(Whole {
                body: encoder.body(&text, &totals),
                headers: encoder.head(&totals),
            }),
        }
    }
}

/// Writes a reasoning step's tags into its words, as a raw-text API sends
/// a reasoning model's: `<think>` its first token (`first`: the first
/// reasoning step), `</think>` the last one's last (`last`). Each tag takes
/// a token's place, as each is one token of Qwen3's vocabulary.
fn tag(words: &mut [&'static str], first: bool, last: bool) {
    let n = words.len();
    match (first, last) {
        (true, true) if n == 1 => words[0] = "<think></think>",
        (first, last) => {
            if first && n > 0 {
                words[0] = "<think>";
            }
            if last && n > 0 {
                words[n - 1] = "</think>";
            }
        }
    }
}

/// Counts a step's tokens, and keeps its text for a whole body.
fn add(totals: &mut Totals, text: &mut Text, step: &Step<'_>, keep: bool) {
    let n = step.words.len() as u64;
    let (count, buffer) = match step.kind {
        Kind::Reasoning => (&mut totals.reasoning, &mut text.reasoning),
        Kind::Output => (&mut totals.output, &mut text.output),
    };
    *count += n;
    if keep {
        buffer.push_str(&step.text());
    }
}

#[cfg(test)]
mod length_tests {
    use super::drawn_length;
    use crate::tools::rng::Rng;

    #[test]
    fn drawn_lengths_average_the_mean_and_repeat_for_the_same_request() {
        let draws: Vec<u64> = (0..4000u64)
            .map(|i| drawn_length(Rng::keyed(1, &i.to_le_bytes()), 128))
            .collect();
        let mean = draws.iter().sum::<u64>() as f64 / draws.len() as f64;
        assert!((115.0..141.0).contains(&mean), "mean {mean}");
        assert!(draws.iter().all(|&n| (1..=1024).contains(&n)));
        assert!(
            draws.iter().filter(|&&n| n < 128).count() > draws.len() / 2,
            "mostly short"
        );
        let again = drawn_length(Rng::keyed(1, &7u64.to_le_bytes()), 128);
        assert_eq!(again, draws[7]);
    }
}
