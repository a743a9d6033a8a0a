//! The request side of an exchange: counts the request body on its way
//! upstream and reads a capped copy of it to learn `model`, `stream`,
//! `max_tokens`…, without delaying a byte. A compressed body (clients such
//! as OpenAI's Codex send zstd request bodies) is read decoded, within the
//! same cap. A form (`multipart/form-data`: speech to text's audio and its
//! fields) is not copied: its small fields are read in place
//! ([`FormFields`]), whatever its size. When the body ends, the request moves on from
//! [`Stage::Upload`].

use std::sync::{
    atomic::{AtomicBool, AtomicU64, Ordering},
    Arc, Mutex,
};

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Method};
use tokio::time::Instant;

use super::stage::StageCell;
use crate::{
    measure::coding::{decode_whole, Coding},
    measure::dialect::{Dialect, ParseError, RequestInfo, FORM_FIELDS},
    measure::frame::form::FormFields,
    measure::observe::{End, Observe},
    measure::read::{CaptureBudget, Held},
    measure::timeline::{Stage, Timeline},
};

/// Observes the request body on its way to the upstream.
pub struct Upload {
    shared: Arc<UploadShared>,
    dialect: Dialect,
    /// What is read of the body; `None` when nothing is (a copy past `cap`).
    capture: Option<Capture>,
    /// How the body is compressed; its copy is decoded at its end, to at
    /// most `cap` bytes.
    coding: Coding,
    cap: usize,
    /// The request switched protocols and was sent whole with its head:
    /// what passes now is the client's bytes in the new protocol.
    switched: bool,
}

/// How a request body is read.
enum Capture {
    /// A copy of the body, read whole at its end; dropped past `cap` or
    /// the budget (boxed: a waiting request's future has no bytes to
    /// spare).
    Copy(Box<BodyCopy>),
    /// A form's fields, read as it passes (boxed: few requests are forms).
    Form(Box<FormFields>),
}

/// A body's copy, and the share of the capture budget its capacity takes.
struct BodyCopy {
    bytes: Vec<u8>,
    held: Held,
}

/// Why a copy was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dropped {
    /// Past `request_capture_bytes`.
    TooLarge,
    /// Past what the budget had left.
    OverBudget,
}

impl BodyCopy {
    fn new(budget: &CaptureBudget) -> Self {
        Self {
            bytes: Vec::new(),
            held: budget.holder(),
        }
    }

    /// Appends `data` unless the copy would pass `cap` bytes or the
    /// budget. Grows as a `Vec` does (doubling, up to `cap`), or to just
    /// what it needs when the budget has no room for the double; each
    /// growth taken from the budget before it is allocated.
    fn push(&mut self, data: &[u8], cap: usize) -> Result<(), Dropped> {
        let needed = self.bytes.len() + data.len();
        if needed > cap {
            return Err(Dropped::TooLarge);
        }
        if needed > self.bytes.capacity() {
            let doubled = needed.max(cap.min(self.bytes.capacity() * 2));
            let target = [doubled, needed]
                .into_iter()
                .find(|&t| self.held.grow(t.saturating_sub(self.held.bytes())))
                .ok_or(Dropped::OverBudget)?;
            self.bytes.reserve_exact(target - self.bytes.len());
        }
        self.bytes.extend_from_slice(data);
        Ok(())
    }
}

