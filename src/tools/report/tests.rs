//! Unit tests of report: nearest-rank percentiles, SLO parsing, the grid.

use super::*;
use crate::config::range_label;

#[test]
fn nearest_rank_percentiles_on_exact_values() {
    let values: Vec<(f64, u64)> = (1..=100).rev().map(|v| (f64::from(v), 1)).collect();
    let s = stats::summarize(values).expect("values");
    assert_eq!((s.count, s.avg, s.min, s.max), (100, 50.5, 1.0, 100.0));
    assert_eq!((s.p50, s.p90, s.p99), (50.0, 90.0, 99.0));
    // Three values: ranks ceil(1.5)=2, ceil(2.7)=3, ceil(2.97)=3.
    let s = stats::summarize(vec![(3.0, 1), (1.0, 1), (2.0, 1)]).expect("values");
    assert_eq!((s.p50, s.p90, s.p99), (2.0, 3.0, 3.0));
    assert_eq!(stats::summarize(vec![]), None);
}

#[test]
fn weights_count_as_repeated_observations() {
    // 30 ms for 9 tokens, 90 ms for 1: avg 36, p90 is the 9th value, p99 the 10th.
    let s = stats::summarize(vec![(90.0, 1), (30.0, 9)]).expect("values");
    assert_eq!(
        (s.count, s.avg, s.p50, s.p90, s.p99),
        (10, 36.0, 30.0, 30.0, 90.0)
    );
}

#[test]
fn slo_specs_parse_units_and_name_bad_objectives() {
    let s = SloSpec::parse(" ttft:0.5s  tpot:50 e2e:2500000us").expect("valid");
    assert_eq!(s.name, "ttft:0.5s tpot:50 e2e:2500000us");
    let limits: Vec<(&str, f64)> = s.limits.iter().map(|(o, l)| (o.as_str(), *l)).collect();
    assert_eq!(limits, [("ttft", 500.0), ("tpot", 50.0), ("e2e", 2500.0)]);
    for bad in ["ttft", "latency:5ms", "ttft:-1ms", "ttft:fast", ""] {
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
