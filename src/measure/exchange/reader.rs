//! Reading a copy of the response body: SSE or NDJSON events through the
//! dialect into the timeline, or a whole JSON body at its end (or only its
//! ends, for a dialect that reads those); a gzip,
//! deflate, brotli or zstd body decoded first (`coding`).

use http::{header, HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::{
    measure::coding::{Busy, Coding, Inflate},
    measure::dialect::{Dialect, Events, Framed, ParseError, Parsed, Shared},
    measure::frame::ends::{BodyEnds, Ends},
    measure::frame::ndjson::NdjsonFramer,
    measure::frame::sse::SseFramer,
    measure::timeline::Timeline,
};

/// How a response body is read: its copy inflated if it is compressed,
/// then read as [`Read`] says.
pub(super) struct Reader {
    read: Read,
    /// Boxed: most responses are not compressed, and an exchange lives as
    /// long as its stream.
    inflate: Option<Box<Inflate>>,
}

/// How a response body's (inflated) bytes are read.
enum Read {
    /// Server-Sent Events.
    Sse {
        framer: SseFramer,
        events: Events,
        oversized: u64,
    },
    /// Newline-delimited JSON (Ollama).
    Ndjson {
        framer: NdjsonFramer,
        dialect: Dialect,
        oversized: u64,
    },
    /// A whole JSON body, read at its end; `None` once over the cap.
    Json {
        body: Option<Vec<u8>>,
        cap: usize,
        dialect: Dialect,
        /// The body itself tells its dialect, as a body on this shared
        /// path does ([`Shared::body_of`]).
        by_body: Option<Shared>,
        /// Its counts are recorded (not for an error status's body, read
        /// only to tell its dialect).
        record: bool,
    },
    /// A whole JSON body of a dialect that reads its ends
    /// ([`Dialect::reads_ends`]), read at its end, whatever its size.
    Ends { ends: BodyEnds, dialect: Dialect },
    /// A body whose head says nothing of its type (no `content-type`): read
    /// as its first bytes show ([`sniff`]), which are held until they do.
    Sniff {
        held: Vec<u8>,
        dialect: Dialect,
        max_event_bytes: usize,
    },
    /// Not read: timed end to end only.
    Skip,
}

/// The most kept at each end of a body read by its ends (or
/// `max_event_bytes`, if lower): room for the members around an
/// embeddings answer's vectors.
const ENDS_CAP: usize = 4096;

// === impl Reader ===

impl Reader {
    /// A body that is not read.
    pub(super) fn skip() -> Self {
        Self {
            read: Read::Skip,
            inflate: None,
        }
    }

    /// Chooses how to read a response, and says why if it cannot be read.
    pub(super) fn for_response(
        dialect: Dialect,
        status: StatusCode,
        headers: &HeaderMap,
        max_event_bytes: usize,
    ) -> (Self, Option<ParseError>) {
        if !dialect.reads_body() || !status.is_success() {
            return (Self::skip(), None);
        }
        let Ok(coding) = Coding::of(headers) else {
            return (Self::skip(), Some(ParseError::Encoding));
        };
        let read = Read::for_response(dialect, headers, max_event_bytes);
        let inflate = match read {
            Read::Skip => None,
            _ => match Inflate::budgeted(coding) {
                Ok(inflate) => inflate.map(Box::new),
                Err(Busy) => return (Self::skip(), Some(ParseError::Encoding)),
            },
        };
        (Self { read, inflate }, None)
    }

    /// The body of an error answer on a shared path, read only to tell
    /// whose it is (its counts are not recorded, as no error body's are):
    /// an uncompressed JSON one, up to `max_event_bytes`; else none.
    pub(super) fn error_body(headers: &HeaderMap, max_event_bytes: usize) -> Self {
        let plain = !headers.contains_key(header::CONTENT_ENCODING);
        if !plain || Media::of(headers) != Media::Json {
            return Self::skip();
        }
        let read = Read::Json {
            body: Some(Vec::new()),
            cap: max_event_bytes,
            dialect: Dialect::Unknown,
            by_body: None,
            record: false,
        };
        Self {
            read,
            inflate: None,
        }
    }

    /// Has a whole body read as the dialect it shows itself to be on
    /// `shared`, which [`Reader::finish`] returns; whether the body is read
    /// whole (else nothing changes).
    pub(super) fn tell_by_body(&mut self, shared: Shared) -> bool {
        match &mut self.read {
            Read::Json { by_body, .. } => {
                *by_body = Some(shared);
                true
            }
            _ => false,
        }
    }

    /// Has an event stream's events read as the dialect its first event
    /// shows itself to be on `shared`, which [`Reader::told`] then
    /// returns; whether the body is such a stream (else nothing changes).
    pub(super) fn tell_by_event(&mut self, shared: Shared) -> bool {
        match &mut self.read {
            Read::Sse { events, .. } if shared.told_by_event() => {
                events.tell_by_first(shared);
                true
            }
            _ => false,
        }
    }

    /// The dialect the first event told ([`Reader::tell_by_event`]), once.
    pub(super) fn told(&mut self) -> Option<Dialect> {
        match &mut self.read {
            Read::Sse { events, .. } => events.told(),
            _ => None,
        }
    }

    /// Whether the body is read as an event stream, as its head or its
    /// first bytes said (not one still waiting for bytes that tell).
    pub(super) fn is_event_stream(&self) -> bool {
        matches!(self.read, Read::Sse { .. } | Read::Ndjson { .. })
    }

    /// Whether the body is read as a stream of events.
    pub(super) fn is_stream(&self) -> bool {
        // A body whose first bytes will tell is taken for a stream until
        // they do, as an unlabelled body nearly always is one: so that the
        // request waits for its first token, and `inject`'s usage chunk
        // is looked for.
        matches!(
            self.read,
            Read::Sse { .. } | Read::Ndjson { .. } | Read::Sniff { .. }
        )
    }

    /// Whether the body may still name the model that answered: an event
    /// stream of a dialect whose events carry one, or a whole body (read at
    /// its end). A body that is not read never names one.
    pub(super) fn may_name_model(&self) -> bool {
        match &self.read {
            Read::Sse { events, .. } => events.dialect().streams_model(),
            Read::Ndjson { dialect, .. } => dialect.streams_model(),
            Read::Json { .. } | Read::Ends { .. } | Read::Sniff { .. } => true,
            Read::Skip => false,
        }
    }

    /// Reads the next bytes of the body, which arrived at `at`. A body that
    /// cannot be inflated is read no further, and counted once.
    ///
    /// `template`: the model globs of `template_opens_reasoning` while the
    /// request names no model, so that the event that names it in the
    /// response settles how its answer's text is read before that text is
    /// (the same frame may carry both).
    pub(super) fn feed(
        &mut self,
        data: &[u8],
        at: Instant,
        timeline: &mut Timeline,
        template: Option<&[String]>,
    ) {
        let Some(inflate) = &mut self.inflate else {
            return self.read.feed(data, at, timeline, template);
        };
        let read = &mut self.read;
        let inflated = inflate.feed(data, &mut |plain| read.feed(plain, at, timeline, template));
        if read.is_done() {
            // A whole body past its cap (counted as such): nothing more is
            // read, so nothing more is decoded, and how the decoding would
            // have gone on counts for nothing.
            self.inflate = None;
        } else if inflated.is_err() {
            self.broken(timeline);
        }
    }

    /// The body ended (`whole`: it reached its end, it was not cut): reads
    /// what is left. A compressed body that was cut is not counted as one
    /// that could not be inflated, nor a whole JSON body that was cut as
    /// one that could not be read (its last bytes are not its end, and
    /// might even read as the members of an object inside): its outcome
    /// says what happened. Returns
    /// the dialect a whole body on a shared path showed itself to be
    /// ([`Shared::body_of`]), when one was read and told.
    pub(super) fn finish(&mut self, whole: bool, timeline: &mut Timeline) -> Option<Dialect> {
        if let Some(inflate) = &mut self.inflate {
            let (read, at) = (&mut self.read, Instant::now());
            let inflated = inflate.finish(&mut |plain| read.feed(plain, at, timeline, None));
            if inflated.is_err() && whole {
                if !self.is_event_stream() {
                    self.broken(timeline);
                    return None;
                }
                // A stream's events read so far stand: its coding ended
                // short as a plain stream's last event would, at a cut.
                self.inflate = None;
                timeline.coding_ended_short();
            }
        }
        if !whole && matches!(self.read, Read::Json { .. } | Read::Ends { .. }) {
            return None;
        }
        self.read.finish(timeline)
    }

    /// Whether the body's copy is still being inflated.
    #[cfg(test)]
    pub(super) fn inflating(&self) -> bool {
        self.inflate.is_some()
    }

    /// The compressed copy cannot be read on: what it gave so far stays
    /// read, a whole body is dropped.
    fn broken(&mut self, timeline: &mut Timeline) {
        self.read = Read::Skip;
        self.inflate = None;
        timeline.parse_error(ParseError::Encoding);
    }
}

// === impl Read ===

impl Read {
    /// How a response's body, once inflated, is read.
    fn for_response(dialect: Dialect, headers: &HeaderMap, max_event_bytes: usize) -> Self {
        match Media::of(headers) {
            Media::Other if !headers.contains_key(header::CONTENT_TYPE) => Self::Sniff {
                held: Vec::new(),
                dialect,
                max_event_bytes,
            },
            media => Self::of_media(media, dialect, max_event_bytes),
        }
    }

    /// How a body of type `media` is read.
    fn of_media(media: Media, dialect: Dialect, max_event_bytes: usize) -> Self {
        match media {
            Media::EventStream => Self::Sse {
                framer: SseFramer::new(max_event_bytes),
                events: Events::new(dialect),
                oversized: 0,
            },
            Media::Ndjson => Self::Ndjson {
                framer: NdjsonFramer::new(max_event_bytes),
                dialect,
                oversized: 0,
            },
            Media::Json if dialect.reads_ends() => Self::Ends {
                ends: BodyEnds::new(ENDS_CAP.min(max_event_bytes)),
                dialect,
            },
            Media::Json => Self::Json {
                body: Some(Vec::new()),
                cap: max_event_bytes,
                dialect,
                by_body: None,
                record: true,
            },
            Media::Other => Self::Skip,
        }
    }

    /// Whether nothing more of the body will be read.
    fn is_done(&self) -> bool {
        matches!(self, Self::Skip | Self::Json { body: None, .. })
    }

    /// Reads the next bytes of the body, which arrived at `at`.
    fn feed(
        &mut self,
        data: &[u8],
        at: Instant,
        timeline: &mut Timeline,
        template: Option<&[String]>,
    ) {
        match self {
            Self::Sse {
                framer,
                events,
                oversized,
            } => {
                framer.feed(
                    data,
                    &mut |event| match events.parse(event.event, event.data) {
                        Ok(parsed) => record(timeline, &parsed, at, template),
                        Err(e) => timeline.parse_error(e),
                    },
                );
                count_oversized(oversized, framer.stats().oversized, timeline);
            }
            Self::Ndjson {
                framer,
                dialect,
                oversized,
            } => {
                framer.feed(data, &mut |line| {
                    read_line(*dialect, line, at, timeline, template)
                });
                count_oversized(oversized, framer.stats().oversized, timeline);
            }
            Self::Json {
                body, cap, record, ..
            } => {
                if let Some(copy) = body {
                    if copy.len() + data.len() <= *cap {
                        copy.extend_from_slice(data);
                    } else {
                        *body = None;
                        if *record {
                            timeline.parse_error(ParseError::TooLarge);
                        }
                    }
                }
            }
            Self::Ends { ends, .. } => ends.feed(data),
            Self::Sniff {
                held,
                dialect,
                max_event_bytes,
            } => {
                held.extend_from_slice(data);
                let Some(media) = sniff(held) else {
                    return;
                };
                let held = std::mem::take(held);
                *self = Self::of_media(media, *dialect, *max_event_bytes);
                timeline.streamed = matches!(self, Self::Sse { .. } | Self::Ndjson { .. });
                self.feed(&held, at, timeline, template);
            }
            Self::Skip => {}
        }
    }

    /// The body ended: reads what is left. A whole body that tells its
    /// dialect is read as that, which is returned; one that does not is
    /// read as the reader's.
    fn finish(&mut self, timeline: &mut Timeline) -> Option<Dialect> {
        match self {
            Self::Ndjson {
                framer, dialect, ..
            } => {
                let at = Instant::now();
                framer.finish(&mut |line| {
                    // A last line without its newline is read, as Ollama's
                    // client reads it; one that ends inside a value was
                    // cut there, as an SSE event without its blank line
                    // is: the stream is judged by the lines before it.
                    if !ends_inside_a_value(line) {
                        read_line(*dialect, line, at, timeline, None);
                    }
                });
                None
            }
            Self::Json {
                body: Some(body),
                dialect,
                by_body,
                record,
                ..
            } => {
                let shown = by_body.and_then(|shared| shared.body_of(body));
                if *record {
                    match shown.unwrap_or(*dialect).parse_body(body) {
                        Ok(parsed) => timeline.record_body(&parsed),
                        // JSON that ends inside a value, though the body
                        // ended cleanly: cut short (a gateway that caught
                        // a failure and ended the body), as a stream cut
                        // before its closing event is. Its outcome says
                        // so; it is no payload of another shape.
                        Err(ParseError::Json) if ends_inside_a_value(body) => {
                            timeline.body_cut_short = true;
                        }
                        Err(e) => timeline.parse_error(e),
                    }
                }
                shown
            }
            Self::Ends { ends, dialect } => {
                let parsed = match ends.ends() {
                    Ends::Whole(body) => dialect.parse_body(body),
                    Ends::Cut { head, tail } => dialect.parse_cut(head, tail),
                };
                match parsed {
                    Ok(parsed) => timeline.record_body(&parsed),
                    Err(e) => timeline.parse_error(e),
                }
                None
            }
            Self::Sse { .. } | Self::Json { body: None, .. } | Self::Sniff { .. } | Self::Skip => {
                None
            }
        }
    }
}

/// Whether `body` is JSON that ends inside a value: what a whole body cut
/// short reads as (`{"id":"c1","choices":[{"mess`). Only asked of a body
/// that could not be read, once.
fn ends_inside_a_value(body: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err_and(|e| e.is_eof())
        && !body.trim_ascii().is_empty()
}

/// What a response's `content-type` says of how to read it, matched on
/// its start in any case, without copying it (one lookup per head, twice
/// for a request on a shared path).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Media {
    EventStream,
    Ndjson,
    Json,
    /// Anything else, or no text (absent, or not visible ASCII).
    Other,
}