/// What the request side hands to the response side.
#[derive(Debug)]
pub(super) struct UploadShared {
    bytes: AtomicU64,
    /// When the body was fully sent upstream, and what it said.
    done: Mutex<Option<(Option<Instant>, RequestInfo)>>,
    /// The body ended and `done` is filled: one load tells the response
    /// side, so it takes the lock only once, when there is something.
    ended: AtomicBool,
    /// Its copy was dropped for the capture budget: the request was not
    /// read, and that is counted.
    over_budget: AtomicBool,
    /// The client's body, when what went upstream was rewritten
    /// (`usage_mode = "inject"`): its length as received; `u64::MAX` when
    /// the body went as it came.
    received: AtomicU64,
    /// The connect the request waited for, in nanoseconds plus one (0:
    /// none yet), set by the proxy's pool as soon as it has a connection
    /// ([`ConnectClock`]): a request whose client leaves, or whose answer
    /// never comes, keeps it.
    connect: AtomicU64,
    /// Where the request is; both sides move it.
    pub(super) stage: StageCell,
    /// Model globs whose chat template opens `<think>` in the prompt
    /// (`template_opens_reasoning`), for the response side to match the
    /// model against once it is known; `None` when there are none. Kept
    /// here, on the heap, not in the exchange: a waiting request's future
    /// has no bytes to spare.
    pub(super) template_opens: Option<Arc<[String]>>,
}

// === impl Upload ===

impl Upload {
    pub(super) fn new(
        dialect: Dialect,
        method: &Method,
        headers: &HeaderMap,
        (cap, budget): (usize, &CaptureBudget),
        stage: StageCell,
        template_opens: Option<Arc<[String]>>,
    ) -> Self {
        // A coding it cannot decode: not read, as a body past its cap; nor
        // copied when it says it is longer than the cap, as its copy would
        // take the budget for nothing (a form is read as it passes, never
        // copied, whatever its length).
        let coding = Coding::of(headers);
        let declared = super::declared_length(headers);
        let fits = declared.is_none_or(|length| length <= cap as u64);
        let readable =
            dialect.reads_request() && *method == Method::POST && cap > 0 && coding.is_ok();
        let form = readable
            .then(|| headers.get(header::CONTENT_TYPE))
            .flatten()
            .and_then(|t| FormFields::new(t.as_bytes(), FORM_FIELDS));
        let capture = match form {
            // A compressed form: not read, nor copied.
            Some(_) if !matches!(coding, Ok(Coding::Identity)) => None,
            Some(form) => Some(Capture::Form(Box::new(form))),
            None => (readable && fits).then(|| Capture::Copy(Box::new(BodyCopy::new(budget)))),
        };
        Self {
            shared: Arc::new(UploadShared {
                bytes: AtomicU64::new(0),
                done: Mutex::new(None),
                ended: AtomicBool::new(false),
                over_budget: AtomicBool::new(false),
                received: AtomicU64::new(u64::MAX),
                connect: AtomicU64::new(0),
                stage,
                template_opens,
            }),
            dialect,
            capture,
            coding: coding.unwrap_or(Coding::Identity),
            cap,
            switched: false,
        }
    }

    /// The upload of a request that switches protocols (a WebSocket
    /// handshake): the request is whole with its head (it has no body), so
    /// it is sent at `at` and the request moves on to waiting for its
    /// answer; what this observes from then on is the client's bytes once
    /// switched, counted in `bytes_in` and nothing else (its end is not the
    /// request's: the session may last minutes).
    pub fn switching(mut self, at: Instant) -> Self {
        self.capture = None;
        if let Ok(mut done) = self.shared.done.lock() {
            *done = Some((Some(at), RequestInfo::default()));
        }
        self.shared.ended.store(true, Ordering::Release);
        self.shared.stage.advance(Stage::WaitingHeaders);
        self.switched = true;
        self
    }

    pub(super) fn shared(&self) -> Arc<UploadShared> {
        self.shared.clone()
    }

    /// The handle the proxy's pool stamps the request's connect with.
    pub fn connect_clock(&self) -> ConnectClock {
        ConnectClock(self.shared.clone())
    }
}

/// Where the proxy's upstream pool writes the connect a request waited for
/// (zero on a pooled connection), once it has a connection for it: the
/// `upstream_connect` phase is the request's from then on, whether its
/// answer comes or not (before 2026-12-07 it was taken with the response
/// head, and lost when the client left first or no head came). Carried in
/// the request's extensions, as the pool sees only the request.
#[derive(Clone)]
pub struct ConnectClock(Arc<UploadShared>);

