use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::{
    config::File,
    measure::dialect::Parsed,
    measure::timeline::{Milestones, Outcome, Timeline},
};

fn metrics_config(extra: &str) -> crate::config::ExportSettings {
    let text = format!("upstream = \"http://127.0.0.1:1\"\n{extra}");
    let config = File::parse(&text, "t").and_then(File::validate);
    config.unwrap_or_else(|e| panic!("{e}")).export
}

fn metrics(extra: &str) -> Metrics {
    Metrics::new(&metrics_config(extra)).unwrap_or_else(|e| panic!("{e}"))
}

fn request(model: &str, labels: Vec<Option<String>>, ttft_ms: u64) -> Timeline {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.request.model = Some(model.to_owned());
    t.labels = labels;
    let token = Parsed {
        output_bytes: 2,
        ..Parsed::default()
    };
    for i in 0..3 {
        t.record(&token, t0 + Duration::from_millis(ttft_ms + 10 * i));
    }
    t.finish(Outcome::Ok, t0 + Duration::from_millis(ttft_ms + 30));
    t
}

fn scrape(m: &Metrics) -> String {
    String::from_utf8(m.encode()).unwrap_or_default()
}

/// `_count` lines of the TTFT histogram.
fn ttft_counts(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with("tokenclock_time_to_first_token_seconds_count"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn label_tuples_with_equal_concatenations_stay_distinct_series() {
    let m = metrics("[[labels]]\nname = \"tenant\"\nheader = \"x-tenant\"\n");
    m.finished(&request("ab", vec![Some("c".into())], 100));
    m.finished(&request("a", vec![Some("bc".into())], 100));
    let counts = ttft_counts(&scrape(&m));
    assert_eq!(counts.len(), 2, "{counts:#?}");
    assert!(
        counts.iter().all(|l| l.ends_with(" 1")),
        "no series got both: {counts:#?}"
    );
    assert!(counts
        .iter()
        .any(|l| l.contains("model=\"ab\"") && l.contains("tenant=\"c\"")));
}

#[test]
fn model_names_that_end_like_endpoints_stay_distinct() {
    let m = metrics("");
    for model in ["m", "mopenai_chat", "openai_chat", "m-", "chat"] {
        m.finished(&request(model, vec![], 100));
    }
    let counts = ttft_counts(&scrape(&m));
    assert_eq!(counts.len(), 5, "{counts:#?}");
    assert!(counts.iter().all(|l| l.ends_with(" 1")));
}

#[test]
fn distinct_models_past_the_cap_become_other_and_the_scrape_stays_bounded() {
    let m = metrics("max_models = 4");
    for i in 0..1_000 {
        m.finished(&request(&format!("model-{i}"), vec![], 100));
    }
    let before = scrape(&m);
    for i in 1_000..100_000 {
        m.finished(&request(&format!("model-{i}"), vec![], 100));
    }
    let text = scrape(&m);
    let counts = ttft_counts(&text);
    assert_eq!(counts.len(), 5, "4 models and other: {counts:#?}");
    assert!(counts
        .iter()
        .any(|l| l.contains("model=\"other\"") && l.ends_with(" 99996")));
    // Same series; only numbers grew a few digits.
    assert_eq!(text.lines().count(), before.lines().count());
    assert!(text.len() < before.len() + before.len() / 100);
}

/// The sample of the first line starting with `prefix` (0 when absent).
fn value(text: &str, prefix: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// A 429 whose body was not read.
fn refused(t0: Instant) -> Timeline {
    let mut refused = Timeline::new(t0, Dialect::OpenAiChat);
    refused.status = Some(http::StatusCode::TOO_MANY_REQUESTS);
    refused.finish(Outcome::HttpError, t0 + Duration::from_millis(5));
    refused
}

#[test]
fn only_ok_requests_that_were_read_have_a_size() {
    let m = metrics("");
    let t0 = Instant::now();
    // A 4xx whose body was not read, and a stream that failed with an
    // in-band error after 3 tokens: counted, spent, but no size.
    m.finished(&refused(t0));
    let mut failed = request("m", vec![], 100);
    failed.outcome = Outcome::UpstreamError;
    m.finished(&failed);
    let text = scrape(&m);
    assert_eq!(value(&text, "tokenclock_request_output_tokens_count"), 0.0);
    assert_eq!(value(&text, "tokenclock_request_input_tokens_count"), 0.0);
    assert_eq!(value(&text, "tokenclock_workload_requests_total"), 0.0);
    assert_eq!(
        value(
            &text,
            "tokenclock_output_tokens_total{endpoint=\"openai_chat\",kind=\"output\""
        ),
        3.0,
        "spent tokens are still counted"
    );
    // An ok stream that generated nothing is a size: 0.
    let mut empty = Timeline::new(t0, Dialect::OpenAiChat);
    empty.record(&Parsed::default(), t0 + Duration::from_millis(5));
    empty.finish(Outcome::Ok, t0 + Duration::from_millis(6));
    m.finished(&empty);
    let text = scrape(&m);
    assert_eq!(value(&text, "tokenclock_request_output_tokens_count"), 1.0);
    assert_eq!(value(&text, "tokenclock_request_output_tokens_sum"), 0.0);
    assert_eq!(value(&text, "tokenclock_workload_requests_total"), 1.0);
}

#[test]
fn buckets_place_each_observation() {
    let m = metrics("");
    for _ in 0..20 {
        m.finished(&request("m", vec![], 450));
    }
    let text = scrape(&m);
    let bucket = |le: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("tokenclock_time_to_first_token_seconds_bucket")
                    && l.contains(&format!("le=\"{le}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned())
    };
    assert_eq!(bucket("0.4").as_deref(), Some("0"));
    assert_eq!(bucket("0.5").as_deref(), Some("20"));
    assert_eq!(bucket("+Inf").as_deref(), Some("20"));
}

#[test]
fn goodput_counts_met_and_missed_per_slo() {
    let m = metrics("[[slo]]\nname = \"interactive\"\nttft = \"500ms\"\n");
    for ttft in [100, 200, 300, 400, 450, 480, 499, 600, 700, 800] {
        m.finished(&request("m", vec![], ttft));
    }
    let text = scrape(&m);
    let line = |result: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("tokenclock_slo_requests_total")
                    && l.contains(&format!("result=\"{result}\""))
            })
            .map(|l| l.rsplit(' ').next().unwrap_or_default().to_owned())
    };
    assert_eq!(line("met").as_deref(), Some("7"));
    assert_eq!(line("missed").as_deref(), Some("3"));
    assert!(text.contains("tokenclock_slo_violations_total{endpoint=\"openai_chat\",model=\"m\",objective=\"ttft\",slo=\"interactive\"} 3")
        || text.lines().any(|l| l.starts_with("tokenclock_slo_violations_total") && l.contains("objective=\"ttft\"") && l.ends_with(" 3")));
}

mod properties {
    use std::collections::HashMap;

    use proptest::{prelude::*, test_runner::FileFailurePersistence};

    use super::*;

    proptest! {
        // Seeds of past failures live beside this file, not in a top-level
    // `proptest-regressions/`.
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::with_cases(64)
    })]

        /// Short values over a tiny alphabet make equal concatenations common.
        #[test]
        fn every_admitted_tuple_is_its_own_series(
            tuples in proptest::collection::vec(("[ab]{1,3}", "[ab]{1,3}"), 1..30)
        ) {
            let m = metrics("max_models = 1000\n[[labels]]\nname = \"tenant\"\nheader = \"x-tenant\"\n");
            let space = LabelSpace::new(2);
            let caps = LabelCaps { max_values: 1000, allowlist: None, max_value_bytes: 128 };
            let mut expected: HashMap<Vec<String>, u64> = HashMap::new();
            for (model, tenant) in &tuples {
                m.finished(&request(model, vec![Some(tenant.clone())], 100));
                *expected.entry(space.admit(&caps, Some(model), &[Some(tenant.clone())]).to_vec()).or_default() += 1;
            }
            let text = scrape(&m);
            let counts = ttft_counts(&text);
            prop_assert_eq!(counts.len(), expected.len(), "{:#?}", counts);
            for (tuple, n) in expected {
                let line = format!("model=\"{}\",tenant=\"{}\"}} {n}", tuple[0], tuple[1]);
                prop_assert!(counts.iter().any(|l| l.ends_with(&line)), "{} not in {:#?}", line, counts);
            }
        }
    }
}

