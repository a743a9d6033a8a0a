//! Unit tests of records: every figure of a timeline lands in its field.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::{
    measure::dialect::{Dialect, ParseError, Parsed, Usage},
    measure::slo::Limits,
    measure::timeline::Outcome,
};

fn ms_(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Reasoning at 100 ms, output every 90 ms with 3 tokens per event
/// (exact via `tokens`), head at 50 ms, end at 1000 ms. Shared with the
/// span tests of `export::otel`.
pub(crate) fn timeline() -> Timeline {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Anthropic);
    t.started_at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
    t.response_head = Some(t0 + ms_(50));
    t.labels = vec![Some("acme".into()), None];
    let thinking = Parsed {
        reasoning_bytes: 8,
        tokens: Some(3),
        ..Parsed::default()
    };
    t.record(&thinking, t0 + ms_(100));
    let answer = Parsed {
        output_bytes: 12,
        tokens: Some(3),
        ..Parsed::default()
    };
    for i in 1..4 {
        t.record(&answer, t0 + ms_(100 + 90 * i));
    }
    let usage = Parsed {
        usage: Some(Usage {
            input: Some(42),
            cached_input: Some(10),
            ..Usage::default()
        }),
        ..Parsed::default()
    };
    t.record(&usage, t0 + ms_(400));
    t.parse_error(ParseError::Json);
    t.parse_error(ParseError::Json);
    t.bytes_in = 300;
    t.bytes_out = 2000;
    t.finish(Outcome::Ok, t0 + ms_(1000));
    t
}

#[test]
fn every_figure_lands_in_its_field() {
    let slo = Slo {
        name: "fast".into(),
        models: vec![],
        endpoints: vec![],
        limits: Limits {
            ttfo: Some(ms_(150)),
            ..Limits::default()
        },
    };
    let names = ["tenant".to_owned(), "team".to_owned()];
    let r = Record::from_timeline(&timeline(), &[slo], &names);
    assert_eq!(r.start_unix_ms, 1_700_000_000_123.0);
    assert_eq!(
        (r.endpoint.as_str(), r.outcome.as_str()),
        ("anthropic", "ok")
    );
    assert_eq!(
        (r.ttft_ms, r.ttfo_ms, r.ttst_ms),
        (Some(100.0), Some(190.0), Some(190.0))
    );
    assert_eq!((r.to_last_token_ms, r.e2e_ms), (Some(370.0), Some(1000.0)));
    // 12 tokens, first to last 270 ms: 270 / 11.
    assert_eq!(r.tpot_ms, Some(ms(ms_(270) / 11)));
    assert_eq!(r.itl_ms, vec![(30.0, 9)]);
    let gaps = r.inter_event_ms.expect("gaps");
    assert_eq!(
        (gaps.count, gaps.min, gaps.mean, gaps.max),
        (3, 90.0, 90.0, 90.0)
    );
    assert_eq!(r.phases_ms.get("time_to_response_headers"), Some(&50.0));
    assert_eq!(r.phases_ms.get("reasoning"), Some(&90.0));
    assert_eq!(r.phases_ms.get("tail"), Some(&630.0));
    assert_eq!(r.phases_ms.get("request_upload"), None);
    assert_eq!(r.tokens.input, Some(42));
    assert_eq!(r.tokens.input_source.as_deref(), Some("usage"));
    assert_eq!(r.tokens.cached_input, Some(10));
    assert_eq!(
        (r.tokens.output, r.tokens.reasoning, r.tokens.events),
        (12, 3, 4)
    );
    assert_eq!(r.tokens.output_source.as_deref(), Some("per_event"));
    assert_eq!(r.server_ms, None);
    let violated = vec!["ttfo".to_owned()];
    assert_eq!(
        r.slo,
        vec![SloResult {
            name: "fast".into(),
            met: false,
            violated
        }]
    );
    assert_eq!(r.labels.len(), 1);
    assert_eq!(r.labels.get("tenant").map(String::as_str), Some("acme"));
    assert_eq!(r.parse_errors.get("invalid_json"), Some(&2));
    assert_eq!((r.bytes_in, r.bytes_out), (300, 2000));
}

#[test]
fn itl_values_are_merged_and_sorted() {
    let pairs = [
        (ms_(40), 1),
        (ms_(10), 2),
        (ms_(40), 3),
        (Duration::from_micros(10_500), 1),
    ];
    assert_eq!(
        merged(pairs.into_iter()),
        vec![(10.0, 2), (10.5, 1), (40.0, 4)]
    );
}