impl ConnectClock {
    /// The request has a connection, after waiting `took` for it; a later
    /// connect (the request sent again on another) replaces it.
    pub fn connected(&self, took: Duration) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX - 1);
        self.0.connect.store(nanos + 1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for ConnectClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnectClock")
    }
}

impl Observe for Upload {
    fn on_data(&mut self, data: &Bytes, _at: Instant) {
        self.shared
            .bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        match &mut self.capture {
            Some(Capture::Copy(copy)) => {
                if let Err(dropped) = copy.push(data, self.cap) {
                    let over_budget = dropped == Dropped::OverBudget;
                    self.shared
                        .over_budget
                        .store(over_budget, Ordering::Relaxed);
                    self.capture = None;
                }
            }
            Some(Capture::Form(form)) => form.feed(data),
            None => {}
        }
    }

    fn on_end(self, end: End, at: Instant) {
        if self.switched {
            return;
        }
        let complete = end == End::Complete;
        let info = match (self.capture, complete) {
            (Some(Capture::Copy(copy)), true) => decode_whole(self.coding, copy.bytes, self.cap)
                .map(|plain| RequestInfo::parse(self.dialect, &plain))
                .unwrap_or_default(),
            (Some(Capture::Form(form)), true) => RequestInfo::from_form(|i| form.value(i)),
            _ => RequestInfo::default(),
        };
        if let Ok(mut done) = self.shared.done.lock() {
            *done = Some((complete.then_some(at), info));
        }
        self.shared.ended.store(true, Ordering::Release);
        // Failed or complete, the body is no longer coming.
        self.shared.stage.advance(Stage::WaitingHeaders);
    }
}

// === impl UploadShared ===

impl UploadShared {
    /// Moves what the request body said, and when it was sent, into the
    /// timeline, once the body ended; returns whether it had (the request
    /// is then read: its model is known, or known to be absent).
    pub(super) fn take(&self, timeline: &mut Timeline) -> bool {
        if !self.ended.load(Ordering::Acquire) {
            return false;
        }
        let done = self.done.lock().ok().and_then(|mut d| d.take());
        if let Some((sent, info)) = done {
            timeline.request_sent = sent;
            timeline.request = info;
            self.count_loss(timeline);
        }
        true
    }

    /// Moves what the request side learned into the timeline, at its end;
    /// a copy dropped for the budget is counted even when the body never
    /// ended (the answer came first).
    pub(super) fn fill(&self, timeline: &mut Timeline) {
        timeline.connect = self.connect().or(timeline.connect);
        timeline.bytes_in = match self.received.load(Ordering::Relaxed) {
            u64::MAX => self.bytes.load(Ordering::Relaxed),
            received => received,
        };
        self.take(timeline);
        self.count_loss(timeline);
    }

    /// The request was not sent: no connect is its.
    pub(super) fn forget_connect(&self) {
        self.connect.store(0, Ordering::Relaxed);
    }

    /// The connect the request waited for, once it has a connection.
    pub(super) fn connect(&self) -> Option<Duration> {
        match self.connect.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(Duration::from_nanos(nanos - 1)),
        }
    }

    /// The body the client sent had `received` bytes; what went upstream
    /// was rewritten.
    pub(super) fn received_whole(&self, received: u64) {
        self.received.store(received, Ordering::Relaxed);
    }

    /// Counts a copy dropped for the budget, once per request, whichever
    /// of its reads (this copy, `inject`'s) found no room.
    fn count_loss(&self, timeline: &mut Timeline) {
        if self.over_budget.swap(false, Ordering::Relaxed) {
            over_budget(timeline);
        }
    }
}

/// Counts, once, a request body left unread for the capture budget.
pub(super) fn over_budget(timeline: &mut Timeline) {
    if !timeline
        .parse_errors
        .contains(&ParseError::RequestOverBudget)
    {
        timeline.parse_error(ParseError::RequestOverBudget);
    }
}
