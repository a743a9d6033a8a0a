//! `tokenclock report --request-id ID` / `--trace-id ID`: the records of
//! one request (or one trace) found again, each printed as its whole
//! timeline: ids, outcome, every phase on one line, the token arrivals as
//! a sparkline, token counts with their sources, and the server's own
//! phases beside the proxy's.

use std::{
    fmt::Write,
    time::{Duration, UNIX_EPOCH},
};

use super::{printable, SloSpec};
use crate::{
    export::records::{Arrivals, Record},
    measure::timeline::{Phase, MAX_ID_BYTES},
};

/// Which records to show.
#[derive(Clone, Debug, PartialEq)]
pub enum Select {
    /// Records whose `request_id` is exactly this.
    RequestId(String),
    /// Records whose `trace_id` is this (hex, any case).
    TraceId(String),
    /// Records that missed these objectives (ended other than `ok`, or a
    /// figure absent or over its limit), listed one per line.
    Missed(SloSpec),
}

impl Select {
    /// Whether `r` is one of the selected records.
    pub fn matches(&self, r: &Record) -> bool {
        match self {
            Self::RequestId(id) => r.request_id.as_deref() == Some(kept_id(id)),
            Self::TraceId(id) => r
                .trace_id
                .as_deref()
                .is_some_and(|t| t.eq_ignore_ascii_case(id.trim())),
            Self::Missed(spec) => !spec.met(r),
        }
    }

    /// The record field and the value looked for, for messages.
    pub fn describe(&self) -> String {
        match self {
            Self::RequestId(id) => format!("request_id `{id}`"),
            Self::TraceId(id) => format!("trace_id `{id}`"),
            Self::Missed(spec) => format!("a miss of `{}`", spec.name),
        }
    }
}

/// A request id as the proxy keeps it: trimmed, and its first
/// [`MAX_ID_BYTES`] when longer, so that the id the caller sent finds its
/// record.
fn kept_id(id: &str) -> &str {
    let id = id.trim();
    id.get(..MAX_ID_BYTES.min(id.len())).unwrap_or(id)
}

/// Each selected record's timeline, oldest first.
pub(crate) fn text(records: &[&Record]) -> String {
    let mut out = String::new();
    let mut sorted = records.to_vec();
    sorted.sort_by(|a, b| a.start_unix_ms.total_cmp(&b.start_unix_ms));
    for (i, r) in sorted.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "== request {} of {} ==", i + 1, sorted.len());
        one(&mut out, r);
    }
    out
}

/// Width of the row titles.
const TITLE: usize = 14;

fn row(out: &mut String, title: &str, body: &str) {
    let _ = writeln!(out, "{title:<TITLE$}{body}");
}

fn one(out: &mut String, r: &Record) {
    row(out, "started", &started(r));
    let or_dash = |v: &Option<String>| {
        v.as_deref()
            .map_or_else(|| "-".to_owned(), |v| printable(v).into_owned())
    };
    row(out, "request_id", &or_dash(&r.request_id));
    let trace = match (&r.trace_id, &r.parent_span_id) {
        (Some(trace), Some(parent)) => {
            format!("{} (parent span {})", printable(trace), printable(parent))
        }
        (trace, _) => or_dash(trace),
    };
    row(out, "trace_id", &trace);
    row(out, "response_id", &or_dash(&r.response_id));
    let status = r.status.map_or_else(|| "-".to_owned(), |s| s.to_string());
    let mut request = format!(
        "{} · model {} · status {status} · outcome {} · finish {}",
        r.endpoint,
        or_dash(&r.model),
        r.outcome,
        or_dash(&r.finish_reason),
    );
    if r.streamed {
        request.push_str(" · streamed");
    }
    row(out, "request", &request);
    row(out, "phases (ms)", &phases(r));
    let clocks = [
        ("TTFT", r.ttft_ms),
        ("TTFO", r.ttfo_ms),
        ("TPOT", r.tpot_ms),
        ("E2E", r.e2e_ms),
    ];
    row(out, "clocks (ms)", &joined(&clocks));
    row(out, "tokens", &tokens(r));
    match &r.token_arrivals {
        Some(a) => {
            row(out, "arrivals", &format!("|{}|", sparkline(&a.events)));
            row(out, "", &arrivals_legend(a, r.itl_dropped));
        }
        None => row(out, "arrivals", "-"),
    }
    row(out, "server (ms)", &server(r));
}

/// `t0` as RFC 3339 with milliseconds.
pub(super) fn started(r: &Record) -> String {
    // Rounded to the microsecond: the record's f64 milliseconds are a hair
    // off (…250 ms is stored as …249.9999), and the time shown is cut to ms.
    let micros = (r.start_unix_ms.max(0.0) * 1e3).round() as u64;
    let started = UNIX_EPOCH + Duration::from_micros(micros);
    humantime::format_rfc3339_millis(started).to_string()
}

/// Every phase of the request, in order, `-` where not observed.
fn phases(r: &Record) -> String {
    let named: Vec<(&str, Option<f64>)> = Phase::ALL
        .iter()
        .map(|p| (phase_title(*p), r.phases_ms.get(p.as_str()).copied()))
        .collect();
    joined(&named)
}

