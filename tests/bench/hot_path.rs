//! Criterion benchmarks of the per-event hot path: framing, dialect parsing, timeline and the observing body.
//!
//! Every stream is built in memory, so no I/O is timed. Each group reports
//! throughput in events (or frames) on one thread, that is per core:
//!
//! - `framing`: [`SseFramer`] and [`NdjsonFramer`] alone, the stream fed one
//!   event per chunk (how vLLM writes), in 4 KiB chunks and in 61-byte
//!   chunks (events split across reads).
//! - `framing_and_dialect`: the same, each event parsed by its dialect and
//!   recorded into a [`Timeline`]: the whole per-event measurement path.
//! - `observed_body`: polling an in-memory body bare, through
//!   [`ObservedBody`] with a no-op observer, and with the proxy's own
//!   [`Exchange`] observer on an SSE chat stream.
//!
//! Run with `cargo bench --bench hot_path`.

use std::{
    convert::Infallible,
    hint::black_box,
    pin::{pin, Pin},
    task::{Context, Poll, Waker},
    time::Duration,
};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput};
use http_body::{Body, Frame};
use tokenclock::{
    config::File,
    measure::dialect::Dialect,
    measure::exchange::Exchange,
    measure::frame::ndjson::NdjsonFramer,
    measure::frame::sse::SseFramer,
    measure::observe::{End, Observe, ObservedBody},
    measure::read::ReadSettings,
    measure::timeline::Timeline,
};
use tokio::time::Instant;

/// Token events per stream (each stream adds a few framing events).
const TOKENS: usize = 1_000;
/// The proxy's default `max_event_bytes`.
const MAX_EVENT_BYTES: usize = 1024 * 1024;
/// A socket read's worth.
const READ_CHUNK: usize = 4096;
/// Small and odd, so most events are split across feeds.
const SPLIT_CHUNK: usize = 61;

/// One response stream in memory: its bytes and where each event ends.
struct Stream {
    bytes: Vec<u8>,
    /// One range per event (SSE event with its blank line, or NDJSON line).
    events: Vec<std::ops::Range<usize>>,
}

impl Stream {
    fn new(events: impl IntoIterator<Item = String>) -> Self {
        let mut bytes = Vec::new();
        let mut ranges = Vec::new();
        for event in events {
            let start = bytes.len();
            bytes.extend_from_slice(event.as_bytes());
            ranges.push(start..bytes.len());
        }
        Self {
            bytes,
            events: ranges,
        }
    }

    fn events(&self) -> u64 {
        self.events.len() as u64
    }

    /// The stream cut as `chunking` says.
    fn chunks(&self, chunking: Chunking) -> Vec<&[u8]> {
        match chunking {
            Chunking::PerEvent => self.events.iter().map(|r| &self.bytes[r.clone()]).collect(),
            Chunking::Read => self.bytes.chunks(READ_CHUNK).collect(),
            Chunking::Split => self.bytes.chunks(SPLIT_CHUNK).collect(),
        }
    }

    /// One owned frame per event, as an upstream writing one event per
    /// write would hand them to the proxy.
    fn frames(&self) -> Vec<Bytes> {
        let all = Bytes::copy_from_slice(&self.bytes);
        self.events.iter().map(|r| all.slice(r.clone())).collect()
    }

    fn mean_event_bytes(&self) -> usize {
        self.bytes.len() / self.events.len().max(1)
    }
}

#[derive(Clone, Copy)]
enum Chunking {
    PerEvent,
    Read,
    Split,
}

impl Chunking {
    const ALL: [Chunking; 3] = [Self::PerEvent, Self::Read, Self::Split];

    fn name(self) -> &'static str {
        match self {
            Self::PerEvent => "event_per_chunk",
            Self::Read => "4KiB_chunks",
            Self::Split => "61B_chunks",
        }
    }
}

