//! Dialect tests: recorded-shape fixtures, edge cases, request bodies.

/// The bytes of a recorded-shape fixture in `tests/fixtures/dialects/`.
macro_rules! fixture {
    ($name:literal) => {
        include_bytes!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/dialects/",
            $name
        ))
    };
}

mod definitions;
mod edges;
mod finish;
mod fixtures;
mod request;
mod scan;
mod scan_random;

use super::{Dialect, Parsed, ServerTimings, Usage};

/// One event as framed on the wire: the SSE `event:` name and its data.
struct Frame {
    name: String,
    data: String,
}

/// A test-only SSE splitter: blank lines end events, `:` lines are
/// comments, one optional space after the colon, data lines join with `\n`.
fn sse(bytes: &[u8]) -> Vec<Frame> {
    let text = std::str::from_utf8(bytes).expect("utf-8 fixture");
    let mut frames = Vec::new();
    for block in text.replace("\r\n", "\n").split("\n\n") {
        let mut name = String::new();
        let mut data: Vec<&str> = Vec::new();
        for line in block.lines().filter(|l| !l.starts_with(':')) {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => name = value.to_owned(),
                "data" => data.push(value),
                _ => {}
            }
        }
        if !data.is_empty() {
            frames.push(Frame {
                name,
                data: data.join("\n"),
            });
        }
    }
    frames
}

/// A test-only NDJSON splitter.
fn ndjson(bytes: &[u8]) -> Vec<Frame> {
    let text = std::str::from_utf8(bytes).expect("utf-8 fixture");
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| Frame {
            name: String::new(),
            data: l.to_owned(),
        })
        .collect()
}

/// What a whole stream meant, event by event and in total.
#[derive(Debug, Default, PartialEq)]
struct Summary {
    /// One char per event: `r`, `o`, `t` (the kind of text it carries), `*`
    /// (several kinds), `k` (a token without text), `.` (no token).
    kinds: String,
    reasoning: u32,
    output: u32,
    tool: u32,
    /// Sum of the exact per-event token counts, when any event had one.
    tokens: Option<u32>,
    /// Usage fields merged over the stream, later reports winning.
    usage: Option<Usage>,
    /// Events whose usage was cumulative.
    cumulative: Vec<usize>,
    server: Option<ServerTimings>,
    model: Option<String>,
    /// The first response id the stream carried.
    response_id: Option<String>,
    /// Events marked as the end of the stream.
    ends: Vec<usize>,
    errors: usize,
}

fn kind(p: &Parsed<'_>) -> char {
    let kinds = [
        (p.reasoning_bytes, 'r'),
        (p.output_bytes, 'o'),
        (p.tool_bytes, 't'),
    ];
    let mut present = kinds.iter().filter(|(n, _)| *n > 0).map(|(_, c)| *c);
    match (present.next(), present.next()) {
        (Some(_), Some(_)) => '*',
        (Some(c), None) => c,
        _ if p.has_token() => 'k',
        _ => '.',
    }
}

fn merge(into: &mut Option<Usage>, u: Usage) {
    let m = into.get_or_insert_with(Usage::default);
    m.input = u.input.or(m.input);
    m.cached_input = u.cached_input.or(m.cached_input);
    m.output = u.output.or(m.output);
    m.reasoning = u.reasoning.or(m.reasoning);
}

fn summarize(dialect: Dialect, frames: &[Frame]) -> Summary {
    let mut s = Summary::default();
    for (i, f) in frames.iter().enumerate() {
        let p = dialect
            .parse_event(f.name.as_bytes(), f.data.as_bytes())
            .unwrap_or_else(|e| panic!("event {i} {:?}: {e}", f.data));
        s.kinds.push(kind(&p));
        s.reasoning += p.reasoning_bytes;
        s.output += p.output_bytes;
        s.tool += p.tool_bytes;
        if let Some(n) = p.tokens {
            s.tokens = Some(s.tokens.unwrap_or(0) + n);
        }
        if let Some(u) = p.usage {
            merge(&mut s.usage, u);
        }
        if p.cumulative {
            s.cumulative.push(i);
        }
        s.server = p.server.or(s.server);
        let text = |name: &super::Name<'_>| name.to_text().map(str::to_owned);
        s.model = p.model.as_ref().and_then(text).or(s.model.take());
        if s.response_id.is_none() {
            s.response_id = p.response_id.as_ref().and_then(text);
        }
        if p.end {
            s.ends.push(i);
        }
        s.errors += usize::from(p.error);
    }
    s
}

fn usage(
    input: Option<u64>,
    cached: Option<u64>,
    output: u64,
    reasoning: Option<u64>,
) -> Option<Usage> {
    Some(Usage {
        input,
        cached_input: cached,
        output: Some(output),
        reasoning,
    })
}

fn ms(v: f64) -> Option<std::time::Duration> {
    Some(std::time::Duration::from_secs_f64(v / 1e3))
}

/// Every dialect is in `ALL`, at its index: the per-dialect arrays of the
/// metrics are indexed by it.
#[test]
fn each_dialect_is_at_its_index_in_all() {
    for (i, d) in Dialect::ALL.into_iter().enumerate() {
        assert_eq!(d.index(), i, "{d:?}");
    }
}
