//! One request/response exchange as the proxy saw it. [`Exchange`] observes
//! the response body on its way to the client, reads a copy of it into a
//! [`Timeline`], writes one access-log line when it ends and hands the
//! finished timeline to the [`TimelineSink`].
//!
//! Before the end it tells the sink what is already known: each
//! [`Milestone`] once, when it was reached and the model label is settled,
//! and each move of the request's [`Stage`] (shared with the upload).
//!
//! The log line never holds bodies, query strings or headers, so no prompt,
//! completion, API key or cookie can reach the logs.

mod head;
mod reader;
mod stage;
mod upload;

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http::{response, Method, Request, StatusCode, Version};
use tokio::time::Instant;

pub(crate) use self::upload::{ConnectClock, Upload};
use self::{reader::Reader, stage::StageCell, upload::UploadShared};
use crate::{
    measure::dialect::{Dialect, Framed, Router, Shared},
    measure::observe::{End, Observe},
    measure::read::{LearntServer, ReadSettings},
    measure::slo::{glob, Limits},
    measure::timeline::{Hex, Milestones, Outcome, RequestIds, Stage, Timeline, TimelineSink},
};

/// The response side of an exchange; observes the body sent to the client.
pub struct Exchange {
    timeline: Timeline,
    method: Method,
    /// Path only: query strings may carry keys (`?key=…`). A `Box<str>`,
    /// not a `String`: it never grows, and the 8 bytes of capacity would be
    /// kept by every request waiting for its response head (the proxy's
    /// future for it fills jemalloc's 1,792-byte class).
    path: Box<str>,
    version: Version,
    reader: Reader,
    /// Set when the proxy answered itself: the failure's outcome.
    local_failure: Option<Outcome>,
    upload: Arc<UploadShared>,
    /// `max_event_bytes`, at most `u32::MAX` (4 GiB, more than any event
    /// could be held in): 32 bits with the next, so that the learnt server
    /// of a shared path costs a request no bytes.
    max_event_bytes: u32,
    /// The access log cuts `model` to this many bytes (at most `u32::MAX`).
    max_logged_model_bytes: u32,
    sink: Option<Arc<dyn TimelineSink>>,
    /// The request body's model is known (or known absent).
    request_read: bool,
    /// A request on a path several API families answer whose response has
    /// not yet told which did (the timeline names the server last seen
    /// answering there, or the path's dialect, until then); its label is
    /// not settled meanwhile.
    undecided: Option<Shared>,
    /// On a shared path ([`Shared`]): the server seen answering there,
    /// which a successful answer that tells updates.
    learnt: Option<LearntServer>,
    /// The model label can no longer change: milestones may be delivered.
    settled: bool,
    /// The milestones reached at the last [`Exchange::progress`].
    noticed: Milestones,
    /// The timeline has been finished and handed over.
    done: bool,
}

// === impl Exchange ===

impl Exchange {
    /// Starts an exchange for a request whose head arrived at `start`, and
    /// the observer of its body on the way upstream.
    pub fn start<B>(
        start: Instant,
        request: &Request<B>,
        reading: &ReadSettings,
        sink: Option<Arc<dyn TimelineSink>>,
    ) -> (Self, Upload) {
        let path = request.uri().path();
        let shared = reading.shared(request.method() == Method::POST, path);
        let dialect = reading.starting(shared, path);
        if let Some(sink) = &sink {
            sink.started(dialect);
        }
        // After `started`: a request is in flight before it is in a stage.
        let stage = StageCell::new(dialect, sink.clone());
        // `POST /`'s body is read as TGI's in case TGI answers, `/rerank`'s
        // as a rerank's in case a Cohere-style server does, whatever they
        // start under; what it said is dropped if the answer is TEI's or
        // nothing known (`request_of_known_endpoint`).
        let upload = Upload::new(
            match shared {
                Some(Shared::Root) => Dialect::Tgi,
                Some(Shared::Rerank) => Dialect::Rerank,
                _ => dialect,
            },
            request.method(),
            request.headers(),
            (reading.request_capture_bytes, &reading.capture_budget),
            stage,
            Some(reading.template_opens_reasoning.clone()).filter(|globs| !globs.is_empty()),
        );
        let mut timeline = Timeline::new(start, dialect);
        let headers = request.headers();
        timeline.labels = reading
            .label_headers
            .iter()
            .map(|name| header_text(headers, name))
            .collect();
        timeline.ids = RequestIds::from_headers(headers, &reading.request_id_headers);
        if reading.slo_headers {
            timeline.request_slo = request_slo(headers);
        }
        let exchange = Self {
            timeline,
            method: request.method().clone(),
            path: Box::from(path),
            version: request.version(),
            reader: Reader::skip(),
            local_failure: None,
            upload: upload.shared(),
            max_event_bytes: u32::try_from(reading.max_event_bytes).unwrap_or(u32::MAX),
            max_logged_model_bytes: u32::try_from(reading.max_logged_model_bytes)
                .unwrap_or(u32::MAX),
            sink,
            request_read: false,
            undecided: shared,
            learnt: shared.map(|s| reading.learnt.of(s).clone()),
            settled: false,
            noticed: Milestones::default(),
            done: false,
        };
        (exchange, upload)
    }

