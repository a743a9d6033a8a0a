//! How requests and responses are read: the settings the measurement core
//! takes from the validated config.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU8, Ordering},
        Arc,
    },
};

use crate::measure::dialect::{Dialect, Shared};

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
    /// Which server answers `/generate` here, as the last answer that
    /// told showed it; shared by every request and kept across reloads.
    pub generate: GenerateServer,
}

/// Which of the two servers that serve `/generate` (TGI, SGLang) answers
/// it behind this proxy, as the last successful answer that told showed
/// it (an event stream, TGI's head, a whole body's shape): a request
/// there is counted under it until its own answer tells, and stays so
/// when it never does (it failed before, or with an error that names no
/// server). TGI, the path's dialect, until an answer tells. A sidecar's
/// upstream is one server, so after its first answer every request starts
/// under the right endpoint.
#[derive(Clone, Debug)]
pub struct GenerateServer(Arc<AtomicU8>);

impl Default for GenerateServer {
    fn default() -> Self {
        Self(Arc::new(AtomicU8::new(Dialect::Tgi.index() as u8)))
    }
}

impl GenerateServer {
    /// The server last seen answering.
    pub fn get(&self) -> Dialect {
        let index = usize::from(self.0.load(Ordering::Relaxed));
        Dialect::ALL.get(index).copied().unwrap_or(Dialect::Tgi)
    }

    /// An answer showed `dialect` answering.
    pub(crate) fn learn(&self, dialect: Dialect) {
        self.0.store(dialect.index() as u8, Ordering::Relaxed);
    }
}

impl ReadSettings {
    /// The dialect of a request path.
    pub fn dialect(&self, path: &str) -> Dialect {
        self.dialects
            .get(path)
            .copied()
            .unwrap_or_else(|| Dialect::from_path(path))
    }

    /// The shared path a request is on, unless a dialect is forced for
    /// it: its response tells which API family answered ([`Shared`]).
    pub fn shared(&self, post: bool, path: &str) -> Option<Shared> {
        Shared::of(post, path).filter(|_| !self.dialects.contains_key(path))
    }

    /// The dialect a request on `shared` is counted under until its answer
    /// tells: on `/generate` the server last seen answering it, else the
    /// path's.
    pub fn starting(&self, shared: Option<Shared>, path: &str) -> Dialect {
        match shared {
            Some(Shared::Generate) => self.generate.get(),
            _ => self.dialect(path),
        }
    }
}
