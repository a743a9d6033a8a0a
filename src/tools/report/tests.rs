//! Unit tests of report: SLO parsing, the grid, formats, malformed lines
//! (the percentiles: `tools::stats`).

use super::*;
use crate::config::range_label;

#[test]
fn slo_specs_parse_units_and_name_bad_objectives() {
    let s = SloSpec::parse(" ttft:0.5s  tpot:50 e2e:2500000us").expect("valid");
    assert_eq!(s.name, "ttft:0.5s tpot:50 e2e:2500000us");
    let limits: Vec<(&str, f64)> = s.limits.iter().map(|(o, l)| (o.as_str(), *l)).collect();
    assert_eq!(limits, [("ttft", 500.0), ("tpot", 50.0), ("e2e", 2500.0)]);
    // `ttft:0` too: no request meets it (the config refuses it as well).
    for bad in [
        "ttft",
        "latency:5ms",
        "ttft:-1ms",
        "ttft:0",
        "e2e:0s",
        "ttft:fast",
        "",
    ] {
        match SloSpec::parse(bad) {
            Err(ReportError::Slo { .. }) => {}
            other => panic!("{bad:?} gave {other:?}"),
        }
    }
    let e = SloSpec::parse("ttft:500ms tpot:x")
        .map(|_| ())
        .expect_err("bad");
    assert!(e.to_string().starts_with("--slo `tpot:x`: "), "{e}");
}

#[test]
fn range_labels_are_the_workload_ranges() {
    let b = crate::config::DEFAULT_RANGES;
    let labels: Vec<String> = [0, 127, 128, 511, 2048, 32767, 32768, 1 << 40]
        .into_iter()
        .map(|v| range_label(&b, v))
        .collect();
    assert_eq!(
        labels,
        [
            "0-127",
            "0-127",
            "128-511",
            "128-511",
            "2048-8191",
            "8192-32767",
            "32768+",
            "32768+"
        ]
    );
}

#[test]
fn formats_and_groupings_parse() {
    assert_eq!("csv".parse::<Format>(), Ok(Format::Csv));
    assert_eq!("endpoint".parse::<GroupBy>(), Ok(GroupBy::Endpoint));
    assert!("xml".parse::<Format>().is_err());
}

#[test]
fn malformed_lines_are_skipped_and_reported() {
    let path = std::env::temp_dir().join(format!(
        "tokenclock-report-malformed-{}.jsonl",
        std::process::id()
    ));
    std::fs::write(&path, "{\"not\": \"a record\"}\n\nnot json\n").expect("write");
    let (mut records, mut warnings) = (Vec::new(), Vec::new());
    read(&path, &mut records, &mut warnings).expect("readable");
    assert!(records.is_empty());
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(warnings[1].contains(":3: malformed record"), "{warnings:?}");
    let _ = std::fs::remove_file(&path);
}

/// A record's line, as the writer writes it, of an `ok` chat whose caller
/// sent request id `id`.
fn record(id: &str) -> String {
    use crate::measure::{
        dialect::Dialect,
        timeline::{Outcome, Timeline},
    };
    let t0 = tokio::time::Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.ids.request_id = Some(id.to_owned());
    t.finish(Outcome::Ok, t0 + std::time::Duration::from_millis(9));
    serde_json::to_string(&Record::from_timeline(&t, &[], &[])).expect("json")
}