    /// The upstream's response head arrived at `at`.
    pub fn on_response_head(&mut self, head: &response::Parts, at: Instant) {
        // The pool stamped it before it sent the request.
        self.timeline.connect = self.upload.connect();
        self.timeline.status = Some(head.status);
        self.timeline.response_head = Some(at);
        self.timeline.length = declared_length(&head.headers)
            .and_then(|n| u32::try_from(n).ok())
            .and_then(std::num::NonZeroU32::new);
        let router = Router::of(&head.headers);
        let reported = head::reported(&head.headers, router);
        self.timeline.server = reported.server;
        if let Some(shared) = self.undecided {
            let framed = Framed::of(&head.headers);
            let success = head.status.is_success();
            let told = match shared.told_by_head() {
                // TGI's and TEI's errors carry no router header: a JSON
                // error there (theirs are `{"error", "error_type"}`) stays
                // under the server last seen answering; any other (the
                // plain-text refusal a scanner's junk `POST /` gets) is
                // the path's.
                true if !success => Some(match reader::is_json(&head.headers) {
                    true => self.timeline.dialect,
                    false => shared.path_dialect(),
                }),
                _ => shared.answered_by(framed, router),
            };
            if let Some(dialect) = told {
                self.decide(dialect, success);
            }
        }
        // TEI's count, for a request of a known endpoint (`tei`, or TEI's
        // OpenAI route): an `unknown` one is timed only.
        match reported.usage {
            Some(usage) if self.timeline.dialect != Dialect::Unknown => {
                self.timeline.usage = usage;
            }
            _ => {}
        }
        let (reader, error) = Reader::for_response(
            self.timeline.dialect,
            head.status,
            &head.headers,
            self.max_event_bytes as usize,
        );
        self.reader = reader;
        if let Some(shared) = self.undecided {
            if !head.status.is_success() {
                // Not read for its counts, but the servers' error bodies
                // differ: read to tell which server refused.
                let max = self.max_event_bytes as usize;
                self.reader = Reader::error_body(&head.headers, max);
            }
            if !self.reader.tell_by_body(shared) && !self.reader.tell_by_event(shared) {
                // No whole body, nor first event, will tell: the dialect it
                // started under stays.
                self.decide(self.timeline.dialect, false);
            }
        }
        self.timeline.streamed = self.reader.is_stream();
        if let Some(error) = error {
            self.timeline.parse_error(error);
        }
        self.progress();
    }

    /// The client's request: its method and HTTP version.
    pub(crate) fn request_line(&self) -> (&Method, Version) {
        (&self.method, self.version)
    }

    /// The dialect of the request.
    pub fn dialect(&self) -> Dialect {
        self.timeline.dialect
    }

    /// The request is on a path several API families answer and its
    /// response has not yet told which did: its dialect is the path's, or
    /// the server last seen answering there.
    pub(crate) fn undecided(&self) -> bool {
        self.undecided.is_some()
    }

    /// `usage_mode = "inject"` found no room in the capture budget to read
    /// the request body: it went upstream unchanged, and that is counted.
    pub(crate) fn set_over_budget(&mut self) {
        upload::over_budget(&mut self.timeline);
    }

    /// The proxy added `stream_options.include_usage` to the request,
    /// whose body had `received` bytes as the client sent it (what went
    /// upstream, and is observed, is the rewritten body).
    pub(crate) fn set_usage_injected(&mut self, received: u64) {
        self.timeline.usage_injected = true;
        self.upload.received_whole(received);
    }