/// A vLLM-style OpenAI chat stream: role, one token per chunk, finish with
/// usage, `[DONE]`. Token chunks are about 270 bytes.
fn openai_chat_stream() -> Stream {
    const HEAD: &str = r#"{"id":"chatcmpl-8f3a2c1e9b7d4e0fa1c2b3d4e5f60718","object":"chat.completion.chunk","created":1760000100,"model":"meta-llama/Llama-3.1-8B-Instruct","system_fingerprint":"fp_vllm_0_11_0","#;
    let words = [
        " the", " model", " answers", ",", " token", " by", " token", ".",
    ];
    let mut events = vec![format!(
        "data: {HEAD}\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
    )];
    for i in 0..TOKENS {
        let word = words[i % words.len()];
        events.push(format!(
            "data: {HEAD}\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
        ));
    }
    events.push(format!(
        "data: {HEAD}\"choices\":[{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":27,\"total_tokens\":{},\"completion_tokens\":{TOKENS}}}}}\n\n",
        27 + TOKENS
    ));
    events.push("data: [DONE]\n\n".to_owned());
    Stream::new(events)
}

/// An Anthropic Messages stream: `event:` lines, one `text_delta` per token.
fn anthropic_stream() -> Stream {
    let mut events = vec![
        r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_01XFDUDYJgAACzvnptvVoYEL","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":27,"cache_creation_input_tokens":0,"cache_read_input_tokens":1024,"output_tokens":1,"service_tier":"standard"}}}

"#
        .to_owned(),
        "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n".to_owned(),
    ];
    let words = [
        " the", " model", " answers", ",", " token", " by", " token", ".",
    ];
    for i in 0..TOKENS {
        let word = words[i % words.len()];
        events.push(format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{word}\"}}}}\n\n"
        ));
    }
    events.push(
        "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n"
            .to_owned(),
    );
    events.push(format!(
        "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":{TOKENS}}}}}\n\n"
    ));
    events.push("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n".to_owned());
    Stream::new(events)
}

/// An Ollama `/api/chat` NDJSON stream, with counts on the `done` line.
fn ollama_stream() -> Stream {
    let words = [
        " the", " model", " answers", ",", " token", " by", " token", ".",
    ];
    let mut events = Vec::new();
    for i in 0..TOKENS {
        let word = words[i % words.len()];
        events.push(format!(
            "{{\"model\":\"qwen3:8b\",\"created_at\":\"2025-10-01T10:00:{:02}.{:06}Z\",\"message\":{{\"role\":\"assistant\",\"content\":\"{word}\"}},\"done\":false}}\n",
            i / 100 % 60,
            i * 37 % 1_000_000
        ));
    }
    events.push(format!(
        "{{\"model\":\"qwen3:8b\",\"created_at\":\"2025-10-01T10:00:10.000000Z\",\"message\":{{\"role\":\"assistant\",\"content\":\"\"}},\"done\":true,\"done_reason\":\"stop\",\"total_duration\":10512345678,\"load_duration\":12345678,\"prompt_eval_count\":27,\"prompt_eval_duration\":23456789,\"eval_count\":{TOKENS},\"eval_duration\":10400000000}}\n"
    ));
    Stream::new(events)
}

// === framing ===

fn frame_sse(chunks: &[&[u8]]) -> u64 {
    let mut framer = SseFramer::new(MAX_EVENT_BYTES);
    let mut events = 0u64;
    for chunk in chunks {
        framer.feed(black_box(chunk), &mut |event| {
            black_box(event);
            events += 1;
        });
    }
    events
}

fn frame_ndjson(chunks: &[&[u8]]) -> u64 {
    let mut framer = NdjsonFramer::new(MAX_EVENT_BYTES);
    let mut lines = 0u64;
    for chunk in chunks {
        framer.feed(black_box(chunk), &mut |line| {
            black_box(line);
            lines += 1;
        });
    }
    framer.finish(&mut |_| lines += 1);
    lines
}