/// `(TTFT _count, headers_to_first_token _count)` for model `m`.
fn first_token_counts(m: &Metrics) -> (Option<String>, Option<String>) {
    let text = scrape(m);
    let line = |prefix: &str, extra: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix) && l.contains("model=\"m\"") && l.contains(extra))
            .and_then(|l| l.rsplit(' ').next())
            .map(str::to_owned)
    };
    (
        line("tokenclock_time_to_first_token_seconds_count", ""),
        line(
            "tokenclock_phase_seconds_count",
            "phase=\"headers_to_first_token\"",
        ),
    )
}

#[test]
fn a_delivered_milestone_is_observed_once_not_again_at_the_end() {
    let m = metrics("");
    let mut t = request("m", vec![], 100);
    t.response_head = Some(t.start);
    m.progressed(&t, Milestones::default().with(Milestone::FirstToken));
    assert_eq!(
        first_token_counts(&m),
        (Some("1".into()), Some("1".into())),
        "observed when delivered"
    );
    t.delivered = t.delivered.with(Milestone::FirstToken);
    m.finished(&t);
    assert_eq!(
        first_token_counts(&m),
        (Some("1".into()), Some("1".into())),
        "not twice"
    );
    let text = scrape(&m);
    assert!(text.contains("tokenclock_time_to_first_output_token_seconds_count{endpoint=\"openai_chat\",model=\"m\"} 1"), "the undelivered rest at the end: {text}");
    // Undelivered, the end observes it.
    t.delivered = Milestones::default();
    m.finished(&t);
    assert_eq!(first_token_counts(&m), (Some("2".into()), Some("2".into())));
}

