//! How requests and responses are read: the settings the measurement core
//! takes from the validated config.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicU8, AtomicUsize, Ordering},
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
    /// Model globs whose chat template opens `<think>` in the prompt
    /// (`template_opens_reasoning`): their answers' text is reasoning
    /// until `</think>`.
    pub template_opens_reasoning: Arc<[String]>,
    /// Which server answers each path several serve, as the last answer
    /// that told showed it; shared by every request and kept across
    /// reloads.
    pub learnt: Learnt,
    /// What the copies of the request bodies in flight may hold at once,
    /// all requests together (`request_capture_total_bytes`); shared by
    /// every request and kept across reloads.
    pub capture_budget: CaptureBudget,
}

/// Memory that the copies of request bodies in flight may hold at once,
/// all requests together, in bytes: each copy holds up to
/// `request_capture_bytes` (8 MiB), and a burst of large uploads (images
/// as base64 in a chat, long documents) would otherwise hold that many
/// times over, enough for a sidecar's memory limit to kill the process
/// and every stream it carries. A body that would take the budget past
/// its limit is forwarded unread (its measurement loses what the request
/// said, counted), never delayed.
#[derive(Clone, Debug)]
pub struct CaptureBudget(Arc<BudgetInner>);

#[derive(Debug)]
struct BudgetInner {
    limit: usize,
    held: AtomicUsize,
}

impl CaptureBudget {
    /// A budget of `limit` bytes, none of it held.
    pub fn new(limit: usize) -> Self {
        Self(Arc::new(BudgetInner {
            limit,
            held: AtomicUsize::new(0),
        }))
    }

    /// The most it lets copies hold, in bytes.
    pub fn limit(&self) -> usize {
        self.0.limit
    }

    /// Bytes held now, by every copy together.
    pub fn held(&self) -> usize {
        self.0.held.load(Ordering::Relaxed)
    }

    /// A holder of none of it yet, that takes more as its copy grows.
    pub fn holder(&self) -> Held {
        Held {
            budget: self.clone(),
            bytes: 0,
        }
    }

    fn take(&self, bytes: usize) -> bool {
        let limit = self.0.limit;
        self.0
            .held
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_add(bytes).filter(|&after| after <= limit)
            })
            .is_ok()
    }
}

impl Default for CaptureBudget {
    /// 64 MiB, `request_capture_total_bytes`' default.
    fn default() -> Self {
        Self::new(64 * 1024 * 1024)
    }
}

/// A share of a [`CaptureBudget`], given back when dropped.
#[derive(Debug)]
pub struct Held {
    budget: CaptureBudget,
    bytes: usize,
}

impl Held {
    /// Takes `more` bytes of the budget; `false`, taking nothing, when
    /// that would go past its limit.
    pub fn grow(&mut self, more: usize) -> bool {
        let taken = self.budget.take(more);
        if taken {
            self.bytes += more;
        }
        taken
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Gives `bytes` back (at most what it holds).
    pub fn release(&mut self, bytes: usize) {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        self.budget.0.held.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.0.held.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// What the proxy learnt of the server behind each path several servers
/// answer in different shapes ([`Shared`]): `/generate` (TGI, SGLang),
/// `/api/chat` (Ollama, llama.cpp), `POST /` (TGI, TEI, any other), TEI's
/// routes (TEI, any other), `/rerank` (TEI, the Cohere-style servers) and
/// `/completions` (llama.cpp, OpenAI-style proxies).
/// Until an answer tells, each is the path's dialect.
#[derive(Clone, Debug)]
pub struct Learnt {
    /// Behind `/generate`.
    pub generate: LearntServer,
    /// Behind `/api/chat`.
    pub api_chat: LearntServer,
    /// Behind `POST /`.
    pub root: LearntServer,
    /// Behind TEI's routes and `/invocations`.
    pub tei: LearntServer,
    /// Behind `/rerank`.
    pub rerank: LearntServer,
    /// Behind `/completions`.
    pub completions: LearntServer,
}

impl Default for Learnt {
    fn default() -> Self {
        let new = |shared: Shared| LearntServer::new(shared.path_dialect());
        Self {
            generate: new(Shared::Generate),
            api_chat: new(Shared::ApiChat),
            root: new(Shared::Root),
            tei: new(Shared::Tei),
            rerank: new(Shared::Rerank),
            completions: new(Shared::Completions),
        }
    }
}

impl Learnt {
    /// The server learnt behind `shared`.
    pub fn of(&self, shared: Shared) -> &LearntServer {
        match shared {
            Shared::Generate => &self.generate,
            Shared::ApiChat => &self.api_chat,
            Shared::Root => &self.root,
            Shared::Tei => &self.tei,
            Shared::Rerank => &self.rerank,
            Shared::Completions => &self.completions,
        }
    }
}

/// Which of the servers that serve one shared path answers it behind this
/// proxy, as the last successful answer that told showed it (an event
/// stream, a head, a whole body's shape): a request there is counted under
/// it until its own answer tells, and stays so when it never does (it
/// failed before, or with an error that names no server). A sidecar's
/// upstream is one server, so after its first answer every request starts
/// under the right endpoint.
#[derive(Clone, Debug)]
pub struct LearntServer(Arc<AtomicU8>);

/// The bit of [`LearntServer`]'s byte set once an answer showed the server
/// (the rest is the dialect's index).
const KNOWN: u8 = 0x80;

impl LearntServer {
    /// Nothing learnt yet: `path_dialect`, the path's.
    fn new(path_dialect: Dialect) -> Self {
        Self(Arc::new(AtomicU8::new(path_dialect.index() as u8)))
    }

    /// The server last seen answering (the path's before any was).
    pub fn get(&self) -> Dialect {
        let index = usize::from(self.0.load(Ordering::Relaxed) & !KNOWN);
        Dialect::ALL.get(index).copied().unwrap_or(Dialect::Unknown)
    }

    /// Whether a successful answer has shown the server.
    pub fn known(&self) -> bool {
        self.0.load(Ordering::Relaxed) & KNOWN != 0
    }

    /// A successful answer showed `dialect` answering.
    pub(crate) fn learn(&self, dialect: Dialect) {
        // Stored only on a change: every successful answer on a shared path
        // learns, and a store would take the line every worker reads.
        let learnt = dialect.index() as u8 | KNOWN;
        if self.0.load(Ordering::Relaxed) != learnt {
            self.0.store(learnt, Ordering::Relaxed);
        }
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
    /// tells: the server last seen answering the path, else the path's.
    pub fn starting(&self, shared: Option<Shared>, path: &str) -> Dialect {
        match shared.map(|shared| self.learnt.of(shared)) {
            Some(server) => server.get(),
            None => self.dialect(path),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CaptureBudget;

    /// Holders take from one budget until its limit, each all it asks or
    /// nothing, and give it all back when dropped.
    #[test]
    fn a_budget_is_shared_up_to_its_limit_and_given_back() {
        let budget = CaptureBudget::new(100);
        let (mut a, mut b) = (budget.holder(), budget.holder());
        assert!(a.grow(60));
        assert!(!b.grow(41), "past the limit");
        assert_eq!((b.bytes(), budget.held()), (0, 60));
        assert!(b.grow(40));
        assert!(!a.grow(1));
        assert_eq!(budget.held(), 100);
        drop(a);
        assert_eq!(budget.held(), 40);
        assert!(b.grow(60));
        drop(b);
        assert_eq!(budget.held(), 0);
        // A request larger than anything left, or than usize holds.
        assert!(!budget.holder().grow(usize::MAX));
        assert_eq!(budget.held(), 0);
    }
}
