//! The record log end to end: the real writer on real files, read back by `report`.

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use prometheus::IntCounter;
use tokenclock::{
    config::Records,
    export::records::{Record, RecordLog, RecordWriter, DROPPED_HELP, DROPPED_NAME},
    measure::dialect::{Dialect, Parsed, Usage},
    measure::slo::{Limits, Slo},
    measure::timeline::{Outcome, Timeline, TimelineSink},
    tools::report::{self, Format, Metric, ReportArgs},
};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A fresh, unique directory under the system temp dir.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    let dir = std::env::temp_dir().join(format!(
        "tokenclock-records-{name}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

fn config(path: &Path, max_bytes: u64, keep: usize, queue: usize) -> Records {
    Records {
        path: path.to_owned(),
        max_bytes,
        keep,
        queue,
    }
}

fn interactive() -> Vec<Slo> {
    vec![Slo {
        name: "interactive".into(),
        models: vec![],
        endpoints: vec![],
        limits: Limits {
            ttft: Some(ms(500)),
            tpot: Some(ms(50)),
            ..Limits::default()
        },
    }]
}

fn counter() -> IntCounter {
    IntCounter::new(DROPPED_NAME, DROPPED_HELP).expect("valid counter")
}

/// Request `i` of the known set: starts at second `i`, TTFT 100 + 60·i ms,
/// 5 tokens `gap` ms apart, usage input 100·(i+1), output 5; ends at 1 s.
fn request(i: u64, gap: u64) -> Timeline {
    let t0 = Instant::now();
    let mut t = Timeline::new(t0, Dialect::OpenAiChat);
    t.started_at = UNIX_EPOCH + Duration::from_secs(1_700_000_000 + i);
    t.request.model = Some(if i % 2 == 0 { "even" } else { "odd" }.into());
    t.status = http::StatusCode::from_u16(200).ok();
    t.streamed = true;
    let token = Parsed {
        output_bytes: 4,
        ..Parsed::default()
    };
    let ttft = 100 + 60 * i;
    for k in 0..5 {
        t.record(&token, t0 + ms(ttft + gap * k));
    }
    let usage = Parsed {
        usage: Some(Usage {
            input: Some(100 * (i + 1)),
            output: Some(5),
            ..Usage::default()
        }),
        ..Parsed::default()
    };
    t.record(&usage, t0 + ms(ttft + gap * 4));
    t.finish(Outcome::Ok, t0 + ms(1000));
    t
}

/// The known set: 10 requests over 10 s; 7 have TTFT ≤ 500 ms and TPOT
/// 40 ms; the last has TPOT 60 ms.
fn known_set() -> Vec<Timeline> {
    (0..10)
        .map(|i| request(i, if i == 9 { 60 } else { 40 }))
        .collect()
}

async fn write(path: &Path, timelines: &[Timeline]) -> IntCounter {
    let dropped = counter();
    let (writer, handle) = RecordWriter::spawn(
        &config(path, 1 << 20, 2, 64),
        interactive(),
        vec![],
        dropped.clone(),
    )
    .expect("writer starts");
    timelines.iter().for_each(|t| writer.finished(t));
    handle.close().await;
    dropped
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn records_read_back_equal_to_from_timeline() {
    let path = temp_dir("readback").join("records.jsonl");
    let timelines = known_set();
    let dropped = write(&path, &timelines).await;
    assert_eq!(dropped.get(), 0);
    let read: Vec<Record> = lines(&path)
        .iter()
        .map(|l| serde_json::from_str(l).expect("a record per line"))
        .collect();
    let expected: Vec<Record> = timelines
        .iter()
        .map(|t| Record::from_timeline(t, &interactive(), &[]))
        .collect();
    assert_eq!(read, expected);
    assert_eq!(read[0].ttft_ms, Some(100.0));
    assert_eq!(read[0].tpot_ms, Some(40.0));
    assert_eq!(read[0].itl_ms, vec![(40.0, 4)]);
    assert_eq!(read[0].start_unix_ms, 1_700_000_000_000.0);
    assert_eq!(read[7].slo[0].violated, vec!["ttft".to_owned()]);
}

#[tokio::test]
async fn rotation_keeps_keep_files_and_keep_zero_starts_over() {
    let dir = temp_dir("rotate");
    let one = request(0, 40);
    let line = serde_json::to_string(&Record::from_timeline(&one, &[], &[])).expect("json");
    let max_bytes = 3 * (line.len() as u64 + 1) + 1; // three lines per file
    for keep in [2, 0] {
        let path = dir.join(format!("keep{keep}.jsonl"));
        let (writer, handle) = RecordWriter::spawn(
            &config(&path, max_bytes, keep, 64),
            vec![],
            vec![],
            counter(),
        )
        .expect("writer starts");
        (0..10).for_each(|_| writer.finished(&one));
        handle.close().await;
        let numbered = |n: usize| PathBuf::from(format!("{}.{n}", path.display()));
        if keep == 2 {
            // 10 lines: [1-3] [4-6] [7-9] [10]; the oldest file is gone.
            assert_eq!(lines(&path).len(), 1);
            assert_eq!(lines(&numbered(1)).len(), 3);
            assert_eq!(lines(&numbered(2)).len(), 3);
            assert!(!numbered(3).exists());
        } else {
            assert_eq!(lines(&path).len(), 1);
            assert!(!numbered(1).exists());
        }
        assert_eq!(lines(&path)[0], line);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_full_queue_drops_and_counts_without_blocking() {
    let path = temp_dir("full").join("records.jsonl");
    let dropped = counter();
    let (writer, handle) = RecordWriter::spawn(
        &config(&path, 1 << 20, 1, 1),
        vec![],
        vec![],
        dropped.clone(),
    )
    .expect("writer starts");
    let one = request(0, 40);
    // On a current-thread runtime the writer cannot run until we yield:
    // the first record fills the queue, the other nine are dropped.
    let began = Instant::now();
    (0..10).for_each(|_| writer.finished(&one));
    assert!(began.elapsed() < Duration::from_secs(1));
    assert_eq!(dropped.get(), 9);
    handle.close().await;
    assert_eq!(lines(&path).len(), 1);
    writer.finished(&one); // after close: dropped, counted
    assert_eq!(dropped.get(), 10);
}

#[test]
fn a_record_has_exactly_the_documented_keys() {
    let record = Record::from_timeline(&request(3, 40), &interactive(), &[]);
    let value = serde_json::to_value(&record).expect("json");
    let keys: Vec<&str> = value
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "start_unix_ms",
            "request_id",
            "trace_id",
            "parent_span_id",
            "response_id",
            "endpoint",
            "model",
            "response_model",
            "status",
            "outcome",
            "finish_reason",
            "streamed",
            "usage_injected",
            "ttft_ms",
            "ttfo_ms",
            "ttst_ms",
            "tpot_ms",
            "to_last_token_ms",
            "e2e_ms",
            "phases_ms",
            "inter_event_ms",
            "itl_ms",
            "itl_dropped",
            "token_arrivals",
            "tokens",
            "server_ms",
            "slo",
            "labels",
            "parse_errors",
            "bytes_in",
            "bytes_out"
        ]
    );
    let tokens: Vec<&str> = value["tokens"]
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        tokens,
        [
            "input",
            "input_source",
            "cached_input",
            "output",
            "reasoning",
            "reasoning_source",
            "hidden_reasoning",
            "output_source",
            "events",
            "max_tokens"
        ]
    );
}

async fn known_file(name: &str) -> PathBuf {
    let path = temp_dir(name).join("records.jsonl");
    write(&path, &known_set()).await;
    path
}

#[tokio::test]
async fn report_reproduces_the_known_figures_exactly() {
    let path = known_file("figures").await;
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    report::read(&path, &mut records, &mut warnings).expect("readable");
    assert!(warnings.is_empty());
    let slo = report::SloSpec::parse("ttft:500ms tpot:50").expect("valid");
    let groups = report::figures(&records, None, &[slo]);
    let g = &groups[0];
    assert_eq!((g.name.as_str(), g.requests, g.ok), ("all", 10, 10));
    assert_eq!(g.duration_s, 10.0);
    assert_eq!(g.request_throughput, Some(1.0));
    assert_eq!(g.output_token_throughput, Some(5.0));
    assert_eq!(g.goodput[0].met, 7);
    assert_eq!(g.goodput[0].per_second, Some(0.7));
    let get = |m: Metric| {
        let s = g
            .metrics
            .iter()
            .find(|(k, _)| *k == m)
            .and_then(|(_, s)| *s);
        s.map(|s| (s.count, s.avg, s.min, s.p50, s.p90, s.p99, s.max))
    };
    let ttft = Some((10, 370.0, 100.0, 340.0, 580.0, 640.0, 640.0));
    assert_eq!(get(Metric::Ttft), ttft);
    assert_eq!(get(Metric::Ttfo), ttft);
    assert_eq!(
        get(Metric::Tpot),
        Some((10, 42.0, 40.0, 40.0, 40.0, 60.0, 60.0))
    );
    assert_eq!(
        get(Metric::Itl),
        Some((40, 42.0, 40.0, 40.0, 40.0, 60.0, 60.0))
    );
    assert_eq!(
        get(Metric::E2e),
        Some((10, 1000.0, 1000.0, 1000.0, 1000.0, 1000.0, 1000.0))
    );
    assert_eq!(
        get(Metric::InputTokens),
        Some((10, 550.0, 100.0, 500.0, 900.0, 1000.0, 1000.0))
    );
    assert_eq!(
        get(Metric::OutputTokens),
        Some((10, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0))
    );
    let first_column: Vec<(&str, u64)> = g
        .grid
        .rows
        .iter()
        .map(|(l, c)| (l.as_str(), c[0]))
        .collect();
    assert_eq!(
        first_column,
        [
            ("0-127", 1),
            ("128-511", 4),
            ("512-2047", 5),
            ("2048-8191", 0),
            ("8192-32767", 0),
            ("32768+", 0)
        ]
    );
    // Without --slo, the results stored by the writer: the same 7 of 10.
    let stored = report::figures(&records, None, &[]);
    assert_eq!(stored[0].goodput[0].slo, "interactive");
    assert_eq!(
        (stored[0].goodput[0].met, stored[0].goodput[0].judged),
        (7, 10)
    );
    // By model: even (0,2,4,6,8) and odd (1,3,5,7,9).
    let by = report::figures(&records, Some(report::GroupBy::Model), &[]);
    let names: Vec<(&str, u64)> = by.iter().map(|g| (g.name.as_str(), g.requests)).collect();
    assert_eq!(names, [("even", 5), ("odd", 5)]);
}

#[tokio::test]
async fn report_json_parses_and_csv_has_its_header() {
    let path = known_file("formats").await;
    let args = |format| ReportArgs {
        files: vec![path.clone()],
        slos: vec!["ttft:500ms tpot:50ms".into()],
        by: None,
        format,
        select: None,
    };
    let json = report::run(&args(Format::Json)).expect("report");
    let value: serde_json::Value = serde_json::from_str(&json.stdout).expect("one JSON object");
    let group = &value["groups"][0];
    assert_eq!(group["requests"], 10);
    assert_eq!(group["metrics"]["ttft_ms"]["p90"], 580.0);
    assert_eq!(group["goodput"][0]["per_second"], 0.7);
    let csv = report::run(&args(Format::Csv)).expect("report");
    let rows: Vec<&str> = csv.stdout.lines().collect();
    assert_eq!(rows[0], "group,metric,count,avg,min,p50,p90,p99,max");
    assert_eq!(rows[1], "all,ttft_ms,10,370,100,340,580,640,640");
    assert!(rows.contains(&"all,goodput:ttft:500ms tpot:50ms,7,0.7,,,,,"));
}

fn tokenclock(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tokenclock"))
        .args(args)
        .output()
        .expect("binary runs")
}

#[tokio::test]
async fn report_binary_prints_the_table() {
    let path = known_file("binary").await;
    let file = path.to_str().expect("utf-8 path");
    let out = tokenclock(&["report", file, "--slo", "ttft:500ms tpot:50ms"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("== all: 10 requests (10 ok) over 10.000 s =="),
        "{stdout}"
    );
    assert!(
        stdout.contains("Request throughput (req/s):      1.000"),
        "{stdout}"
    );
    assert!(stdout.contains("Goodput [ttft:500ms tpot:50ms] (req/s): 0.700 (7 of 10 met, 70.0%)"));
    let ttft_row = format!(
        "{:<32}{:>10}{:>10}{:>10}{:>10}{:>10}{:>10}",
        "Time to first token (ms)", "370.00", "100.00", "340.00", "580.00", "640.00", "640.00"
    );
    assert!(stdout.contains(&ttft_row), "{stdout}");
}

/// `report … | head`: a reader that closes the pipe early ends the report
/// quietly with success, not a panic (exit 101 and a backtrace), however
/// long the output (here far past a pipe's buffer).
#[tokio::test]
async fn a_report_whose_reader_leaves_early_ends_quietly() {
    let path = known_file("pipe").await;
    let ten = std::fs::read_to_string(&path).expect("records");
    std::fs::write(&path, ten.repeat(400)).expect("4,000 records");
    let file = path.to_str().expect("utf-8 path");
    for args in [
        &["report", file, "--missed", "ttft:1ms"][..],
        &["report", file, "--missed", "ttft:1ms", "--format", "json"],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_tokenclock"))
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("binary runs");
        let mut first = [0u8; 64];
        let stdout = child.stdout.as_mut().expect("piped");
        std::io::Read::read_exact(stdout, &mut first).expect("the report begins");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("ends");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// A flag that a lookup or `--missed` would ignore is refused (exit 2),
/// not silently dropped: `--by` and `--slo` shape only the summary.
#[test]
fn report_flags_that_would_be_ignored_are_refused() {
    let dir = temp_dir("ignored");
    let file = dir.join("r.jsonl");
    std::fs::write(&file, "").expect("write");
    let file = file.to_str().expect("utf-8");
    for extra in [
        &["--missed", "ttft:1s", "--by", "model"][..],
        &["--request-id", "r-1", "--slo", "ttft:1s"],
        &[
            "--trace-id",
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "--by",
            "endpoint",
        ],
        &["--missed", "ttft:1s", "--slo", "ttft:1s"],
    ] {
        let mut args = vec!["report", file];
        args.extend_from_slice(extra);
        let out = tokenclock(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("cannot be used with"),
            "{extra:?}: {stderr}"
        );
    }
}

#[test]
fn report_binary_fails_with_one_line_and_exit_2() {
    let missing = temp_dir("missing").join("nope.jsonl");
    let out = tokenclock(&["report", missing.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with(&format!("tokenclock: report: {}: ", missing.display())));

    let dir = temp_dir("badslo");
    let file = dir.join("empty.jsonl");
    std::fs::write(&file, "").expect("write");
    let out = tokenclock(&[
        "report",
        file.to_str().expect("utf-8"),
        "--slo",
        "ttft:fast",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("`ttft:fast`"), "{stderr}");
}

/// What a shutdown that cannot wait for the disk would lose is known:
/// the records queued and not yet written (the exit's warning says how
/// many), not those already turned away at a full queue (counted dropped)
/// nor those written. The test's runtime has one thread, so the writer
/// runs only once the test awaits.
#[tokio::test]
async fn the_records_queued_and_not_yet_written_are_known() {
    let dir = temp_dir("unwritten");
    let path = dir.join("r.jsonl");
    let dropped = counter();
    let log = RecordLog::open(Some(&config(&path, 1 << 20, 2, 4)), dropped.clone())
        .expect("record log opens");
    let unwritten = log.unwritten();
    let writer = log.writer(vec![], vec![]);
    (0..10).for_each(|i| writer.finished(&request(i, 40)));
    assert_eq!((unwritten(), dropped.get()), (4, 6));
    log.close().await;
    assert_eq!(unwritten(), 0);
    assert_eq!(lines(&path).len(), 4);
}

#[tokio::test]
async fn a_reload_moves_records_to_the_new_writer_without_losing_or_doubling_any() {
    let dir = temp_dir("reload");
    let (a, b) = (dir.join("a.jsonl"), dir.join("b.jsonl"));
    let dropped = counter();
    let mut log = RecordLog::open(Some(&config(&a, 1 << 20, 2, 64)), dropped.clone())
        .expect("record log opens");
    let old = log.writer(vec![], vec![]);
    (0..5).for_each(|i| old.finished(&request(i, 40)));
    assert!(log
        .replace(Some(&config(&b, 1 << 20, 2, 64)))
        .expect("b opens"));
    // A request that started before the reload finishes after it.
    let new = log.writer(vec![], vec![]);
    (5..10).for_each(|i| old.finished(&request(i, 40)));
    (10..15).for_each(|i| new.finished(&request(i, 40)));
    // Back to `a` with other rotation settings: one writer at a time.
    assert!(log
        .replace(Some(&config(&a, 1 << 21, 3, 64)))
        .expect("a opens"));
    (15..20).for_each(|i| new.finished(&request(i, 40)));
    assert!(!log
        .replace(Some(&config(&a, 1 << 21, 3, 64)))
        .expect("unchanged"));
    // Off, then on again: records of the time it was off are not kept.
    assert!(log.replace(None).expect("off"));
    new.finished(&request(20, 40));
    assert!(log.replace(Some(&config(&a, 1 << 21, 3, 64))).expect("on"));
    (21..23).for_each(|i| new.finished(&request(i, 40)));
    let unwritable = config(&dir.join("missing").join("c.jsonl"), 1 << 20, 2, 64);
    assert!(log.replace(Some(&unwritable)).is_err(), "refused");
    new.finished(&request(23, 40));
    log.close().await;

    assert_eq!(dropped.get(), 0);
    let count = |path: &Path| lines(path).len();
    assert_eq!(
        count(&a),
        5 + 5 + 2 + 1,
        "a: before, after switching back, after on"
    );
    assert_eq!(count(&b), 5 + 5);
}