#[test]
fn disabled_families_and_phases_stay_out_when_delivered_early() {
    let m = metrics("[metrics]\ndisable = [\"time_to_first_token_seconds\", \"phase_seconds:headers_to_first_token\"]");
    let mut t = request("m", vec![], 100);
    t.response_head = Some(t.start);
    m.progressed(&t, Milestones::default().with(Milestone::FirstToken));
    m.progressed(&t, Milestones::default().with(Milestone::ResponseHeaders));
    let text = scrape(&m);
    assert!(!text.contains("time_to_first_token_seconds"), "{text}");
    assert!(!text.contains("headers_to_first_token"), "{text}");
    assert!(
        text.contains("phase=\"time_to_response_headers\""),
        "{text}"
    );
}

#[test]
fn the_stage_gauge_has_every_series_from_the_start_and_counts_moves() {
    let m = metrics("");
    let gauge = |text: &str, phase: &str| {
        let line =
            format!("tokenclock_requests_in_phase{{endpoint=\"anthropic\",phase=\"{phase}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .map(str::to_owned)
    };
    let text = scrape(&m);
    let series = text
        .lines()
        .filter(|l| l.starts_with("tokenclock_requests_in_phase{"))
        .count();
    assert_eq!(series, Dialect::ALL.len() * Stage::ALL.len());
    m.entered(Dialect::Anthropic, Stage::Upload);
    m.entered(Dialect::Anthropic, Stage::Reasoning);
    m.left(Dialect::Anthropic, Stage::Upload);
    let text = scrape(&m);
    assert_eq!(gauge(&text, "upload").as_deref(), Some("0"));
    assert_eq!(gauge(&text, "reasoning").as_deref(), Some("1"));
}

/// Histograms are written apart from the registry's families; the scrape
/// still has every family once, in order of name (as the registry writes
/// them), each with its `# HELP` and `# TYPE` before its samples.
#[test]
fn the_scrape_has_each_family_once_in_order_of_name() {
    let m = metrics("");
    m.finished(&request("m", vec![], 100));
    let text = scrape(&m);
    let types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    let mut sorted = types.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(types, sorted, "sorted and unique");
    assert!(types.contains(&"tokenclock_time_to_first_token_seconds"));
    assert!(types.contains(&"tokenclock_requests_total"));
    // Every sample line belongs to the family whose header came last.
    let mut current = "";
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            current = rest.split(' ').next().unwrap_or("");
        } else if !line.starts_with('#') {
            assert!(line.starts_with(current), "{line} under {current}");
        }
    }
}

