//! The demo's live terminal view: what the proxy measured so far, per
//! workload (model), refreshed every second, with the same figures as
//! `tokenclock report`.
//!
//! Each finished request is tallied into per-model histograms and counters
//! and then dropped, so the view's memory does not grow with the requests
//! however long the demo runs; its percentiles are within
//! [`RELATIVE_ERROR`](crate::tools::stats::RELATIVE_ERROR) (0.5 %) of the
//! exact ones `tokenclock report` computes from the records.

use std::{collections::BTreeMap, fmt::Write as _, sync::Mutex};

use crate::{
    export::records::Record,
    measure::slo::Slo,
    measure::timeline::{Timeline, TimelineSink},
    tools::report::{render, Figures, Metric, Tally},
    tools::stats::{Distribution, Histogram},
};

/// Tallies every finished request, per model, for the view.
pub struct LiveView {
    slos: Vec<Slo>,
    tallies: Mutex<Tallies>,
}

/// What the view has counted so far.
#[derive(Default)]
struct Tallies {
    /// Requests finished.
    requests: u64,
    /// Per model (`unknown` when absent), in name order.
    models: BTreeMap<String, ModelTally>,
}

/// One model's figures, and the median split of its TTFT.
struct ModelTally {
    figures: Tally<Histogram>,
    /// Per request, response head → first token over TTFT (a fraction).
    wire_share: Histogram,
}

impl LiveView {
    /// A view judging requests against `slos`.
    pub fn new(slos: Vec<Slo>) -> Self {
        Self {
            slos,
            tallies: Mutex::new(Tallies::default()),
        }
    }