fn framing(c: &mut Criterion) {
    let chat = openai_chat_stream();
    let ollama = ollama_stream();
    for (name, stream) in [
        ("openai_chat", &chat),
        ("anthropic", &anthropic_stream()),
        ("ollama", &ollama),
    ] {
        eprintln!(
            "{name} stream: {} events, {} bytes, {} bytes/event on average",
            stream.events(),
            stream.bytes.len(),
            stream.mean_event_bytes()
        );
    }
    let mut group = c.benchmark_group("framing");
    group.throughput(Throughput::Elements(chat.events()));
    for chunking in Chunking::ALL {
        let chunks = chat.chunks(chunking);
        assert_eq!(frame_sse(&chunks), chat.events(), "every SSE event framed");
        group.bench_function(format!("sse_openai_chat/{}", chunking.name()), |b| {
            b.iter(|| frame_sse(black_box(&chunks)))
        });
    }
    group.throughput(Throughput::Elements(ollama.events()));
    for chunking in [Chunking::PerEvent, Chunking::Read] {
        let chunks = ollama.chunks(chunking);
        assert_eq!(frame_ndjson(&chunks), ollama.events(), "every line framed");
        group.bench_function(format!("ndjson_ollama/{}", chunking.name()), |b| {
            b.iter(|| frame_ndjson(black_box(&chunks)))
        });
    }
    group.finish();
}

// === framing_and_dialect ===

/// Frames, parses and records an SSE stream the way the proxy's reader
/// does: one instant per chunk, each event into the timeline.
fn read_sse(dialect: Dialect, start: Instant, chunks: &[&[u8]]) -> Timeline {
    let mut framer = SseFramer::new(MAX_EVENT_BYTES);
    let mut timeline = Timeline::new(start, dialect);
    for chunk in chunks {
        let at = Instant::now();
        framer.feed(black_box(chunk), &mut |event| match dialect
            .parse_event(event.event, event.data)
        {
            Ok(parsed) => timeline.record(&parsed, at),
            Err(e) => timeline.parse_error(e),
        });
    }
    timeline
}

fn read_ndjson(start: Instant, chunks: &[&[u8]]) -> Timeline {
    let mut framer = NdjsonFramer::new(MAX_EVENT_BYTES);
    let mut timeline = Timeline::new(start, Dialect::Ollama);
    let record = |line: &[u8], at: Instant, timeline: &mut Timeline| match Dialect::Ollama
        .parse_event(b"", line)
    {
        Ok(parsed) => timeline.record(&parsed, at),
        Err(e) => timeline.parse_error(e),
    };
    for chunk in chunks {
        let at = Instant::now();
        framer.feed(black_box(chunk), &mut |line| {
            record(line, at, &mut timeline)
        });
    }
    let at = Instant::now();
    framer.finish(&mut |line| record(line, at, &mut timeline));
    timeline
}

/// Checks outside the timed loop that the stream is read as intended, so
/// the figures are of real parsing, not of a fast error path.
fn check(timeline: &Timeline, stream: &Stream, what: &str) {
    assert_eq!(timeline.events, stream.events(), "{what}: every event read");
    assert!(
        timeline.parse_errors.is_empty(),
        "{what}: no parse errors, got {:?}",
        timeline.parse_errors
    );
    assert_eq!(
        timeline.tokens.token_events, TOKENS as u64,
        "{what}: every token-bearing event counted"
    );
}

fn framing_and_dialect(c: &mut Criterion) {
    let start = Instant::now();
    let chat = openai_chat_stream();
    let anthropic = anthropic_stream();
    let ollama = ollama_stream();
    let mut group = c.benchmark_group("framing_and_dialect");

    group.throughput(Throughput::Elements(chat.events()));
    for chunking in Chunking::ALL {
        let chunks = chat.chunks(chunking);
        check(
            &read_sse(Dialect::OpenAiChat, start, &chunks),
            &chat,
            "openai_chat",
        );
        group.bench_function(format!("sse_openai_chat/{}", chunking.name()), |b| {
            b.iter(|| read_sse(Dialect::OpenAiChat, start, black_box(&chunks)))
        });
    }

    group.throughput(Throughput::Elements(anthropic.events()));
    for chunking in [Chunking::PerEvent, Chunking::Read] {
        let chunks = anthropic.chunks(chunking);
        check(
            &read_sse(Dialect::Anthropic, start, &chunks),
            &anthropic,
            "anthropic",
        );
        group.bench_function(format!("sse_anthropic/{}", chunking.name()), |b| {
            b.iter(|| read_sse(Dialect::Anthropic, start, black_box(&chunks)))
        });
    }

    group.throughput(Throughput::Elements(ollama.events()));
    for chunking in [Chunking::PerEvent, Chunking::Read] {
        let chunks = ollama.chunks(chunking);
        check(&read_ndjson(start, &chunks), &ollama, "ollama");
        group.bench_function(format!("ndjson_ollama/{}", chunking.name()), |b| {
            b.iter(|| read_ndjson(start, black_box(&chunks)))
        });
    }
    group.finish();
}

