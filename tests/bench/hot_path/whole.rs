//! `whole_body`: a whole (non-streamed) JSON answer through the proxy's
//! own [`Exchange`] observer, in 16 KiB frames as a socket hands them over
//! (bytes per second): an embeddings batch of about 4 MB, read by its ends
//! (`frame::ends`: only its first and last 4 KiB are kept and read), a chat
//! answer of about 1 MB, read whole (copied up to `max_event_bytes`, then
//! parsed), and the embeddings frames polled bare, the baseline. Their
//! readings are checked by the tests (`measure::exchange::tests`), not here.
//!
//! [`Exchange`]: tokenclock::measure::exchange::Exchange

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput};
use tokenclock::measure::observe::ObservedBody;

use crate::observed::{drain, exchange, reading, Frames};

/// `body` in 16 KiB frames.
fn frames(body: String) -> Vec<Bytes> {
    let body = Bytes::from(body);
    (0..body.len())
        .step_by(16 * 1024)
        .map(|at| body.slice(at..(at + 16 * 1024).min(body.len())))
        .collect()
}

/// OpenAI's order: 96 vectors of 1,536 numbers, then `model` and `usage`.
fn embeddings() -> String {
    let vector = |i: usize| {
        (0..1536)
            .map(|d| format!("{:.9}", ((d * 7 + i * 13) as f64 * 0.37).sin() / 9.0))
            .collect::<Vec<_>>()
            .join(",")
    };
    let data: Vec<String> = (0..96)
        .map(|i| {
            format!(
                r#"{{"object":"embedding","index":{i},"embedding":[{}]}}"#,
                vector(i)
            )
        })
        .collect();
    format!(
        r#"{{"object":"list","data":[{}],"model":"text-embedding-3-large","usage":{{"prompt_tokens":4021,"total_tokens":4021}}}}"#,
        data.join(",")
    )
}

/// A chat completion whose answer is about 1 MB of words, with its usage.
fn chat() -> String {
    let words: String = (0..125_000).map(|i| format!("w{} ", i % 977)).collect();
    format!(
        r#"{{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{{"index":0,"message":{{"role":"assistant","content":"{words}"}},"finish_reason":"length"}}],"usage":{{"prompt_tokens":12,"completion_tokens":125000,"total_tokens":125012}}}}"#
    )
}

pub(crate) fn bench(c: &mut Criterion) {
    let reading = reading();
    let mut group = c.benchmark_group("whole_body");
    for (name, path, body) in [
        ("embeddings_4mb_by_its_ends", "/v1/embeddings", embeddings()),
        ("chat_1mb_read_whole", "/v1/chat/completions", chat()),
    ] {
        group.throughput(Throughput::Bytes(body.len() as u64));
        let frames = frames(body);
        if path == "/v1/embeddings" {
            group.bench_function("embeddings_4mb_bare", |b| {
                b.iter_batched(|| Frames::of(frames.clone()), drain, BatchSize::SmallInput)
            });
        }
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let exchange = exchange(path, "application/json", &reading);
                    ObservedBody::new(Frames::of(frames.clone()), exchange)
                },
                drain,
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
}