/// A request with no token events (refused by the server) makes no series
/// in the families it has nothing to observe in: no empty inter-event,
/// inter-token or tokens-per-event series, no TTFT.
#[test]
fn a_request_without_tokens_makes_no_empty_latency_series() {
    let m = metrics("");
    let t0 = Instant::now();
    m.finished(&refused(t0));
    let text = scrape(&m);
    for family in [
        "tokenclock_inter_event_latency_seconds",
        "tokenclock_inter_token_latency_seconds",
        "tokenclock_event_tokens",
        "tokenclock_time_per_output_token_seconds",
        "tokenclock_time_to_first_token_seconds",
    ] {
        assert!(!text.contains(family), "{family} in {text}");
    }
    assert_eq!(
        value(&text, "tokenclock_request_duration_seconds_count"),
        1.0
    );
    // One token event: tokens per event, but no gap and no inter-token
    // latency yet.
    let mut one = Timeline::new(t0, Dialect::OpenAiChat);
    let token = Parsed {
        output_bytes: 2,
        ..Parsed::default()
    };
    one.record(&token, t0 + Duration::from_millis(5));
    one.finish(Outcome::Ok, t0 + Duration::from_millis(6));
    m.finished(&one);
    let text = scrape(&m);
    assert_eq!(value(&text, "tokenclock_event_tokens_count"), 1.0);
    assert!(!text.contains("tokenclock_inter_event_latency_seconds"));
    assert!(!text.contains("tokenclock_inter_token_latency_seconds"));
}

/// `event_tokens` observes every token-bearing event, and its sum is the
/// tokens counted, when a usage total is spread over the events (before
/// 2026-12-07 the first event counted one token whatever the total: 3
/// events and 30 tokens gave a sum of 21).
#[test]
fn event_tokens_add_up_to_the_usage_total() {
    let m = metrics("");
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    let token = Parsed {
        output_bytes: 2,
        ..Parsed::default()
    };
    for i in 0..3 {
        t.record(&token, t0 + Duration::from_millis(5 + 5 * i));
    }
    let usage = Parsed {
        usage: Some(crate::measure::dialect::Usage {
            output: Some(30),
            ..Default::default()
        }),
        ..Parsed::default()
    };
    t.record(&usage, t0 + Duration::from_millis(20));
    t.finish(Outcome::Ok, t0 + Duration::from_millis(21));
    m.finished(&t);
    let text = scrape(&m);
    assert_eq!(value(&text, "tokenclock_event_tokens_count"), 3.0);
    assert_eq!(value(&text, "tokenclock_event_tokens_sum"), 30.0);
}

/// A series' values are its closed ones then the request's free ones, in
/// order, held inline or (past eight) not.
#[test]
fn a_series_tuple_is_the_closed_values_then_the_free_ones() {
    let free: Vec<String> = (0..6).map(|i| format!("f{i}")).collect();
    for n in 0..=free.len() {
        for closed in [&["a"][..], &["a", "b", "c"][..]] {
            let expected: Vec<&str> = closed
                .iter()
                .copied()
                .chain(free[..n].iter().map(String::as_str))
                .collect();
            assert_eq!(&*bundle::Tuple::new(closed, &free[..n]), &expected[..]);
        }
    }
}

