//! One response from arrival to last event: plan the steps, pace them with
//! the engine (or the schedule), and hand them to the wire encoder.

use std::sync::Arc;

use serde_json::Value;
use tokio::time::Instant;

use super::{
    body::{Emitter, Event},
    engine::{Engine, Pacer},
    fault::Fault,
    request::SimRequest,
    schedule::Schedule,
    text::Rng,
    wire::{self, Encoder, Kind, Step, Text, Totals},
    SimConfig,
};

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
    if let Some(s) = job.schedule {
        return (0..s.events())
            .map(|i| {
                let n = s.per_event.min(s.tokens - i * s.per_event);
                let reasoning = reasoning_ok && s.is_reasoning(i);
                (
                    if reasoning {
                        Kind::Reasoning
                    } else {
                        Kind::Output
                    },
                    n,
                )
            })
            .collect();
    }
    let total = job
        .request
        .max_tokens
        .unwrap_or(config.output_tokens)
        .max(1);
    let share = match config.reasoning_share {
        share if share > 0.0 => share,
        _ if job.request.reasoning_model() => 0.5,
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

/// Generates one response. Streaming (`out` given): events go to the body
/// and `None` is returned; otherwise the whole body is returned. `None`
/// also when the client went away.
pub(crate) async fn run(
    mut job: Job,
    engine: Arc<Engine>,
    mut out: Option<Emitter>,
) -> Option<Value> {
    let mut encoder = wire::encoder(&job.request, job.id);
    let steps = plan(&job, &engine.config, encoder.supports_reasoning());
    let mut pacer = match job.schedule {
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
    let start = pacer.start(job.arrival, job.request.input_tokens).await?;
    let mut totals = Totals {
        input: job.request.input_tokens,
        queue: start.queue,
        prefill: start.prefill,
        ..Totals::default()
    };
    let mut text = Text::default();
    let mut first = None;
    let malformed_at = job.fault.malformed.then_some(steps.len() / 2);
    for (i, &(kind, n)) in steps.iter().enumerate() {
        pacer.wait(i as u64).await;
        let prologue = match (&mut out, i) {
            (Some(_), 0) => encoder.prologue(&totals),
            _ => Vec::new(),
        };
        let words: Vec<&'static str> = (0..n).map(|_| job.rng.word()).collect();
        let step = Step {
            kind,
            words: &words,
            last: i + 1 == steps.len(),
        };
        add(&mut totals, &mut text, &step, out.is_none());
        if let Some(out) = &mut out {
            let mut events = prologue;
            if malformed_at == Some(i) {
                events.push(Event::Malformed);
            }
            events.extend(encoder.step(&step, &totals));
            out.send_all(events).await.ok()?;
        }
        engine.metrics.tokens.inc_by(n);
        if i == 0 {
            first = Some(Instant::now());
            engine
                .metrics
                .ttft
                .observe(job.arrival.elapsed().as_secs_f64());
            if let Some(stall) = job.fault.stall {
                tokio::time::sleep(stall).await;
                pacer.shift(stall);
            }
        }
    }
    drop(pacer);
    totals.decode = first.map(|f| f.elapsed()).unwrap_or_default();
    finish(encoder.as_mut(), out, &text, &totals).await
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

async fn finish(
    encoder: &mut dyn Encoder,
    out: Option<Emitter>,
    text: &Text,
    totals: &Totals,
) -> Option<Value> {
    match out {
        Some(mut out) => {
            let _ = out.send_all(encoder.epilogue(totals)).await;
            None
        }
        None => Some(encoder.body(text, totals)),
    }
}
