//! Criterion benchmarks of the per-event hot path: framing, dialect
//! parsing, timeline and the observing body. Run with
//! `cargo bench --bench hot_path` (a few minutes; one group:
//! `cargo bench --bench hot_path -- framing_and_dialect`).
//!
//! Every stream is built in memory, so no I/O is timed. Each group reports
//! throughput in events (criterion's elements: events the framer hands to
//! the dialect, or frames for `observed_body`) on one thread, that is per
//! core:
//!
//! - `framing` ([`framing`]): [`SseFramer`] and [`NdjsonFramer`] alone on a
//!   synthetic vLLM-style OpenAI chat stream (1,000 tokens) and on the
//!   lengthened Ollama recording; fed one event per chunk (how vLLM
//!   writes), in 4 KiB chunks, and (SSE) in 61-byte chunks (events split
//!   across reads).
//! - `framing_and_dialect` ([`dialects`]): the framer, each event parsed
//!   by its dialect and recorded into a [`Timeline`]: the whole per-event
//!   measurement path, for every dialect (`openai_chat`,
//!   `openai_completions`, `openai_responses`, `anthropic`, `tgi`,
//!   `ollama`, `llamacpp`) on its real recording lengthened to a few
//!   hundred token events ([`recorded`]), one event per chunk and in 4 KiB
//!   chunks; plus the synthetic vLLM chat stream
//!   (`openai_chat_vllm_synthetic`) in the three chunkings, and SGLang's
//!   `/generate` (`sglang_generate_synthetic`, whose events each repeat
//!   all the text and token ids so far, as SGLang sends them by default,
//!   and `sglang_generate_incremental_synthetic`), 1,000 tokens each, one
//!   event per chunk and in 4 KiB chunks. Each stream is
//!   checked outside the timed loop: every event read, every token-bearing
//!   event counted, no parse error.
//! - `observed_body` ([`observed`]): polling an in-memory body of one
//!   event per frame bare, through [`ObservedBody`] with a no-op observer,
//!   and with the proxy's own [`Exchange`] observer on the synthetic chat
//!   stream (ns per frame).
//! - `whole_body` ([`whole`]): a whole JSON answer through the proxy's own
//!   [`Exchange`] observer in 16 KiB frames (bytes per second): a 4 MB
//!   embeddings batch read by its ends, a 1 MB chat answer read whole, and
//!   the embeddings frames polled bare.
//!
//! The `/metrics` render has its own bench, `metrics_render`.
//!
//! [`SseFramer`]: tokenclock::measure::frame::sse::SseFramer
//! [`NdjsonFramer`]: tokenclock::measure::frame::ndjson::NdjsonFramer
//! [`Timeline`]: tokenclock::measure::timeline::Timeline
//! [`ObservedBody`]: tokenclock::measure::observe::ObservedBody
//! [`Exchange`]: tokenclock::measure::exchange::Exchange

mod dialects;
mod framing;
mod observed;
#[path = "../recorded.rs"]
mod recorded;
mod streams;
mod whole;

use std::time::Duration;

use criterion::Criterion;

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
    framing::bench(&mut criterion);
    dialects::bench(&mut criterion);
    observed::bench(&mut criterion);
    whole::bench(&mut criterion);
    criterion.final_summary();
}