    /// Whether the proxy added `stream_options.include_usage`.
    pub fn usage_injected(&self) -> bool {
        self.timeline.usage_injected
    }

    /// Whether the response is an SSE or NDJSON stream being read.
    pub fn streamed(&self) -> bool {
        self.timeline.streamed
    }

    /// Records that the proxy answered itself because forwarding failed;
    /// `sent`: the request may have gone upstream. One that did not (no
    /// connection could be made) keeps what its body said, read for the
    /// measurement, but has no upload phase: nothing was uploaded.
    pub(crate) fn set_local_failure(&mut self, status: StatusCode, outcome: Outcome, sent: bool) {
        self.timeline.status = Some(status);
        self.local_failure = Some(outcome);
        if !sent {
            self.read_request();
            self.timeline.request_sent = None;
            // A connection it had before (a pooled one the upstream closed,
            // then a connect that failed) carried nothing of it.
            self.upload.forget_connect();
            self.timeline.connect = None;
        }
    }

    fn outcome(&self, end: End) -> Outcome {
        let status = self.timeline.status.map_or(0, |s| s.as_u16());
        match (self.local_failure, end) {
            (Some(failure), _) => failure,
            (None, End::Dropped) if self.sink.as_ref().is_some_and(|s| s.cutting()) => {
                Outcome::Shutdown
            }
            (None, End::Dropped) => Outcome::ClientCancelled,
            (None, End::Failed { timeout: true }) => Outcome::Timeout,
            (None, End::Failed { timeout: false }) => Outcome::UpstreamError,
            (None, End::Complete) if status >= 400 => Outcome::HttpError,
            (None, End::Complete) if self.unfinished() => Outcome::UpstreamError,
            (None, End::Complete) => Outcome::Ok,
        }
    }

    /// A whole JSON body that ended inside a value
    /// ([`Timeline::body_cut_short`]), or a stream whose body ended
    /// cleanly before it said it was whole: no
    /// closing event and no finish reason (see [`Dialect::closes_streams`]),
    /// while its last event was read (one that could not be may have been
    /// the closing one; a coding that ended short at the end was a cut,
    /// [`Timeline::coding_ended_short`]). The client's answer was cut short
    /// as surely as by a reset: a gateway or load balancer that caught the
    /// upstream's failure and ended the body (a chunked body's last chunk
    /// written for it), which hyper reads as a whole body. Counted
    /// `upstream_error` rather than `ok`, which goodput would take.
    ///
    /// Judged only of a stream its dialect read a token in: one whose
    /// events it did not know (an older llama.cpp's native events on
    /// `/v1/completions`, speaches' `{"text"}` transcription events, a
    /// gateway's whole JSON answer labelled `text/event-stream`) is not
    /// known to be cut, and one cut before its first token is left `ok`
    /// with the rest of what it could not tell.
    fn unfinished(&self) -> bool {
        let t = &self.timeline;
        if t.body_cut_short {
            return true;
        }
        self.reader.is_event_stream()
            && t.tokens.token_events > 0
            && t.dialect.closes_streams()
            && !t.stream_done
            && t.finish_class.is_none()
            && !t.last_unread
    }

    fn log(&self) {
        let t = &self.timeline;
        let ms = |d: Option<Duration>| d.map(crate::measure::timeline::millis);
        let model = t
            .model
            .as_deref()
            .map(|m| cut(m, self.max_logged_model_bytes as usize));
        let ids = &t.ids;
        let trace = ids.trace.as_ref();
        tracing::info!(
            target: "tokenclock::access",
            method = %self.method,
            path = %self.path,
            version = ?self.version,
            status = t.status.map_or(0, |s| s.as_u16()),
            outcome = t.outcome.as_str(),
            dialect = t.dialect.as_str(),
            model = model.as_deref(),
            duration_ms = ms(t.e2e()),
            ttft_ms = ms(t.ttft()),
            ttfo_ms = ms(t.ttfo()),
            output_tokens = t.tokens.generated,
            token_source = t.tokens.generated_source.map(|s| s.as_str()),
            bytes_in = t.bytes_in,
            bytes_out = t.bytes_out,
            request_id = ids.request_id.as_deref(),
            trace_id = trace.map(|tp| tracing::field::display(Hex(&tp.trace_id))),
            parent_span_id = trace.map(|tp| tracing::field::display(Hex(&tp.parent_span_id))),
            response_id = ids.response_id.as_deref(),
            "Request finished."
        );
    }
}

