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
    writeln!(
        f,
        "{:<12} {:>8} {:>6} {:>6} {:>6} {:>9} {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>8.1}ms",
        w.name,
        w.requests,
        w.ok,
        w.errors,
        w.cancelled,
        w.events,
        w.ttft_ms.p50,
        w.ttft_ms.p99,
        w.e2e_ms.p50,
        w.e2e_ms.p99
    )
}