#[test]
fn a_request_without_tokens_has_nulls_not_zeros() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Unknown);
    t.finish(Outcome::UpstreamError, t0 + ms_(5));
    let r = Record::from_timeline(&t, &[], &[]);
    assert_eq!((r.ttft_ms, r.tpot_ms, r.inter_event_ms), (None, None, None));
    assert!(r.itl_ms.is_empty());
    assert_eq!(r.e2e_ms, Some(5.0));
    assert_eq!(r.tokens.output_source, None);
    let json = serde_json::to_value(&r).expect("json");
    assert!(json["ttft_ms"].is_null());
    assert_eq!(json["outcome"], "upstream_error");
}

#[test]
fn the_documented_records_defaults() {
    let text = "upstream = \"http://127.0.0.1:8000\"\n[records]\npath = \"records.jsonl\"\n";
    let config = crate::config::File::parse(text, "test.toml")
        .and_then(crate::config::File::validate)
        .expect("valid");
    let r = config.export.records.expect("records enabled");
    assert_eq!(r.path, std::path::PathBuf::from("records.jsonl"));
    assert_eq!((r.max_bytes, r.keep, r.queue), (100 * 1024 * 1024, 5, 4096));
}

#[test]
fn the_finish_reason_is_recorded_as_sent_and_null_without_one() {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::Anthropic);
    let r = Record::from_timeline(&t, &[], &[]);
    let json = serde_json::to_value(&r).expect("json");
    assert!(json["finish_reason"].is_null(), "{json}");
    let delta = Parsed {
        finish: crate::measure::dialect::Finish::new(Some("max_tokens".into())),
        ..Parsed::default()
    };
    t.record(&delta, t0 + ms_(5));
    t.finish(Outcome::Ok, t0 + ms_(6));
    let json = serde_json::to_value(Record::from_timeline(&t, &[], &[])).expect("json");
    assert_eq!(json["finish_reason"], "max_tokens");
    // Records written before the field existed still read.
    let mut old = json;
    old.as_object_mut().expect("object").remove("finish_reason");
    let back: Record = serde_json::from_value(old).expect("an old record");
    assert_eq!(back.finish_reason, None);
}

#[test]
fn the_ids_land_in_their_fields_and_old_records_still_read() {
    let mut t = timeline();
    let mut headers = http::HeaderMap::new();
    headers.insert("x-request-id", "req-42".parse().expect("value"));
    headers.insert(
        "traceparent",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .expect("value"),
    );
    let names = [http::HeaderName::from_static("x-request-id")];
    t.ids = crate::measure::timeline::RequestIds::from_headers(&headers, &names);
    t.ids.response_id_seen("msg_01XFD");
    let json = serde_json::to_value(Record::from_timeline(&t, &[], &[])).expect("json");
    assert_eq!(json["request_id"], "req-42");
    assert_eq!(json["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(json["parent_span_id"], "00f067aa0ba902b7");
    assert_eq!(json["response_id"], "msg_01XFD");
    // Reasoning at 100 ms, output at 190, 280, 370; end at 1000 ms.
    assert_eq!(json["token_arrivals"]["bin_ms"], 1000.0 / 64.0);
    let bins = json["token_arrivals"]["events"].as_array().expect("bins");
    let at = |ms: f64| (ms * 64.0 / 1000.0) as usize;
    for ms in [100.0, 190.0, 280.0, 370.0] {
        assert_eq!(bins[at(ms)], 1, "{ms} ms: {bins:?}");
    }
    assert_eq!(bins.iter().filter_map(|b| b.as_u64()).sum::<u64>(), 4);

    // Without them: null, not absent and not empty.
    let json = serde_json::to_value(Record::from_timeline(&timeline(), &[], &[])).expect("json");
    for key in ["request_id", "trace_id", "parent_span_id", "response_id"] {
        assert!(json[key].is_null(), "{key}: {json}");
    }
    // Records written before these fields existed still read.
    let mut old = json;
    let object = old.as_object_mut().expect("object");
    for key in [
        "request_id",
        "trace_id",
        "parent_span_id",
        "response_id",
        "token_arrivals",
    ] {
        object.remove(key);
    }
    let back: Record = serde_json::from_value(old).expect("an old record");
    assert_eq!((back.request_id, back.token_arrivals), (None, None));
}
