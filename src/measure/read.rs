//! How requests and responses are read: the settings the measurement core
//! takes from the validated config.

use std::collections::HashMap;

use crate::measure::dialect::Dialect;

/// How requests and responses are read for measurement; fixed at start.
#[derive(Clone, Debug)]
pub struct ReadSettings {
    /// Longest event (or non-streamed body) read; longer ones are skipped
    /// and counted.
    pub max_event_bytes: usize,
    /// Longest request body copied on the side to learn `model`, `stream`…
    pub request_capture_bytes: usize,
    /// Dialects forced for exact request paths, over [`Dialect::from_path`].
    pub dialects: HashMap<String, Dialect>,
    /// Request headers whose values become extra metric labels, in order.
    pub label_headers: Vec<http::HeaderName>,
    /// Request headers that may carry the caller's request id, in order of
    /// preference (`request_id_headers`).
    pub request_id_headers: Vec<http::HeaderName>,
    /// Read per-request SLO limits from `x-slo-ttft-ms` / `x-slo-tpot-ms`.
    pub slo_headers: bool,
    /// Longest `model` written to the access log, in bytes
    /// (`max_label_value_bytes`); a longer one is cut there.
    pub max_logged_model_bytes: usize,
}

impl ReadSettings {
    /// The dialect of a request path.
    pub fn dialect(&self, path: &str) -> Dialect {
        self.dialects
            .get(path)
            .copied()
            .unwrap_or_else(|| Dialect::from_path(path))
    }

    /// Whether a request on `path` is on `/generate`, which TGI and SGLang
    /// both serve, with no dialect forced for it: its response tells
    /// which of the two it is ([`Dialect::shared_generate`]).
    pub fn undecided(&self, path: &str) -> bool {
        Dialect::shared_generate(path) && !self.dialects.contains_key(path)
    }
}