// === observed_body ===

/// A body yielding pre-built frames, never pending: no I/O to time.
struct Frames(std::vec::IntoIter<Bytes>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.next().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.len() == 0
    }
}

/// Observes nothing: the cost of the wrapper itself.
struct Noop;

impl Observe for Noop {
    fn on_data(&mut self, data: &Bytes, at: Instant) {
        black_box((data, at));
    }

    fn on_end(self, end: End, at: Instant) {
        black_box((end, at));
    }
}

/// Polls `body` to its end with a no-op waker; returns the frames seen.
fn drain<B: Body<Data = Bytes, Error = Infallible>>(body: B) -> u64 {
    let mut body = pin!(body);
    let mut cx = Context::from_waker(Waker::noop());
    let mut frames = 0u64;
    loop {
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                black_box(frame);
                frames += 1;
            }
            Poll::Ready(Some(Err(never))) => match never {},
            Poll::Ready(None) => return frames,
            Poll::Pending => panic!("an in-memory body never pends"),
        }
    }
}

/// The proxy's default reading settings, through the config parser.
fn reading() -> ReadSettings {
    File::parse("upstream = \"http://127.0.0.1:8000\"\n", "bench.toml")
        .and_then(File::validate)
        .expect("a config with only an upstream is valid")
        .reading
}

/// An exchange for a streamed chat completion whose response head has
/// arrived: the state the proxy is in when the body's first frame comes.
fn chat_exchange(reading: &ReadSettings) -> Exchange {
    let start = Instant::now();
    let request = http::Request::post("/v1/chat/completions")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(())
        .expect("a constant request is valid");
    let (mut exchange, _upload) = Exchange::start(start, &request, reading, None);
    let (head, ()) = http::Response::builder()
        .header(http::header::CONTENT_TYPE, "text/event-stream")
        .body(())
        .expect("a constant response is valid")
        .into_parts();
    exchange.on_response_head(&head, Instant::now());
    exchange
}

fn observed_body(c: &mut Criterion) {
    let chat = openai_chat_stream();
    let frames = chat.frames();
    let count = frames.len() as u64;
    let reading = reading();
    let mut group = c.benchmark_group("observed_body");
    group.throughput(Throughput::Elements(count));

    assert_eq!(drain(Frames(frames.clone().into_iter())), count);
    group.bench_function("bare", |b| {
        b.iter_batched(
            || Frames(frames.clone().into_iter()),
            drain,
            BatchSize::SmallInput,
        )
    });

    assert_eq!(
        drain(ObservedBody::new(Frames(frames.clone().into_iter()), Noop)),
        count
    );
    group.bench_function("observed_noop", |b| {
        b.iter_batched(
            || ObservedBody::new(Frames(frames.clone().into_iter()), Noop),
            drain,
            BatchSize::SmallInput,
        )
    });

    assert_eq!(
        drain(ObservedBody::new(
            Frames(frames.clone().into_iter()),
            chat_exchange(&reading)
        )),
        count
    );
    group.bench_function("observed_exchange_sse_openai_chat", |b| {
        b.iter_batched(
            || ObservedBody::new(Frames(frames.clone().into_iter()), chat_exchange(&reading)),
            drain,
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(30)
}

// What `criterion_group!` and `criterion_main!` expand to, written out so
// no undocumented public function is generated.
fn main() {
    let mut criterion = config().configure_from_args();
    framing(&mut criterion);
    framing_and_dialect(&mut criterion);
    observed_body(&mut criterion);
    criterion.final_summary();
}
