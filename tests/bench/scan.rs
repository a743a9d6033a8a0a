//! Criterion benchmarks of per-event parsing (issue #14): the production
//! path ([`Dialect::parse_event`], a borrowed scan with serde for what it
//! is unsure of) against the full serde parse it replaced
//! ([`Dialect::parse_event_reference`]), per dialect.
//!
//! The events are the recorded fixtures (`tests/fixtures/real` by their
//! manifest's path, `tests/fixtures/dialects` by file name), framed by the
//! proxy's own framers. For each dialect, `all` is every event of its
//! fixtures and `token` only those carrying a generated token (the common
//! case of a stream); `chunk_250B` is the issue's OpenAI chat chunk
//! (`"usage":null` on each). Throughput is in events: time per event is the
//! inverse. `stream` reads each fixture's events in order with one
//! [`Events`] per fixture, as the proxy reads a response (OpenAI-style
//! chunks then skip the start they repeat, and one that repeats the chunk
//! before it but for its text is read without a scan); `chunk_250B/stream`
//! is that chunk over and over, as one stream.
//!
//! `request_body` reads a request body ([`RequestInfo::parse`], in place)
//! against the reference it replaced ([`RequestInfo::parse_reference`],
//! serde_json's `Value`): a short chat request and one with a 100-message
//! history (about 64 KiB), and a vision request with a 4 MiB base64 image,
//! in bytes per second.
//!
//! Run with `cargo bench --bench scan`.

use std::{fs, hint::black_box, path::Path, time::Duration};

use criterion::{Criterion, Throughput};
use tokenclock::measure::{
    dialect::{Dialect, Events, ParseError, Parsed, RequestInfo},
    frame::{ndjson::NdjsonFramer, sse::SseFramer},
};

/// Recorded-shape fixtures and the dialect each is read with.
const DIALECT_FIXTURES: [(&str, Dialect); 14] = [
    ("anthropic_thinking.sse", Dialect::Anthropic),
    ("llamacpp_chat.sse", Dialect::OpenAiChat),
    ("llamacpp_completion.sse", Dialect::LlamaCpp),
    ("ollama_chat.ndjson", Dialect::Ollama),
    ("ollama_generate.ndjson", Dialect::Ollama),
    ("openai_chat_tools.sse", Dialect::OpenAiChat),
    ("openai_completions.sse", Dialect::OpenAiCompletions),
    ("openai_responses.sse", Dialect::OpenAiResponses),
    ("sglang_chat.sse", Dialect::OpenAiChat),
    ("tgi_generate_stream.sse", Dialect::Tgi),
    ("vllm_chat_continuous_usage.sse", Dialect::OpenAiChat),
    ("vllm_chat_reasoning.sse", Dialect::OpenAiChat),
    ("openai_audio_transcription.sse", Dialect::OpenAiAudio),
    ("vllm_audio_transcription.sse", Dialect::OpenAiAudio),
];

/// The issue's chunk: a ~250-byte OpenAI chat chunk with `"usage":null`.
const CHUNK_250B: &str = r#"{"id":"chatcmpl-9a8b7c6d5e4f3a2b1c0d","object":"chat.completion.chunk","created":1760000100,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_0ba0d124f1","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}],"usage":null}"#;

/// One framed event: its SSE `event:` name and data.
struct Event {
    name: Vec<u8>,
    data: Vec<u8>,
}

fn frame(path: &Path) -> Vec<Event> {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut events = Vec::new();
    if path.extension().is_some_and(|e| e == "ndjson") {
        let mut framer = NdjsonFramer::new(usize::MAX);
        let mut sink = |line: &[u8]| {
            events.push(Event {
                name: Vec::new(),
                data: line.to_vec(),
            })
        };
        framer.feed(&bytes, &mut sink);
        framer.finish(&mut sink);
    } else {
        SseFramer::new(usize::MAX).feed(&bytes, &mut |e| {
            events.push(Event {
                name: e.event.to_vec(),
                data: e.data.to_vec(),
            })
        });
    }
    events
}

/// Every streamed fixture with its dialect.
fn fixtures() -> Vec<(Dialect, Vec<Event>)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out: Vec<_> = DIALECT_FIXTURES
        .iter()
        .map(|(file, d)| (*d, frame(&root.join("dialects").join(file))))
        .collect();
    let manifest = fs::read_to_string(root.join("real/manifest.toml")).expect("manifest");
    let mut file = None;
    for line in manifest.lines() {
        let value = |key: &str| {
            let v = line.strip_prefix(key)?.trim_start().strip_prefix('=')?;
            Some(v.trim().trim_matches('"').to_owned())
        };
        if let Some(f) = value("file") {
            file = Some(f);
        } else if let (Some(path), Some(f)) = (value("path"), file.take()) {
            if f.ends_with(".sse") || f.ends_with(".ndjson") {
                out.push((Dialect::from_path(&path), frame(&root.join("real").join(f))));
            }
        }
    }
    out
}

type Parse = for<'a> fn(Dialect, &[u8], &'a [u8]) -> Result<Parsed<'a>, ParseError>;

