//! Rendering report figures: an aligned text table, one JSON object, or CSV rows.

use std::fmt::Write;

use serde_json::{json, Map, Value};

use super::Figures;
use crate::tools::stats::Distribution;

/// Width of the metric-name column of the text table.
const NAME: usize = 32;
/// Width of each number column.
const NUMBER: usize = 10;

/// The text report: per group a table, throughput and goodput lines, the grid.
pub(crate) fn text(groups: &[Figures], records: usize) -> String {
    let mut out = String::new();
    if groups.is_empty() {
        out.push_str("No records.\n");
    }
    let _ = writeln!(out, "tokenclock report: {records} records");
    for g in groups {
        out.push('\n');
        table(&mut out, g);
        rates(&mut out, g);
        grid(&mut out, g);
    }
    out
}

fn table(out: &mut String, g: &Figures) {
    let _ = writeln!(
        out,
        "== {}: {} requests ({} ok) over {:.3} s ==",
        super::printable(&g.name),
        g.requests,
        g.ok,
        g.duration_s
    );
    let _ = write!(out, "{:<NAME$}", "Metric");
    for column in ["avg", "min", "p50", "p90", "p99", "max"] {
        let _ = write!(out, "{column:>NUMBER$}");
    }
    out.push('\n');
    for (metric, summary) in &g.metrics {
        let _ = write!(out, "{:<NAME$}", metric.title());
        match summary {
            Some(s) => {
                for v in [s.avg, s.min, s.p50, s.p90, s.p99, s.max] {
                    let _ = write!(out, "{v:>NUMBER$.2}");
                }
            }
            None => {
                let _ = write!(out, "{:>NUMBER$}", "-");
            }
        }
        out.push('\n');
    }
}

fn rates(out: &mut String, g: &Figures) {
    let rate = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"));
    let _ = writeln!(
        out,
        "Request throughput (req/s):      {}",
        rate(g.request_throughput)
    );
    let _ = writeln!(
        out,
        "Output token throughput (tok/s): {}",
        rate(g.output_token_throughput)
    );
    for gp in &g.goodput {
        let _ = writeln!(
            out,
            "Goodput [{}] (req/s): {} ({} of {} met, {:.1}%)",
            gp.slo,
            rate(gp.per_second),
            gp.met,
            gp.judged,
            gp.fraction * 100.0
        );
    }
}

fn grid(out: &mut String, g: &Figures) {
    let width = g
        .grid
        .outputs
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max(6)
        + 2;
    let _ = write!(
        out,
        "\nRequests by input tokens (rows) × output tokens (columns)\n{:<14}",
        "input"
    );
    for label in &g.grid.outputs {
        let _ = write!(out, "{label:>width$}");
    }
    out.push('\n');
    for (label, counts) in &g.grid.rows {
        let _ = write!(out, "{label:<14}");
        for n in counts {
            let _ = write!(out, "{n:>width$}");
        }
        out.push('\n');
    }
}

/// One JSON object: `{"groups": [...]}`; metrics keyed by name.
pub(crate) fn json(groups: &[Figures]) -> String {
    let groups: Vec<Value> = groups.iter().map(group_json).collect();
    let mut text = json!({ "groups": groups }).to_string();
    text.push('\n');
    text
}

fn group_json(g: &Figures) -> Value {
    let metrics: Map<String, Value> = g
        .metrics
        .iter()
        .map(|(m, s)| (m.key().to_owned(), json!(s)))
        .collect();
    json!({
        "group": g.name,
        "requests": g.requests,
        "ok": g.ok,
        "duration_s": g.duration_s,
        "metrics": metrics,
        "request_throughput": g.request_throughput,
        "output_token_throughput": g.output_token_throughput,
        "goodput": g.goodput,
        "workload": g.grid,
    })
}

/// The CSV header.
pub(crate) const CSV_HEADER: &str = "group,metric,count,avg,min,p50,p90,p99,max";

/// One row per group × metric, then `request_throughput`,
/// `output_token_throughput` and `goodput:<slo>` rows whose `count` is the
/// requests (met ones for goodput) and `avg` the rate per second.
pub(crate) fn csv(groups: &[Figures]) -> String {
    let mut out = format!("{CSV_HEADER}\n");
    for g in groups {
        let name = quote(&g.name);
        for (metric, summary) in &g.metrics {
            let cells = summary.map_or_else(|| "0,,,,,,".to_owned(), cells);
            let _ = writeln!(out, "{name},{},{cells}", metric.key());
        }
        let rate = |v: Option<f64>| v.map(|v| v.to_string()).unwrap_or_default();
        let _ = writeln!(
            out,
            "{name},request_throughput,{},{},,,,,",
            g.requests,
            rate(g.request_throughput)
        );
        let _ = writeln!(
            out,
            "{name},output_token_throughput,{},{},,,,,",
            g.requests,
            rate(g.output_token_throughput)
        );
        for gp in &g.goodput {
            let metric = quote(&format!("goodput:{}", gp.slo));
            let _ = writeln!(
                out,
                "{name},{metric},{},{},,,,,",
                gp.met,
                rate(gp.per_second)
            );
        }
    }
    out
}

fn cells(s: Distribution) -> String {
    format!(
        "{},{},{},{},{},{},{}",
        s.count, s.avg, s.min, s.p50, s.p90, s.p99, s.max
    )
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn quote(field: &str) -> String {
    if field.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_owned()
    }
}
