//! Real recorded response streams, one per dialect, lengthened in memory,
//! and the reading path the proxy runs on them (framer, dialect,
//! [`Timeline::record`]). Shared by the `hot_path` and `metrics_render`
//! benches (each includes this file as a module).
//!
//! A recording is cut into blocks (an SSE event with its blank line, a
//! comment block, an NDJSON line). To reach a realistic length, the span
//! from its first to its last plain token delta (a token-bearing event
//! with no usage, finish reason or server timings) is repeated until it
//! holds at least [`TOKEN_EVENTS`] token-bearing events; what comes before
//! (role chunks, `message_start`, `response.created`…) and after (finish,
//! usage, `[DONE]`, `done: true`…) stays once, so per-event figures are
//! not dominated by the prologue.

use std::{hint::black_box, ops::Range, path::Path};

use tokenclock::{
    measure::dialect::{Dialect, ServerTimings, Usage},
    measure::frame::ndjson::NdjsonFramer,
    measure::frame::sse::SseFramer,
    measure::timeline::Timeline,
};
use tokio::time::Instant;

/// The proxy's default `max_event_bytes`.
pub(crate) const MAX_EVENT_BYTES: usize = 1024 * 1024;

/// Token-bearing events a lengthened recording holds at least: a few
/// hundred, a typical completion.
pub(crate) const TOKEN_EVENTS: u64 = 400;

/// The recording of every dialect that reads events (paths under
/// `tests/fixtures`; see `real/manifest.toml`).
pub(crate) const RECORDINGS: [(Dialect, &str); 7] = [
    (Dialect::OpenAiChat, "real/openai_chat_usage.sse"),
    (
        Dialect::OpenAiCompletions,
        "real/openai_completions_legacy.sse",
    ),
    (
        Dialect::OpenAiResponses,
        "real/openai_responses_reasoning_summary.sse",
    ),
    (Dialect::Anthropic, "real/anthropic_messages_cache_read.sse"),
    (Dialect::Tgi, "real/tgi_generate_stream.sse"),
    (Dialect::Ollama, "real/ollama_chat_stream.ndjson"),
    (Dialect::LlamaCpp, "real/llamacpp_completion_stream.sse"),
];

/// One response stream in memory, with what reading it must find.
pub(crate) struct Stream {
    pub(crate) bytes: Vec<u8>,
    /// One range per block, each as one write of the upstream would
    /// carry it.
    pub(crate) blocks: Vec<Range<usize>>,
    /// Events the framer hands to the dialect (comment blocks are none).
    pub(crate) events: u64,
    /// Of those, the events carrying a generated token.
    pub(crate) token_events: u64,
}

impl Stream {
    /// The stream made of `blocks`, each read alone with a fresh framer to
    /// count its events and token-bearing events: the reference the timed
    /// reads of the whole stream are checked against.
    pub(crate) fn from_blocks<B: AsRef<[u8]>>(
        dialect: Dialect,
        blocks: impl IntoIterator<Item = B>,
    ) -> Self {
        let mut stream = Self {
            bytes: Vec::new(),
            blocks: Vec::new(),
            events: 0,
            token_events: 0,
        };
        for block in blocks {
            let block = block.as_ref();
            let alone = read_at(dialect, &[block], Instant::now());
            assert!(
                alone.parse_errors.is_empty(),
                "{}: a block that does not parse: {:?}",
                dialect.as_str(),
                String::from_utf8_lossy(block)
            );
            stream.events += alone.events;
            stream.token_events += alone.tokens.token_events;
            let start = stream.bytes.len();
            stream.bytes.extend_from_slice(block);
            stream.blocks.push(start..stream.bytes.len());
        }
        stream
    }

    /// The recording of `dialect` in `file`, lengthened (see the module).
    pub(crate) fn recorded(dialect: Dialect, file: &str) -> Self {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(file);
        let bytes =
            std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        let blocks = split(dialect, &bytes);
        let plain: Vec<bool> = blocks.iter().map(|b| plain_delta(dialect, b)).collect();
        let (Some(first), Some(last)) = (
            plain.iter().position(|&p| p),
            plain.iter().rposition(|&p| p),
        ) else {
            panic!("{file}: no plain token delta to repeat");
        };
        let body = &blocks[first..=last];
        let per_pass = plain[first..=last].iter().filter(|&&p| p).count();
        let passes = (TOKEN_EVENTS as usize).div_ceil(per_pass);
        let lengthened = blocks[..first]
            .iter()
            .chain(body.iter().cycle().take(body.len() * passes))
            .chain(&blocks[last + 1..]);
        let stream = Self::from_blocks(dialect, lengthened);
        assert!(
            stream.token_events >= TOKEN_EVENTS,
            "{file}: {} token events",
            stream.token_events
        );
        stream
    }