/// Whether a head says its body is JSON.
pub(super) fn is_json(headers: &HeaderMap) -> bool {
    Media::of(headers) == Media::Json
}

impl Media {
    fn of(headers: &HeaderMap) -> Self {
        let value = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .as_bytes();
        let starts = |prefix: &str| {
            value
                .get(..prefix.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(prefix.as_bytes()))
        };
        if starts("text/event-stream") {
            Self::EventStream
        } else if starts("application/x-ndjson") {
            Self::Ndjson
        } else if starts("application/json") {
            Self::Json
        } else {
            Self::Other
        }
    }
}

/// What a body without a `content-type` is, from its first bytes once
/// they tell (`None` until then): an SSE stream when it starts with a
/// field (`data:`, `event:`, `id:`, `retry:`) or a comment (`:`), as a
/// server that forgets the header sends one (Starlette's
/// `StreamingResponse` without `media_type`); a whole JSON body when it
/// starts with `{` or `[`; else one that is not read. Whitespace and a
/// byte-order mark before are skipped; past 64 bytes without telling, it
/// is not read.
fn sniff(held: &[u8]) -> Option<Media> {
    const FIELDS: [&[u8]; 4] = [b"data:", b"event:", b"id:", b"retry:"];
    let start = held.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(held);
    let start = &start[start.iter().take_while(|b| b.is_ascii_whitespace()).count()..];
    let Some(first) = start.first() else {
        return (held.len() > 64).then_some(Media::Other);
    };
    match first {
        b'{' | b'[' => return Some(Media::Json),
        b':' => return Some(Media::EventStream),
        _ => {}
    }
    if FIELDS.iter().any(|f| start.starts_with(f)) {
        return Some(Media::EventStream);
    }
    let may_be_one = FIELDS.iter().any(|f| f.starts_with(start));
    (!may_be_one || held.len() > 64).then_some(Media::Other)
}

