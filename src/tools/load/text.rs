//! The summary as text for a terminal: one line per workload, then delays and errors.

use std::fmt::{self, Display, Formatter};

use super::results::{RunSummary, WorkloadSummary};

impl Display for RunSummary {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:.2}s: {} requests ({:.1}/s), {} events ({:.0}/s), {} bytes, {} skipped",
            self.elapsed_s,
            self.total.requests,
            self.requests_per_s,
            self.total.events,
            self.events_per_s,
            self.bytes,
            self.skipped,
        )?;
        writeln!(
            f,
            "{:<12} {:>8} {:>6} {:>6} {:>6} {:>9} {:>10} {:>10} {:>10} {:>10}",
            "workload",
            "requests",
            "ok",
            "errors",
            "cancel",
            "events",
            "ttft p50",
            "ttft p99",
            "e2e p50",
            "e2e p99"
        )?;
        for w in self.workloads.iter().chain(std::iter::once(&self.total)) {
            row(f, w)?;
        }
        let d = &self.event_delay_us;
        if d.count > 0 {
            writeln!(
                f,
                "event delay (sim -> client): p50 {:.0} us, p99 {:.0} us, max {:.0} us over {} events",
                d.p50, d.p99, d.max, d.count
            )?;
        }
        for (kind, n) in &self.errors_by_kind {
            writeln!(f, "errors {kind}: {n}")?;
        }
        Ok(())
    }
}

fn row(f: &mut Formatter<'_>, w: &WorkloadSummary) -> fmt::Result {
    // A figure no request had (no first token in whole answers or
    // failures) is `-`, not 0 ms.
    let ms = |count: u64, v: f64| {
        if count == 0 {
            format!("{:>10}", "-")
        } else {
            format!("{v:>8.1}ms")
        }
    };
    writeln!(
        f,
        "{:<12} {:>8} {:>6} {:>6} {:>6} {:>9} {} {} {} {}",
        w.name,
        w.requests,
        w.ok,
        w.errors,
        w.cancelled,
        w.events,
        ms(w.ttft_ms.count, w.ttft_ms.p50),
        ms(w.ttft_ms.count, w.ttft_ms.p99),
        ms(w.e2e_ms.count, w.e2e_ms.p50),
        ms(w.e2e_ms.count, w.e2e_ms.p99)
    )
}