fn phase_title(p: Phase) -> &'static str {
    match p {
        Phase::UpstreamConnect => "connect",
        Phase::RequestUpload => "upload",
        Phase::TimeToResponseHeaders => "to headers",
        Phase::HeadersToFirstToken => "headers→first token",
        Phase::Reasoning => "reasoning",
        Phase::Decode => "decode",
        Phase::Tail => "tail",
        Phase::DeliveryStall => "delivery stall",
    }
}

/// `name value | name value`, ms with two decimals, `-` when absent.
fn joined(figures: &[(&str, Option<f64>)]) -> String {
    figures
        .iter()
        .map(|(name, v)| match v {
            Some(v) => format!("{name} {v:.2}"),
            None => format!("{name} -"),
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

fn tokens(r: &Record) -> String {
    let t = &r.tokens;
    let source = |s: &Option<String>| s.as_deref().unwrap_or("-").to_owned();
    let count = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
    let mut parts = vec![
        format!("output {} ({})", t.output, source(&t.output_source)),
        format!(
            "reasoning {} ({})",
            t.reasoning,
            source(&t.reasoning_source)
        ),
        format!("input {} ({})", count(t.input), source(&t.input_source)),
    ];
    if let Some(cached) = t.cached_input {
        parts.push(format!("cached input {cached}"));
    }
    if t.hidden_reasoning > 0 {
        parts.push(format!("hidden reasoning {}", t.hidden_reasoning));
    }
    parts.push(format!("token-bearing events {}", t.events));
    parts.join(" · ")
}

/// The server's own phases, and beside them the proxy's nearest ones: its
/// queue and prefill happen inside the proxy's headers→first token (which
/// adds transit), its decode inside the proxy's decode.
fn server(r: &Record) -> String {
    let Some(s) = r.server_ms else {
        return "- (the server reported none)".to_owned();
    };
    let mut figures = vec![
        ("queue", s.queue),
        ("prefill", s.prefill),
        ("decode", s.decode),
    ];
    if s.load.is_some() {
        figures.push(("load", s.load));
    }
    let proxy = [
        (
            "headers→first token",
            r.phases_ms
                .get(Phase::HeadersToFirstToken.as_str())
                .copied(),
        ),
        ("decode", r.phases_ms.get(Phase::Decode.as_str()).copied()),
    ];
    format!("{}   beside proxy: {}", joined(&figures), joined(&proxy))
}

/// One character per bin: blank for none, else eight heights scaled to
/// the fullest bin (any non-empty bin shows at least `▁`).
pub(crate) fn sparkline(bins: &[u32]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let peak = bins.iter().copied().max().unwrap_or(0);
    bins.iter()
        .map(|&n| match n {
            0 => ' ',
            n => {
                let level = (u64::from(n) * 8).div_ceil(u64::from(peak.max(1))) as usize;
                BARS[level.clamp(1, 8) - 1]
            }
        })
        .collect()
}

fn arrivals_legend(a: &Arrivals, dropped: u64) -> String {
    let peak = a.events.iter().copied().max().unwrap_or(0);
    let mut legend = format!(
        "t0 → end in {} bins of {:.2} ms; {} token-bearing events, at most {peak} per bin",
        a.events.len(),
        a.bin_ms,
        a.total(),
    );
    if dropped > 0 {
        let _ = write!(legend, " ({dropped} later ones not placed)");
    }
    legend
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::measure::{
        dialect::{Dialect, Parsed, ServerTimings, Usage},
        timeline::{Outcome, RequestIds, Timeline},
    };

    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    /// Headers at 40 ms, reasoning at 100, answer tokens at 200..=500 every
    /// 100 ms, end at 640 ms; the server reported its queue and phases.
    fn record(request_id: &str, trace: Option<&str>) -> Record {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        t.started_at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        t.request.model = Some("m1".into());
        t.status = http::StatusCode::from_u16(200).ok();
        t.streamed = true;
        let mut headers = http::HeaderMap::new();
        headers.insert("x-request-id", request_id.parse().expect("value"));
        if let Some(trace) = trace {
            let tp = format!("00-{trace}-00f067aa0ba902b7-01");
            headers.insert("traceparent", tp.parse().expect("value"));
        }
        let names = [http::HeaderName::from_static("x-request-id")];
        t.ids = RequestIds::from_headers(&headers, &names);
        t.ids.response_id_seen("chatcmpl-77");
        t.response_head = Some(at(40));
        t.record(
            &Parsed {
                reasoning_bytes: 4,
                ..Parsed::default()
            },
            at(100),
        );
        for ms in [200, 300, 400, 500] {
            let answer = Parsed {
                output_bytes: 4,
                ..Parsed::default()
            };
            t.record(&answer, at(ms));
        }
        let last = Parsed {
            usage: Some(Usage {
                input: Some(12),
                output: Some(5),
                ..Usage::default()
            }),
            server: Some(ServerTimings {
                queue: Some(Duration::from_millis(7)),
                prefill: Some(Duration::from_millis(30)),
                decode: Some(Duration::from_millis(380)),
                load: None,
            }),
            ..Parsed::default()
        };
        t.record(&last, at(510));
        t.finish(Outcome::Ok, at(640));
        Record::from_timeline(&t, &[], &[])
    }

    #[test]
    fn selection_is_by_exact_request_id_or_trace_id_in_any_case() {
        let r = record("req-1", Some(TRACE));
        assert!(Select::RequestId("req-1".into()).matches(&r));
        assert!(!Select::RequestId("req-".into()).matches(&r));
        assert!(Select::TraceId(TRACE.to_uppercase()).matches(&r));
        assert!(!Select::TraceId("00f067aa0ba902b7".into()).matches(&r));
        assert!(!Select::TraceId(TRACE.into()).matches(&record("req-2", None)));
    }

    /// A model name a client chose, and a response id a server chose, are
    /// shown with their control characters escaped: a record cannot clear
    /// the operator's terminal, retitle it, or forge a line of the report.
    #[test]
    fn control_characters_in_chosen_values_are_escaped() {
        let mut r = record("req-1", None);
        r.model = Some("\u{1b}]0;PWNED\u{7}\u{1b}[2Jm\r\n== all: 999 requests ==".into());
        r.response_id = Some("id\u{9b}x".into());
        let text = text(&[&r]);
        assert!(
            !text.contains(['\u{1b}', '\u{7}', '\r', '\u{9b}']),
            "{text:?}"
        );
        assert!(!text.contains("\n== all"), "{text}");
        assert!(
            text.contains(r"model \u{1b}]0;PWNED\u{7}\u{1b}[2Jm\r\n== all: 999"),
            "{text}"
        );
        assert_eq!(printable("plain é \"q\" 'a' \\"), "plain é \"q\" 'a' \\");
        assert_eq!(printable("a\u{202e}kcatta"), r"a\u{202e}kcatta");
    }

    #[test]
    fn one_request_shows_its_ids_phases_arrivals_tokens_and_server_phases() {
        let r = record("req-1", Some(TRACE));
        let text = text(&[&r]);
        let line = |title: &str| {
            text.lines()
                .find(|l| l.starts_with(&format!("{title} ")))
                .unwrap_or_else(|| panic!("no {title} line in\n{text}"))
                .to_owned()
        };
        assert!(text.starts_with("== request 1 of 1 ==\n"), "{text}");
        assert_eq!(line("started"), "started       2023-11-14T22:13:20.250Z");
        assert_eq!(line("request_id"), "request_id    req-1");
        assert_eq!(
            line("trace_id"),
            format!("trace_id      {TRACE} (parent span 00f067aa0ba902b7)")
        );
        assert_eq!(line("response_id"), "response_id   chatcmpl-77");
        assert_eq!(
            line("request"),
            "request       openai_chat · model m1 · status 200 · outcome ok · finish - · streamed"
        );
        assert_eq!(
            line("phases"),
            "phases (ms)   connect - | upload - | to headers 40.00 | headers→first token 60.00 \
             | reasoning 100.00 | decode 400.00 | tail 140.00 | delivery stall 0.00"
        );
        assert_eq!(
            line("clocks"),
            "clocks (ms)   TTFT 100.00 | TTFO 200.00 | TPOT 100.00 | E2E 640.00"
        );
        assert_eq!(
            line("tokens"),
            "tokens        output 5 (usage) · reasoning 1 (estimated) · input 12 (usage) \
             · token-bearing events 5"
        );
        // 64 bins of 10 ms: one event each in bins 10, 20, 30, 40 and 50.
        let mut bins = [' '; 64];
        for i in [10, 20, 30, 40, 50] {
            bins[i] = '█';
        }
        let bins: String = bins.iter().collect();
        assert_eq!(line("arrivals"), format!("arrivals      |{bins}|"));
        assert!(text.contains(
            "t0 → end in 64 bins of 10.00 ms; 5 token-bearing events, at most 1 per bin"
        ));
        assert_eq!(
            line("server"),
            "server (ms)   queue 7.00 | prefill 30.00 | decode 380.00   \
             beside proxy: headers→first token 60.00 | decode 400.00"
        );
    }

    #[test]
    fn a_request_without_ids_or_tokens_shows_dashes() {
        let t0 = Instant::now();
        let mut t = Timeline::new(t0, Dialect::Unknown);
        t.finish(Outcome::UpstreamError, t0 + Duration::from_millis(3));
        let r = Record::from_timeline(&t, &[], &[]);
        let text = text(&[&r]);
        for want in [
            "request_id    -\n",
            "trace_id      -\n",
            "response_id   -\n",
            "arrivals      -\n",
            "server (ms)   - (the server reported none)\n",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
    }

    #[test]
    fn sparklines_scale_to_the_fullest_bin() {
        assert_eq!(sparkline(&[0, 1, 2, 4, 8, 0]), " ▁▂▄█ ");
        assert_eq!(sparkline(&[1, 100]), "▁█");
        assert_eq!(sparkline(&[0, 0]), "  ");
    }
}