#[test]
fn selecting_prints_only_the_matching_records_and_no_match_is_an_error() {
    let path = std::env::temp_dir().join(format!(
        "tokenclock-report-select-{}.jsonl",
        std::process::id()
    ));
    std::fs::write(&path, format!("{}\n{}\n", record("a-1"), record("b-2"))).expect("write");
    let args = |id: &str, format| ReportArgs {
        files: vec![path.clone()],
        format,
        select: Some(Select::RequestId(id.to_owned())),
        ..ReportArgs::default()
    };
    let text = run(&args("b-2", Format::Text)).expect("found").stdout;
    assert!(text.contains("request_id    b-2\n"), "{text}");
    assert!(!text.contains("a-1"), "{text}");
    let json = run(&args("a-1", Format::Json)).expect("found").stdout;
    let lines: Vec<Record> = json
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record per line"))
        .collect();
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0].request_id.as_deref(), Some("a-1"));
    match run(&args("c-3", Format::Text)) {
        Err(e @ ReportError::NoMatch { .. }) => {
            assert_eq!(
                e.to_string(),
                "no record with request_id `c-3` in 2 records"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        run(&args("a-1", Format::Csv)),
        Err(ReportError::SelectCsv)
    ));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn missed_lists_the_requests_over_an_objective_worst_first_with_their_ids() {
    use std::time::Duration;

    use crate::measure::{
        dialect::Dialect,
        timeline::{Outcome, Timeline},
    };
    let record = |id: &str, ttft_ms: Option<u64>, outcome| {
        let t0 = tokio::time::Instant::now();
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        t.ids.request_id = Some(id.to_owned());
        t.first_token = ttft_ms.map(|ms| t0 + Duration::from_millis(ms));
        t.finish(outcome, t0 + Duration::from_millis(9000));
        serde_json::to_string(&Record::from_timeline(&t, &[], &[])).expect("json")
    };
    let path = std::env::temp_dir().join(format!(
        "tokenclock-report-missed-{}.jsonl",
        std::process::id()
    ));
    let lines = [
        record("fast", Some(100), Outcome::Ok),
        record("slow", Some(2500), Outcome::Ok),
        record("failed", None, Outcome::UpstreamError),
        record("slowest", Some(4000), Outcome::Ok),
    ];
    std::fs::write(&path, lines.join("\n")).expect("write");
    let args = |objectives: &str| ReportArgs {
        files: vec![path.clone()],
        select: Some(Select::Missed(SloSpec::parse(objectives).expect("spec"))),
        ..ReportArgs::default()
    };
    let text = run(&args("ttft:2s")).expect("misses").stdout;
    let ids: Vec<&str> = text
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().nth(6))
        .collect();
    assert_eq!(ids, ["slowest", "slow", "failed"], "{text}");
    assert!(
        text.starts_with("3 of these records missed `ttft:2s`"),
        "{text}"
    );
    // The JSON lines in the same order (they were in the files' order).
    let json = run(&ReportArgs {
        format: Format::Json,
        ..args("ttft:2s")
    })
    .expect("misses")
    .stdout;
    let ids: Vec<String> = json
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .filter_map(|r| r.request_id)
        .collect();
    assert_eq!(ids, ["slowest", "slow", "failed"], "{json}");
    let text = run(&args("ttft:5s")).expect("the failure misses").stdout;
    assert!(text.contains(" failed "), "{text}");
    assert!(!text.contains(" slow "), "{text}");
    std::fs::write(&path, lines[..2].join("\n")).expect("write");
    match run(&args("ttft:3s")) {
        Err(e @ ReportError::NoMatch { .. }) => {
            assert_eq!(
                e.to_string(),
                "no record with a miss of `ttft:3s` in 2 records"
            );
        }
        other => panic!("{other:?}"),
    }
    let _ = std::fs::remove_file(&path);
}

/// A lookup finds an id longer than the 128 bytes the proxy keeps by the id
/// the caller sent, prints the records' lines as they were written (not
/// read and written again), and reads a file `logrotate` compressed.
#[test]
fn lookups_find_long_ids_print_lines_as_written_and_read_gzip() {
    use std::io::Write;

    let sent = "x".repeat(156);
    // As written by another version: spacing serde would not write.
    let long = record(&sent[..128]).replacen('{', "{ ", 1);
    let text = format!("{}\n{long}\n", record("b-2"));
    let dir = std::env::temp_dir();
    let plain = dir.join(format!(
        "tokenclock-report-long-{}.jsonl",
        std::process::id()
    ));
    let gz = dir.join(format!(
        "tokenclock-report-long-{}.jsonl.1.gz",
        std::process::id()
    ));
    std::fs::write(&plain, &text).expect("write");
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(text.as_bytes()).expect("compress");
    std::fs::write(&gz, encoder.finish().expect("compressed")).expect("write");
    for path in [&plain, &gz] {
        let args = |format| ReportArgs {
            files: vec![path.clone()],
            format,
            select: Some(Select::RequestId(sent.clone())),
            ..ReportArgs::default()
        };
        let json = run(&args(Format::Json)).expect("found").stdout;
        assert_eq!(json, format!("{long}\n"), "{}", path.display());
        let summary = run(&ReportArgs {
            files: vec![path.clone()],
            ..ReportArgs::default()
        })
        .expect("summary");
        assert!(summary.warnings.is_empty(), "{:?}", summary.warnings);
        assert!(summary.stdout.contains("2 requests"), "{}", summary.stdout);
    }
    let _ = std::fs::remove_file(&plain);
    let _ = std::fs::remove_file(&gz);
}

/// The input and output token figures and the map count a request as the
/// metrics' token histograms do: ended `ok`, its response read.
#[test]
fn token_sizes_count_only_requests_that_ended_ok_and_were_read() {
    use crate::measure::{
        dialect::Dialect,
        timeline::{Outcome, Timeline},
    };
    let record = |outcome: &str, read: bool| {
        let t0 = tokio::time::Instant::now();
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        t.finish(Outcome::Ok, t0 + std::time::Duration::from_millis(9));
        let mut r = Record::from_timeline(&t, &[], &[]);
        r.outcome = outcome.to_owned();
        r.tokens.input = Some(300);
        r.tokens.output = if read { 40 } else { 0 };
        r.tokens.output_source = read.then(|| "events".to_owned());
        r
    };
    let records = [
        record("ok", true),
        record("http_error", true),
        record("ok", false),
        record("upstream_error", false),
    ];
    let refs: Vec<&Record> = records.iter().collect();
    let f = Figures::of("all", &refs, &[]);
    let count = |metric| {
        f.metrics
            .iter()
            .find(|(m, _)| *m == metric)
            .and_then(|(_, d)| d.as_ref())
            .map_or(0, |d| d.count)
    };
    assert_eq!(count(Metric::InputTokens), 1);
    assert_eq!(count(Metric::OutputTokens), 1);
    let mapped: u64 = f.grid.rows.iter().flat_map(|(_, c)| c).sum();
    assert_eq!(mapped, 1);
    assert_eq!(f.requests, 4);
}