impl Observe for Exchange {
    fn on_data(&mut self, data: &Bytes, at: Instant) {
        self.timeline.bytes_out += data.len() as u64;
        // Until the model label settles, the event that names the model
        // may decide how the answer's text is read.
        let template = match self.settled {
            true => None,
            false => self.upload.template_opens.as_deref(),
        };
        self.reader.feed(data, at, &mut self.timeline, template);
        if self.undecided.is_some() {
            if let Some(dialect) = self.reader.told() {
                self.decide(dialect, true);
            }
        }
        // A branch per frame; the work runs when a milestone is new, or
        // while the label waits for the request or the response to name it.
        if !self.settled || self.timeline.reached() != self.noticed {
            self.progress();
        }
    }

    fn on_delivery_stall(&mut self, waited: Duration) {
        self.timeline.delivery_stall += waited;
    }

    fn on_end(mut self, end: End, at: Instant) {
        self.complete(end, at);
    }
}

impl Exchange {
    /// Moves the stage to what the timeline has reached, and once the model
    /// label is settled hands the sink each milestone reached and not yet
    /// delivered. Runs once per response head and per new milestone (a
    /// handful of times per request), or per frame while the label waits.
    fn progress(&mut self) {
        self.read_request();
        let reached = self.timeline.reached();
        if reached != self.noticed {
            self.noticed = reached;
            if let Some(stage) = Stage::after_head(reached, self.timeline.streamed) {
                self.upload.stage.advance(stage);
            }
        }
        if !self.settled {
            let silent = self.timeline.response_head.is_some() && !self.reader.may_name_model();
            self.settled =
                self.undecided.is_none() && self.timeline.model_settled(self.request_read, silent);
            if !self.settled {
                return;
            }
            self.timeline.model = self.timeline.model_label();
            self.reasoning_opened_by_prompt(true);
        }
        let fresh = reached.without(self.timeline.delivered);
        if fresh.is_empty() {
            return;
        }
        if let Some(sink) = &self.sink {
            sink.progressed(&self.timeline, fresh);
        }
        self.timeline.delivered = reached;
    }

    /// Takes what the request body said into the timeline, once it ended.
    fn read_request(&mut self) {
        if !self.request_read {
            self.request_read = self.upload.take(&mut self.timeline);
            self.request_of_known_endpoint();
            if self.request_read {
                self.reasoning_opened_by_prompt(false);
            }
        }
    }

    /// The request's endpoint is `dialect`, as its response told (a
    /// request on a path several API families answer): the timeline, its
    /// stage and the sink's in-flight count move to it. Before any
    /// milestone is handed over (the label is not settled until then). A
    /// successful answer on a shared path (`learn`) also tells which
    /// server answers there, for the requests that start after it.
    fn decide(&mut self, dialect: Dialect, learn: bool) {
        self.undecided = None;
        if let (Some(server), true) = (&self.learnt, learn) {
            server.learn(dialect);
        }
        let from = std::mem::replace(&mut self.timeline.dialect, dialect);
        if from == dialect {
            return;
        }
        self.upload.stage.relabel(dialect);
        if let Some(sink) = &self.sink {
            sink.moved(from, dialect);
        }
    }

    /// Whether the prompt opened `<think>`, so that the answer's text is
    /// reasoning from its start: a raw prompt shows it
    /// ([`Dialect::raw_prompt`]); any other is wrapped in the model's
    /// template, which `template_opens_reasoning` names. Asked once the
    /// request was read (normally by the response head, before any event),
    /// with the model it named, and again once the model label is
    /// `settled`, for a model only the response names: text read before
    /// that stays answer. The dialect may still be a shared path's guess
    /// then, but the servers of one shared path take the same kind of
    /// prompt (`/generate`, `/completions`: raw; `/api/chat`: a chat).
    fn reasoning_opened_by_prompt(&mut self, settled: bool) {
        let t = &mut self.timeline;
        let raw = t.dialect.raw_prompt();
        let model = match settled {
            true => t.model.as_deref(),
            false => t.request.model.as_deref().filter(|m| !m.is_empty()),
        };
        // Before it settles, a request that names no model waits for the
        // response's name.
        let listed = |globs: &[String]| match (model, settled) {
            (Some(model), _) => globs.iter().any(|g| glob(g, model)),
            (None, true) => globs.iter().any(|g| glob(g, "")),
            (None, false) => false,
        };
        let opened = match raw {
            true => t.request.opens_reasoning,
            false => self.upload.template_opens.as_deref().is_some_and(listed),
        };
        if opened {
            t.opened_by_prompt();
        }
    }

