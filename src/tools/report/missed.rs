//! `tokenclock report --missed "ttft:2s"`: the requests that missed an
//! objective, one line each with the ids that find them again (in the
//! caller's trace, in the model server's log), worst first. The step from
//! an alert to the requests behind it.

use std::fmt::Write;

use super::{printable, request::started, slo::figure, SloSpec};
use crate::export::records::Record;

/// `records` worst first for `spec`: by its first objective's figure,
/// longest first; those without it (a failure, a response that was not
/// streamed) after them, newest first. The text and the JSON lines alike.
pub(crate) fn worst_first<'a>(spec: &SloSpec, records: &[&'a Record]) -> Vec<&'a Record> {
    let mut sorted = records.to_vec();
    let Some(&(first, _)) = spec.limits.first() else {
        return sorted;
    };
    sorted.sort_by(|a, b| {
        let (fa, fb) = (figure(a, first), figure(b, first));
        match (fa, fb) {
            (Some(x), Some(y)) => y.total_cmp(&x),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => b.start_unix_ms.total_cmp(&a.start_unix_ms),
        }
    });
    sorted
}

/// The records that missed `spec`, worst first: sorted by the first
/// objective's figure, longest first; those without it (a failure, a
/// response that was not streamed) after them, newest first.
pub(crate) fn text(spec: &SloSpec, records: &[&Record]) -> String {
    let Some(&(first, _)) = spec.limits.first() else {
        return String::new();
    };
    let sorted = worst_first(spec, records);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} of these records missed `{}`, worst {} first:",
        sorted.len(),
        spec.name,
        first.as_str()
    );
    let _ = writeln!(
        out,
        "{:<24} {:>10} {:>10} {:>10} {:>10}  {:<16} {:<16} {:<32} {:<16} {:<20} model",
        "started",
        "ttft_ms",
        "ttfo_ms",
        "tpot_ms",
        "e2e_ms",
        "outcome",
        "request_id",
        "trace_id",
        "parent_span_id",
        "response_id",
    );
    for r in sorted {
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        let id = |v: &Option<String>| {
            v.as_deref()
                .map_or_else(|| "-".to_owned(), |v| printable(v).into_owned())
        };
        let _ = writeln!(
            out,
            "{:<24} {:>10} {:>10} {:>10} {:>10}  {:<16} {:<16} {:<32} {:<16} {:<20} {}",
            started(r),
            ms(r.ttft_ms),
            ms(r.ttfo_ms),
            ms(r.tpot_ms),
            ms(r.e2e_ms),
            r.outcome,
            id(&r.request_id),
            id(&r.trace_id),
            id(&r.parent_span_id),
            id(&r.response_id),
            id(&r.model),
        );
    }
    out
}