fn readers() -> [(&'static str, Parse); 2] {
    [
        ("scan", |d, n, data| d.parse_event(n, data)),
        ("reference", |d, n, data| d.parse_event_reference(n, data)),
    ]
}

fn carries_token(p: &Parsed<'_>) -> bool {
    p.reasoning_bytes + p.output_bytes + p.tool_bytes > 0 || p.tokens.is_some_and(|n| n > 0)
}

fn per_dialect(c: &mut Criterion) {
    let fixtures = fixtures();
    let mut group = c.benchmark_group("parse_event");
    for dialect in Dialect::ALL.into_iter().filter(|d| *d != Dialect::Unknown) {
        let all: Vec<Vec<&Event>> = fixtures
            .iter()
            .filter(|(d, _)| *d == dialect)
            .map(|(_, events)| events.iter().collect())
            .collect();
        let token: Vec<Vec<&Event>> = all
            .iter()
            .map(|events| {
                let carries = |e: &&Event| {
                    let parsed = dialect.parse_event_reference(&e.name, &e.data);
                    parsed.is_ok_and(|p| carries_token(&p))
                };
                events.iter().copied().filter(carries).collect()
            })
            .collect();
        for (set, streams) in [("all", &all), ("token", &token)] {
            let count = streams.iter().map(Vec::len).sum::<usize>();
            group.throughput(Throughput::Elements(count as u64));
            for (reader, parse) in readers() {
                let id = format!("{}/{set}/{reader}", dialect.as_str());
                group.bench_function(id, |b| {
                    b.iter(|| {
                        for e in streams.iter().flatten() {
                            let _ = black_box(parse(dialect, &e.name, black_box(&e.data)));
                        }
                    })
                });
            }
            let id = format!("{}/{set}/stream", dialect.as_str());
            group.bench_function(id, |b| {
                b.iter(|| {
                    for events in streams {
                        let mut reader = Events::new(dialect);
                        for e in events {
                            let _ = black_box(reader.parse(&e.name, black_box(&e.data)));
                        }
                    }
                })
            });
        }
    }
    group.throughput(Throughput::Elements(1));
    for (reader, parse) in readers() {
        group.bench_function(format!("openai_chat/chunk_250B/{reader}"), |b| {
            b.iter(|| {
                let _ = black_box(parse(
                    Dialect::OpenAiChat,
                    b"",
                    black_box(CHUNK_250B.as_bytes()),
                ));
            })
        });
    }
    let mut reader = Events::new(Dialect::OpenAiChat);
    group.bench_function("openai_chat/chunk_250B/stream", |b| {
        b.iter(|| {
            let _ = black_box(reader.parse(b"", black_box(CHUNK_250B.as_bytes())));
        })
    });
    group.finish();
}

/// A chat request whose history is `turns` user and assistant messages of
/// about 320 bytes each, with an escape or two, as an agent's would be.
fn chat_body(turns: usize) -> Vec<u8> {
    let text = r#"Summarise the \"incident\" report below in three bullet points, citing the log lines that show the failure.\n"#
        .repeat(3);
    let messages: Vec<String> = (0..turns)
        .map(|i| {
            let role = ["user", "assistant"][i % 2];
            format!(r#"{{"role":"{role}","content":"{text} ({i})"}}"#)
        })
        .collect();
    format!(
        r#"{{"model":"meta-llama/Llama-3.1-8B-Instruct","stream":true,"stream_options":{{"include_usage":true}},"max_tokens":512,"temperature":0.7,"top_p":0.95,"messages":[{}]}}"#,
        messages.join(",")
    )
    .into_bytes()
}

/// A vision chat request: a question and a 4 MiB image as a base64 data
/// URL, as the OpenAI SDKs send a local image. Its parse runs on the
/// worker thread that forwards other streams' events, once per request.
fn image_body() -> Vec<u8> {
    let image: String = (0..4 << 20)
        .map(|i: usize| {
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[i * 7 % 64] as char
        })
        .collect();
    format!(
        r#"{{"model":"Qwen/Qwen2.5-VL-7B-Instruct","stream":true,"max_tokens":256,"messages":[{{"role":"user","content":[{{"type":"text","text":"What is in this image?"}},{{"type":"image_url","image_url":{{"url":"data:image/jpeg;base64,{image}"}}}}]}}]}}"#
    )
    .into_bytes()
}

fn request_body(c: &mut Criterion) {
    let mut group = c.benchmark_group("request_body");
    let bodies = [
        ("short", chat_body(2)),
        ("history_64k", chat_body(200)),
        ("image_4m", image_body()),
    ];
    for (name, body) in bodies {
        assert_eq!(
            RequestInfo::parse(Dialect::OpenAiChat, &body),
            RequestInfo::parse_reference(&body)
        );
        group.throughput(Throughput::Bytes(body.len() as u64));
        group.bench_function(format!("{name}/scan"), |b| {
            b.iter(|| RequestInfo::parse(Dialect::OpenAiChat, black_box(&body)))
        });
        group.bench_function(format!("{name}/reference"), |b| {
            b.iter(|| RequestInfo::parse_reference(black_box(&body)))
        });
    }
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

// What `criterion_group!` and `criterion_main!` expand to, written out so
// no undocumented public function is generated.
fn main() {
    let mut criterion = config().configure_from_args();
    per_dialect(&mut criterion);
    request_body(&mut criterion);
    criterion.final_summary();
}