    /// The blocks, one slice each.
    pub(crate) fn block_slices(&self) -> Vec<&[u8]> {
        self.blocks.iter().map(|r| &self.bytes[r.clone()]).collect()
    }

    /// Prints the stream's shape (once, outside timing).
    pub(crate) fn describe(&self, name: &str) {
        eprintln!(
            "{name} stream: {} events ({} token-bearing) in {} blocks, {} bytes, {} bytes/event on average",
            self.events,
            self.token_events,
            self.blocks.len(),
            self.bytes.len(),
            self.bytes.len() as u64 / self.events.max(1)
        );
    }
}

/// `bytes` cut after each blank line (SSE) or newline (NDJSON).
fn split(dialect: Dialect, bytes: &[u8]) -> Vec<&[u8]> {
    let end: &[u8] = if ndjson(dialect) { b"\n" } else { b"\n\n" };
    let mut blocks = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let len = rest
            .windows(end.len())
            .position(|w| w == end)
            .map_or(rest.len(), |i| i + end.len());
        blocks.push(&rest[..len]);
        rest = &rest[len..];
    }
    blocks
}

/// Whether `block` is one token delta and nothing else.
fn plain_delta(dialect: Dialect, block: &[u8]) -> bool {
    let t = read_at(dialect, &[block], Instant::now());
    t.events == 1
        && t.tokens.token_events == 1
        && t.usage == Usage::default()
        && t.server == ServerTimings::default()
        && t.finish_reason.is_none()
        && !t.in_band_error
}

/// Ollama's native API is the NDJSON one.
fn ndjson(dialect: Dialect) -> bool {
    dialect == Dialect::Ollama
}

/// Frames `chunks` as the proxy's reader does: each chunk stamped by
/// `clock` when it arrives, each complete event handed to `on_event` with
/// its SSE `event:` name (empty for NDJSON), its payload and that instant.
pub(crate) fn frame(
    dialect: Dialect,
    chunks: &[&[u8]],
    mut clock: impl FnMut() -> Instant,
    mut on_event: impl FnMut(&[u8], &[u8], Instant),
) {
    if ndjson(dialect) {
        let mut framer = NdjsonFramer::new(MAX_EVENT_BYTES);
        for chunk in chunks {
            let at = clock();
            framer.feed(black_box(chunk), &mut |line| on_event(b"", line, at));
        }
        let at = clock();
        framer.finish(&mut |line| on_event(b"", line, at));
    } else {
        let mut framer = SseFramer::new(MAX_EVENT_BYTES);
        for chunk in chunks {
            let at = clock();
            framer.feed(black_box(chunk), &mut |event| {
                on_event(event.event, event.data, at)
            });
        }
    }
}

/// Frames, parses and records `chunks` into a new timeline started at
/// `start`: the whole per-event measurement path.
pub(crate) fn read(
    dialect: Dialect,
    start: Instant,
    chunks: &[&[u8]],
    clock: impl FnMut() -> Instant,
) -> Timeline {
    let mut timeline = Timeline::new(start, dialect);
    read_into(&mut timeline, chunks, clock);
    timeline
}

/// [`read`] into an existing timeline, in its dialect.
pub(crate) fn read_into(timeline: &mut Timeline, chunks: &[&[u8]], clock: impl FnMut() -> Instant) {
    let dialect = timeline.dialect;
    frame(dialect, chunks, clock, |name, data, at| {
        match dialect.parse_event(name, data) {
            Ok(parsed) => timeline.record(&parsed, at),
            Err(e) => timeline.parse_error(e),
        }
    });
}

/// [`read`] with every chunk arriving at `at`.
fn read_at(dialect: Dialect, chunks: &[&[u8]], at: Instant) -> Timeline {
    read(dialect, at, chunks, || at)
}

/// Checks, outside any timed loop, that reading `stream` found every event
/// and every token-bearing one, with no parse error: the figures are of
/// real parsing, not of a fast error path.
pub(crate) fn check(timeline: &Timeline, stream: &Stream, what: &str) {
    assert_eq!(timeline.events, stream.events, "{what}: every event read");
    assert!(
        timeline.parse_errors.is_empty(),
        "{what}: no parse errors, got {:?}",
        timeline.parse_errors
    );
    assert_eq!(
        timeline.tokens.token_events, stream.token_events,
        "{what}: every token-bearing event counted"
    );
}