    /// One screen: per workload (model), requests, throughput, goodput and
    /// the latency figures, and where TTFT went.
    pub(crate) fn render(&self, elapsed_s: f64, in_flight: u64) -> String {
        let (requests, groups) = self.figures();
        let mut out = String::new();
        let _ = writeln!(
            out,
            "tokenclock demo  {elapsed_s:>5.0}s  in flight {in_flight:>4}  finished {requests:>6}"
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
        for (g, wire_share) in &groups {
            let _ = writeln!(out, "{}", row(g, *wire_share));
        }
        out
    }

    /// The `tokenclock report` text of everything so far, per model.
    pub fn summary(&self) -> String {
        let (requests, groups) = self.figures();
        let figures: Vec<Figures> = groups.into_iter().map(|(g, _)| g).collect();
        render::text(&figures, requests as usize)
    }

    /// Requests finished, and per model its figures and median wire share.
    fn figures(&self) -> (u64, Vec<(Figures, Option<f64>)>) {
        let Ok(mut tallies) = self.tallies.lock() else {
            return (0, Vec::new());
        };
        let groups = tallies
            .models
            .iter_mut()
            .map(|(name, m)| (m.figures.figures(name), m.wire_share.percentile(50)))
            .collect();
        (tallies.requests, groups)
    }
}

impl TimelineSink for LiveView {
    fn finished(&self, timeline: &Timeline) {
        let record = Record::from_timeline(timeline, &self.slos, &[]);
        if let Ok(mut tallies) = self.tallies.lock() {
            tallies.add(&record);
        }
    }
}

impl Tallies {
    /// Counts one finished request; the record itself is not kept.
    fn add(&mut self, record: &Record) {
        self.requests += 1;
        let model = record.model.as_deref().unwrap_or("unknown");
        if !self.models.contains_key(model) {
            let fresh = ModelTally {
                figures: Tally::new(&[]),
                wire_share: Histogram::default(),
            };
            self.models.insert(model.to_owned(), fresh);
        }
        if let Some(m) = self.models.get_mut(model) {
            m.figures.add(record);
            let head_to_token = record.phases_ms.get("headers_to_first_token");
            if let (Some(queue), Some(ttft)) = (head_to_token, record.ttft_ms) {
                m.wire_share.record(*queue / ttft.max(f64::EPSILON));
            }
        }
    }
}

fn row(g: &Figures, wire_share: Option<f64>) -> String {
    let pair = |metric: Metric| match distribution(g, metric) {
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
        ttft_split(wire_share),
    )
}

fn distribution(g: &Figures, metric: Metric) -> Option<Distribution> {
    g.metrics
        .iter()
        .find(|(m, _)| *m == metric)
        .and_then(|(_, s)| *s)
}

/// Median TTFT split: response head → first token (queueing, prefill, first
/// decode step, as seen over the wire) against the rest (connect, upload,
/// the upstream's time to send its head).
fn ttft_split(wire_share: Option<f64>) -> String {
    wire_share.map_or_else(
        || "-".to_owned(),
        |share| format!("{:.0}% / {:.0}%", share * 100.0, (1.0 - share) * 100.0),
    )
}

fn truncate(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(model: &str, ttft_ms: f64) -> Record {
        let json = format!(
            r#"{{"start_unix_ms":1000.0,"endpoint":"openai_chat","model":"{model}","status":200,
            "outcome":"ok","streamed":true,"usage_injected":false,"ttft_ms":{ttft_ms},
            "ttfo_ms":{ttft_ms},"tpot_ms":40.0,"e2e_ms":1000.0,
            "phases_ms":{{"headers_to_first_token":{queue}}},"itl_ms":[[40.0,4],[60.0,1]],
            "tokens":{{"input":100,"output":5,"reasoning":0,"events":5}},
            "slo":[{{"name":"interactive","met":true,"violated":[]}}],"bytes_in":10,"bytes_out":100}}"#,
            queue = ttft_ms * 0.75
        );
        serde_json::from_str(&json).expect("a record")
    }

    /// Bytes the tallies hold, on the stack and the heap.
    fn footprint(t: &Tallies) -> usize {
        std::mem::size_of::<Tallies>()
            + t.models
                .iter()
                .map(|(name, m)| name.capacity() + m.figures.footprint() + m.wire_share.footprint())
                .sum::<usize>()
    }

    #[test]
    fn memory_does_not_grow_with_the_requests() {
        let models = ["sim-a", "sim-b", "sim-c"];
        let mut tallies = Tallies::default();
        let add = |tallies: &mut Tallies, n: u32| {
            for i in 0..n {
                let model = models[i as usize % models.len()];
                tallies.add(&record(model, f64::from(100 + i % 900)));
            }
        };
        add(&mut tallies, 1_000);
        let after_thousand = footprint(&tallies);
        add(&mut tallies, 100_000);
        assert_eq!(footprint(&tallies), after_thousand);
        assert_eq!(tallies.requests, 101_000);
    }

    #[test]
    fn the_view_shows_figures_within_the_relative_error() {
        let view = LiveView::new(Vec::new());
        if let Ok(mut tallies) = view.tallies.lock() {
            (1..=100).for_each(|ms| tallies.add(&record("sim-a", f64::from(ms))));
        }
        let (requests, groups) = view.figures();
        assert_eq!(requests, 100);
        let (g, share) = &groups[0];
        assert_eq!((g.name.as_str(), g.requests, g.ok), ("sim-a", 100, 100));
        let ttft = distribution(g, Metric::Ttft).expect("ttft");
        assert_eq!((ttft.count, ttft.min, ttft.max), (100, 1.0, 100.0));
        let error = crate::tools::stats::RELATIVE_ERROR;
        assert!((ttft.p50 - 50.0).abs() <= 50.0 * error, "{ttft:?}");
        let itl = distribution(g, Metric::Itl).expect("itl");
        assert_eq!((itl.count, itl.max), (500, 60.0));
        assert!((itl.p99 - 60.0).abs() <= 60.0 * error, "{itl:?}");
        assert!(
            share.is_some_and(|s| (s - 0.75).abs() <= 0.75 * error),
            "{share:?}"
        );
        assert_eq!(g.goodput[0].met, 100);
        assert!(view.render(1.0, 0).contains("75% / 25%"));
        assert!(view.summary().starts_with("tokenclock report: 100 records"));
    }
}
