//! `framing_and_dialect`: the framer, the dialect and `Timeline::record`
//! for every dialect, on its real recording lengthened in memory (see
//! [`crate::recorded`]), and on the synthetic vLLM chat stream.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use tokenclock::measure::dialect::Dialect;
use tokio::time::Instant;

use crate::{
    recorded::{check, read, Stream, RECORDINGS},
    streams::{sglang_generate, vllm_chat, Chunking},
};

pub(crate) fn bench(c: &mut Criterion) {
    let start = Instant::now();
    let mut cases: Vec<(Dialect, String, Stream, &[Chunking])> = RECORDINGS
        .iter()
        .map(|&(dialect, file)| {
            let stream = Stream::recorded(dialect, file);
            stream.describe(&format!("{} ({file}, lengthened)", dialect.as_str()));
            let chunkings: &[Chunking] = &[Chunking::PerEvent, Chunking::Read];
            (dialect, dialect.as_str().to_owned(), stream, chunkings)
        })
        .collect();
    let chat = vllm_chat();
    chat.describe("openai_chat_vllm_synthetic");
    cases.push((
        Dialect::OpenAiChat,
        "openai_chat_vllm_synthetic".to_owned(),
        chat,
        &Chunking::ALL,
    ));

    // SGLang's `/generate` has no recording to lengthen (its counts run
    // on): synthetic, in both of its text modes.
    for (incremental, name) in [
        (false, "sglang_generate_synthetic"),
        (true, "sglang_generate_incremental_synthetic"),
    ] {
        let stream = sglang_generate(incremental);
        stream.describe(name);
        let chunkings: &[Chunking] = &[Chunking::PerEvent, Chunking::Read];
        cases.push((Dialect::Sglang, name.to_owned(), stream, chunkings));
    }

    let mut group = c.benchmark_group("framing_and_dialect");
    for (dialect, name, stream, chunkings) in &cases {
        group.throughput(Throughput::Elements(stream.events));
        for chunking in chunkings.iter() {
            let chunks = chunking.chunks(stream);
            let id = format!("{name}/{}", chunking.name());
            check(&read(*dialect, start, &chunks, Instant::now), stream, &id);
            group.bench_function(id, |b| {
                b.iter(|| read(*dialect, start, black_box(&chunks), Instant::now))
            });
        }
    }
    group.finish();
}
