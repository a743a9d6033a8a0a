//! Reading a copy of the response body: SSE or NDJSON events through the
//! dialect into the timeline, or a whole JSON body at its end.

use http::{header, HeaderMap, StatusCode};
use tokio::time::Instant;

use crate::{
    measure::dialect::{Dialect, Events, ParseError},
    measure::frame::ndjson::NdjsonFramer,
    measure::frame::sse::SseFramer,
    measure::timeline::Timeline,
};

/// How a response body is read.
pub(super) enum Reader {
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
    },
    /// Not read: timed end to end only.
    Skip,
}

// === impl Reader ===

impl Reader {
    /// Chooses how to read a response, and says why if it cannot be read.
    pub(super) fn for_response(
        dialect: Dialect,
        status: StatusCode,
        headers: &HeaderMap,
        max_event_bytes: usize,
    ) -> (Self, Option<ParseError>) {
        if dialect == Dialect::Unknown || !status.is_success() {
            return (Self::Skip, None);
        }
        if headers.contains_key(header::CONTENT_ENCODING) {
            return (Self::Skip, Some(ParseError::Encoding));
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let reader = if content_type.starts_with("text/event-stream") {
            Self::Sse {
                framer: SseFramer::new(max_event_bytes),
                events: Events::new(dialect),
                oversized: 0,
            }
        } else if content_type.starts_with("application/x-ndjson") {
            Self::Ndjson {
                framer: NdjsonFramer::new(max_event_bytes),
                dialect,
                oversized: 0,
            }
        } else if content_type.starts_with("application/json") {
            Self::Json {
                body: Some(Vec::new()),
                cap: max_event_bytes,
                dialect,
            }
        } else {
            Self::Skip
        };
        (reader, None)
    }

    /// Whether the body is read as a stream of events.
    pub(super) fn is_stream(&self) -> bool {
        matches!(self, Self::Sse { .. } | Self::Ndjson { .. })
    }

    /// Whether the body may still name the model that answered: an event
    /// stream of a dialect whose events carry one, or a whole body (read at
    /// its end). A body that is not read never names one.
    pub(super) fn may_name_model(&self) -> bool {
        match self {
            Self::Sse { events, .. } => events.dialect().streams_model(),
            Self::Ndjson { dialect, .. } => dialect.streams_model(),
            Self::Json { .. } => true,
            Self::Skip => false,
        }
    }

    /// Reads the next bytes of the body, which arrived at `at`.
    pub(super) fn feed(&mut self, data: &[u8], at: Instant, timeline: &mut Timeline) {
        match self {
            Self::Sse {
                framer,
                events,
                oversized,
            } => {
                framer.feed(
                    data,
                    &mut |event| match events.parse(event.event, event.data) {
                        Ok(parsed) => timeline.record(&parsed, at),
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
                framer.feed(data, &mut |line| read_line(*dialect, line, at, timeline));
                count_oversized(oversized, framer.stats().oversized, timeline);
            }
            Self::Json { body, cap, .. } => {
                if let Some(copy) = body {
                    if copy.len() + data.len() <= *cap {
                        copy.extend_from_slice(data);
                    } else {
                        *body = None;
                        timeline.parse_error(ParseError::TooLarge);
                    }
                }
            }
            Self::Skip => {}
        }
    }

    /// The body ended: reads what is left.
    pub(super) fn finish(&mut self, timeline: &mut Timeline) {
        match self {
            Self::Ndjson {
                framer, dialect, ..
            } => {
                let at = Instant::now();
                framer.finish(&mut |line| read_line(*dialect, line, at, timeline));
            }
            Self::Json {
                body: Some(body),
                dialect,
                ..
            } => match dialect.parse_body(body) {
                Ok(parsed) => timeline.record_body(&parsed),
                Err(e) => timeline.parse_error(e),
            },
            Self::Sse { .. } | Self::Json { body: None, .. } | Self::Skip => {}
        }
    }
}

fn read_line(dialect: Dialect, line: &[u8], at: Instant, timeline: &mut Timeline) {
    match dialect.parse_event(b"", line) {
        Ok(parsed) => timeline.record(&parsed, at),
        Err(e) => timeline.parse_error(e),
    }
}

fn count_oversized(seen: &mut u64, now: u64, timeline: &mut Timeline) {
    while *seen < now {
        *seen += 1;
        timeline.parse_error(ParseError::TooLarge);
    }
}