    /// A request counted `unknown` or `tei` learns nothing from its body
    /// (a `POST /` read in case TGI answered, that something else, or TEI,
    /// answered).
    fn request_of_known_endpoint(&mut self) {
        if !self.timeline.dialect.reads_request() {
            self.timeline.request = Default::default();
        }
    }

    /// Finishes the timeline, logs it and hands it over; once.
    fn complete(&mut self, end: End, at: Instant) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        // Every byte the head declared was handed to the client's
        // connection, which may then close before the body's end is told:
        // an HTTP/2 upstream's `END_STREAM` in a frame of its own after the
        // last bytes (until 2026-12-07 such an answer was
        // `client_cancelled`, and a whole JSON body's usage was not read).
        // Whole, as an HTTP/1.1 upstream's answer is at its last byte.
        let end = match end {
            End::Dropped
                if self.timeline.length.map(|n| u64::from(n.get()))
                    == Some(self.timeline.bytes_out) =>
            {
                End::Complete
            }
            end => end,
        };
        let shown = (self.reader).finish(matches!(end, End::Complete), &mut self.timeline);
        if self.undecided.is_some() {
            let success = self.timeline.status.is_some_and(|s| s.is_success());
            // An error body names a server only while no successful answer
            // has shown which answers here: once one has, an error of the
            // other's shape is more likely a gateway's in front (a rate
            // limiter, an auth proxy) than the server's.
            let known = self.learnt.as_ref().is_some_and(LearntServer::known);
            let shown = shown.filter(|_| success || !known);
            match shown {
                Some(dialect) => self.decide(dialect, success),
                None => self.decide(self.timeline.dialect, false),
            }
        }
        self.upload.fill(&mut self.timeline);
        self.request_of_known_endpoint();
        let outcome = self.outcome(end);
        self.timeline.finish(outcome, at);
        self.upload.stage.end();
        self.log();
        if let Some(sink) = &self.sink {
            sink.finished(&self.timeline);
        }
    }
}

/// A request whose client left before the response head (queued or in
/// prefill at the model server) never gets a response body to observe: it
/// ends here, as `client_cancelled`.
impl Drop for Exchange {
    fn drop(&mut self) {
        self.complete(End::Dropped, Instant::now());
    }
}

/// `text` cut to at most `max` bytes at a character boundary, marked with
/// a trailing `…` when cut: a long model name is the client's to choose,
/// and a log line must stay small.
fn cut(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let end = (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    format!("{}…", &text[..end]).into()
}

/// The length a head declares (`Content-Length`), when it is a number.
fn declared_length(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
}

fn header_text(headers: &http::HeaderMap, name: &http::HeaderName) -> Option<String> {
    let value = headers.get(name)?.to_str().ok()?.trim();
    (!value.is_empty()).then(|| value.to_owned())
}

/// Limits a request carries itself (Gateway API inference extension
/// convention): `x-slo-ttft-ms`, `x-slo-tpot-ms`.
fn request_slo(headers: &http::HeaderMap) -> Option<Limits> {
    let ms = |name: &str| {
        let value: f64 = headers.get(name)?.to_str().ok()?.trim().parse().ok()?;
        // `try_`: a value past `Duration`'s range (`1e30`) is no limit,
        // not a panic in the request's task.
        Duration::try_from_secs_f64(value / 1e3)
            .ok()
            .filter(|d| !d.is_zero())
    };
    let limits = Limits {
        ttft: ms("x-slo-ttft-ms"),
        tpot: ms("x-slo-tpot-ms"),
        ..Limits::default()
    };
    (limits != Limits::default()).then_some(limits)
}

#[cfg(test)]
mod tests;