impl Framed {
    /// How a response with these headers says its body comes, its
    /// `content-type` matched as the reader matches it ([`Media`]).
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        match Media::of(headers) {
            Media::EventStream => Self::Sse,
            Media::Ndjson => Self::Ndjson,
            Media::Json | Media::Other => Self::Whole,
        }
    }
}

fn read_line(
    dialect: Dialect,
    line: &[u8],
    at: Instant,
    timeline: &mut Timeline,
    template: Option<&[String]>,
) {
    match dialect.parse_event(b"", line) {
        Ok(parsed) => record(timeline, &parsed, at, template),
        Err(e) => timeline.parse_error(e),
    }
}

/// Records a streamed event; while the model is unnamed (`template`), an
/// event that names it first may open the reasoning before its text is
/// split.
fn record(timeline: &mut Timeline, parsed: &Parsed<'_>, at: Instant, template: Option<&[String]>) {
    if let Some(globs) = template {
        timeline.named_by_response(parsed, globs);
    }
    timeline.record(parsed, at);
}

fn count_oversized(seen: &mut u64, now: u64, timeline: &mut Timeline) {
    while *seen < now {
        *seen += 1;
        timeline.parse_error(ParseError::TooLarge);
    }
}

#[cfg(test)]
mod tests {
    use http::{header::CONTENT_TYPE, HeaderMap, HeaderValue};

    use super::Media;

    fn of(value: &'static [u8]) -> Media {
        let mut headers = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_bytes(value) {
            headers.insert(CONTENT_TYPE, value);
        }
        Media::of(&headers)
    }

    /// Matched on the type's start, in any case (as the lowercased copy it
    /// replaces matched); a value that is not visible ASCII is no type.
    #[test]
    fn media_types_match_by_their_start_in_any_case() {
        assert_eq!(of(b"Text/Event-Stream; charset=utf-8"), Media::EventStream);
        assert_eq!(of(b"application/x-ndjson"), Media::Ndjson);
        assert_eq!(of(b"APPLICATION/JSON"), Media::Json);
        assert_eq!(of(b"application/jsonl"), Media::Json);
        assert_eq!(of(b"text/plain"), Media::Other);
        assert_eq!(of(b"text/event"), Media::Other);
        assert_eq!(of(b"text/event-stream\xff"), Media::Other);
        assert_eq!(Media::of(&HeaderMap::new()), Media::Other);
    }
}
