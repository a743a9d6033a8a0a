//! `framing`: the SSE and NDJSON framers alone, no dialect (events per
//! second of framing only).

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use tokenclock::measure::dialect::Dialect;
use tokio::time::Instant;

use crate::{
    recorded::{frame, Stream, RECORDINGS},
    streams::{vllm_chat, Chunking},
};

/// Frames `chunks`; returns the events framed. The clock is a constant:
/// only the framer is timed.
fn count(dialect: Dialect, at: Instant, chunks: &[&[u8]]) -> u64 {
    let mut events = 0u64;
    frame(
        dialect,
        chunks,
        || at,
        |name, data, _| {
            black_box((name, data));
            events += 1;
        },
    );
    events
}

pub(crate) fn bench(c: &mut Criterion) {
    let at = Instant::now();
    let chat = vllm_chat();
    chat.describe("openai_chat_vllm_synthetic");
    let ollama = RECORDINGS
        .iter()
        .find(|(d, _)| *d == Dialect::Ollama)
        .map(|&(d, file)| Stream::recorded(d, file))
        .expect("an Ollama recording");
    ollama.describe("ollama (recorded, lengthened)");
    let mut group = c.benchmark_group("framing");
    let cases = Chunking::ALL
        .map(|chunking| {
            (
                Dialect::OpenAiChat,
                "sse_openai_chat_vllm_synthetic",
                &chat,
                chunking,
            )
        })
        .into_iter()
        .chain(
            [Chunking::PerEvent, Chunking::Read]
                .map(|chunking| (Dialect::Ollama, "ndjson_ollama", &ollama, chunking)),
        );
    for (dialect, name, stream, chunking) in cases {
        let chunks = chunking.chunks(stream);
        assert_eq!(
            count(dialect, at, &chunks),
            stream.events,
            "{name}: every event framed"
        );
        group.throughput(Throughput::Elements(stream.events));
        group.bench_function(format!("{name}/{}", chunking.name()), |b| {
            b.iter(|| count(dialect, at, black_box(&chunks)))
        });
    }
    group.finish();
}