/// A request's series come from the bundle of its endpoint and label
/// tuple, kept from one request to the next: each (endpoint, model) counts
/// only its own requests, a later request adds to the same series (also
/// after a reload), and a series is made only when first observed into.
#[test]
fn each_endpoint_and_tuple_keeps_its_own_series_across_requests() {
    let m = metrics("");
    let on = |dialect: Dialect, model: &str, outcome: Outcome| {
        let mut t = request(model, vec![], 10);
        t.dialect = dialect;
        t.outcome = outcome;
        t
    };
    let chat = Dialect::OpenAiChat;
    let completions = Dialect::OpenAiCompletions;
    m.finished(&on(chat, "a", Outcome::Ok));
    m.finished(&on(chat, "a", Outcome::Ok));
    m.finished(&on(chat, "b", Outcome::Ok));
    m.reconfigured(&metrics_config(""))
        .finished(&on(completions, "a", Outcome::Ok));
    m.finished(&on(chat, "a", Outcome::ClientCancelled));
    let text = scrape(&m);
    let count = |family: &str, labels: &str| {
        value(&text, &format!("tokenclock_{family}_count{{{labels}}} "))
    };
    let decode = |e: &str, model: &str| {
        count(
            "phase_seconds",
            &format!("endpoint=\"{e}\",model=\"{model}\",phase=\"decode\""),
        )
    };
    assert_eq!(decode("openai_chat", "a"), 3.0, "{text}");
    assert_eq!(decode("openai_chat", "b"), 1.0);
    assert_eq!(decode("openai_completions", "a"), 1.0);
    let ttft = |e: &str, model: &str| {
        count(
            "time_to_first_token_seconds",
            &format!("endpoint=\"{e}\",model=\"{model}\""),
        )
    };
    assert_eq!(ttft("openai_chat", "a"), 3.0);
    assert_eq!(ttft("openai_completions", "a"), 1.0);
    let duration = |outcome: &str| {
        count(
            "request_duration_seconds",
            &format!("endpoint=\"openai_chat\",model=\"a\",outcome=\"{outcome}\""),
        )
    };
    assert_eq!(duration("ok"), 2.0);
    assert_eq!(duration("client_cancelled"), 1.0);
    assert!(
        !text.contains("outcome=\"timeout\""),
        "no series for an outcome no request had"
    );
    assert!(
        !text.contains("model=\"b\",outcome=\"client_cancelled\""),
        "nor for one another tuple had"
    );
}

/// The in-flight gauge and the count-source counter, each series found
/// once and kept: every endpoint's gauge moves with its own requests, and
/// each source counts its own.
#[test]
fn in_flight_and_count_sources_count_per_endpoint_and_source() {
    let m = metrics("");
    let gauge = |text: &str, e: &str| {
        value(
            text,
            &format!("tokenclock_requests_in_flight{{endpoint=\"{e}\"}} "),
        )
    };
    m.started(Dialect::OpenAiChat);
    m.started(Dialect::OpenAiChat);
    m.started(Dialect::Anthropic);
    let text = scrape(&m);
    assert_eq!(gauge(&text, "openai_chat"), 2.0, "{text}");
    assert_eq!(gauge(&text, "anthropic"), 1.0);
    m.finished(&request("a", vec![], 10));
    let mut anthropic = request("a", vec![], 10);
    anthropic.dialect = Dialect::Anthropic;
    m.finished(&anthropic);
    m.started(Dialect::OpenAiChat);
    let text = scrape(&m);
    assert_eq!(gauge(&text, "openai_chat"), 2.0, "{text}");
    assert_eq!(gauge(&text, "anthropic"), 0.0);
    // A `/generate` request found to be SGLang's moves with its count.
    m.started(Dialect::Tgi);
    m.moved(Dialect::Tgi, Dialect::Sglang);
    let text = scrape(&m);
    assert_eq!(gauge(&text, "tgi"), 0.0, "{text}");
    assert_eq!(gauge(&text, "sglang"), 1.0);
    let mut sglang = request("a", vec![], 10);
    sglang.dialect = Dialect::Sglang;
    m.finished(&sglang);
    let text = scrape(&m);
    assert_eq!(gauge(&text, "sglang"), 0.0, "{text}");
    let sources = |text: &str, source: &str| {
        value(
            text,
            &format!("tokenclock_token_count_source_total{{source=\"{source}\"}} "),
        )
    };
    let counted = request("a", vec![], 10).tokens.generated_source;
    let source = counted.map(|s| s.as_str()).unwrap_or_default();
    assert_eq!(sources(&text, source), 3.0, "{text}");
}
