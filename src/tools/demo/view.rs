//! The demo's live terminal view: what the proxy measured so far, per
//! workload, refreshed every second, built from the same records and
//! figures as `tokenclock report`.

use std::{fmt::Write as _, sync::Mutex};

use crate::{
    export::records::Record,
    measure::slo::Slo,
    measure::timeline::{Timeline, TimelineSink},
    tools::report::{self, Figures, GroupBy, Metric, Summary},
};

/// Collects every finished request as a [`Record`] for the view.
pub struct LiveView {
    slos: Vec<Slo>,
    records: Mutex<Vec<Record>>,
}

impl LiveView {
    /// A view judging requests against `slos`.
    pub fn new(slos: Vec<Slo>) -> Self {
        Self {
            slos,
            records: Mutex::new(Vec::new()),
        }
    }

    /// The records so far.
    pub fn records(&self) -> Vec<Record> {
        self.records.lock().map(|r| r.clone()).unwrap_or_default()
    }

    /// One screen: per workload (model), requests, throughput, goodput and
    /// the latency figures, and where TTFT went.
    pub fn render(&self, elapsed_s: f64, in_flight: u64) -> String {
        let records = self.records();
        let groups = report::figures(&records, Some(GroupBy::Model), &[]);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tokenclock demo  {elapsed_s:>5.0}s  in flight {in_flight:>4}  finished {:>6}",
            records.len()
        );
        let _ = writeln!(
            out,
            "{:<22} {:>6} {:>7} {:>8} {:>15} {:>15} {:>13} {:>13} {:>17}",
            "workload",
            "reqs",
            "req/s",
            "goodput",
            "TTFT p50/p99",
            "TTFO p50/p99",
            "ITL p50/p99",
            "TPOT p50/p99",
            "TTFT: queue+pre/rest"
        );
        for g in &groups {
            let _ = writeln!(out, "{}", row(g, &records));
        }
        out
    }
}

impl TimelineSink for LiveView {
    fn finished(&self, timeline: &Timeline) {
        let record = Record::from_timeline(timeline, &self.slos, &[]);
        if let Ok(mut records) = self.records.lock() {
            records.push(record);
        }
    }
}

fn row(g: &Figures, records: &[Record]) -> String {
    let pair = |metric: Metric| match summary(g, metric) {
        Some(s) => format!("{:.0}/{:.0}ms", s.p50, s.p99),
        None => "-".to_owned(),
    };
    let goodput = g.goodput.first().map_or_else(
        || "-".to_owned(),
        |gp| format!("{:.0}%", gp.fraction * 100.0),
    );
    format!(
        "{:<22} {:>6} {:>7.2} {:>8} {:>15} {:>15} {:>13} {:>13} {:>17}",
        truncate(&g.name, 22),
        g.requests,
        g.request_throughput.unwrap_or(0.0),
        goodput,
        pair(Metric::Ttft),
        pair(Metric::Ttfo),
        pair(Metric::Itl),
        pair(Metric::Tpot),
        ttft_split(&g.name, records),
    )
}

fn summary(g: &Figures, metric: Metric) -> Option<Summary> {
    g.metrics
        .iter()
        .find(|(m, _)| *m == metric)
        .and_then(|(_, s)| *s)
}

/// Median TTFT split: response head → first token (queueing, prefill, first
/// decode step, as seen over the wire) against the rest (connect, upload,
/// the upstream's time to send its head).
fn ttft_split(model: &str, records: &[Record]) -> String {
    let mut wire: Vec<f64> = records
        .iter()
        .filter(|r| r.model.as_deref().unwrap_or("unknown") == model)
        .filter_map(|r| Some((r.phases_ms.get("headers_to_first_token")?, r.ttft_ms?)))
        .map(|(queue, ttft)| *queue / ttft.max(f64::EPSILON))
        .collect();
    if wire.is_empty() {
        return "-".to_owned();
    }
    wire.sort_by(f64::total_cmp);
    let share = wire[wire.len() / 2];
    format!("{:.0}% / {:.0}%", share * 100.0, (1.0 - share) * 100.0)
}

fn truncate(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}
