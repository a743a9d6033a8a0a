//! Opt-in `usage_mode = "inject"`: ask OpenAI-style servers for the usage
//! chunk the client did not ask for, and take it out again on the way back,
//! so the client still receives what it asked for and tokenclock gets exact
//! token totals.
//!
//! This is the one place tokenclock changes bytes, and only when configured:
//! the request body is read whole (up to `request_capture_bytes`) before it
//! is forwarded, and the response stream is cut at event boundaries.

use std::{
    borrow::Cow,
    collections::VecDeque,
    ops::Range,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use pin_project_lite::pin_project;
use serde::{de::IgnoredAny, Deserialize};
use serde_json::value::RawValue;

use super::client_body::{ClientBody, ClientBodyError};
use crate::measure::{
    frame::sse::SseFramer,
    read::{CaptureBudget, Held},
};

/// A request body on its way upstream: streamed as it comes, or read first.
pub(crate) enum RequestBody {
    /// The client's body, frame by frame.
    Streaming(ClientBody),
    /// Frames already read (rewritten or not), then the rest of the body.
    Replayed {
        /// Frames to send first.
        frames: VecDeque<Bytes>,
        /// What the client has not sent yet, if anything.
        rest: Option<ClientBody>,
        /// The capture budget's share that the frames read hold, given
        /// back as each is sent (boxed: the body is in a waiting request's
        /// future, which has no bytes to spare).
        held: Box<Held>,
    },
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        match self.get_mut() {
            Self::Streaming(body) => Pin::new(body).poll_frame(cx),
            Self::Replayed {
                frames, rest, held, ..
            } => match (frames.pop_front(), rest) {
                (Some(frame), _) => {
                    held.release(frame.len());
                    Poll::Ready(Some(Ok(Frame::data(frame))))
                }
                (None, Some(rest)) => Pin::new(rest).poll_frame(cx),
                (None, None) => Poll::Ready(None),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Self::Streaming(body) => body.is_end_stream(),
            Self::Replayed { frames, rest, .. } => {
                frames.is_empty() && rest.as_ref().is_none_or(|r| r.is_end_stream())
            }
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Self::Streaming(body) => body.size_hint(),
            Self::Replayed { frames, rest, .. } => {
                let buffered: u64 = frames.iter().map(|f| f.len() as u64).sum();
                let rest = rest
                    .as_ref()
                    .map_or_else(|| SizeHint::with_exact(0), |r| r.size_hint());
                let mut hint = SizeHint::new();
                hint.set_lower(buffered + rest.lower());
                if let Some(upper) = rest.upper() {
                    hint.set_upper(buffered + upper);
                }
                hint
            }
        }
    }
}

/// What [`read_and_inject`] did to a body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Read {
    /// Rewritten to ask for usage; `received` bytes came from the client.
    Rewritten { received: usize },
    /// Forwarded as it came: not such JSON, or over `cap`.
    Unchanged,
    /// Forwarded as it came, unread: the capture budget had no room.
    OverBudget,
}

/// Reads the body (up to `cap` bytes) and, for a streamed request without
/// `stream_options.include_usage`, adds it. Returns the body to forward and
/// what was done to it. Bodies over `cap`, or not such JSON, are forwarded
/// unchanged; a body the client fails to send is an error. What is read is
/// taken from `budget`, the one the bodies' copies share
/// (`request_capture_total_bytes`), and given back as it goes upstream: a
/// body that does not fit in what is left is forwarded unchanged too, from
/// where it stopped.
pub(super) async fn read_and_inject(
    mut body: ClientBody,
    cap: usize,
    budget: &CaptureBudget,
) -> Result<(RequestBody, Read), ClientBodyError> {
    let mut frames = VecDeque::new();
    let mut total = 0usize;
    let mut held = Box::new(budget.holder());
    while let Some(frame) = body.frame().await {
        let mut room = true;
        if let Ok(data) = frame?.into_data() {
            total += data.len();
            room = held.grow(data.len());
            frames.push_back(data);
        }
        if total > cap || !room {
            let rest = Some(body);
            let read = if room {
                Read::Unchanged
            } else {
                Read::OverBudget
            };
            return Ok((RequestBody::Replayed { frames, rest, held }, read));
        }
    }
    let whole: Vec<u8> = frames.iter().flat_map(|f| f.iter().copied()).collect();
    match with_include_usage(&whole) {
        Some(rewritten) => {
            // The rewritten body replaces the frames read, and their share
            // (a few bytes more, taken if there is room: it is in memory
            // either way).
            match rewritten.len().checked_sub(held.bytes()) {
                Some(more) => {
                    held.grow(more);
                }
                None => held.release(held.bytes() - rewritten.len()),
            }
            let frames = VecDeque::from([Bytes::from(rewritten)]);
            let rest = None;
            let read = Read::Rewritten {
                received: whole.len(),
            };
            Ok((RequestBody::Replayed { frames, rest, held }, read))
        }
        None => {
            let rest = None;
            Ok((
                RequestBody::Replayed { frames, rest, held },
                Read::Unchanged,
            ))
        }
    }
}

/// The request JSON with `stream_options.include_usage = true`, if it
/// streams and does not ask for usage already (absent, `null`, or false
/// as the server reads it, [`lax_bool`]; a `stream_options` that is
/// neither an object nor `null`, or that asks for vLLM's
/// `continuous_usage_stats`, is left alone). Only those bytes change: the member is written in, or its
/// value written over, and every other byte stays as the client wrote it
/// (numbers past what a float holds, key order, duplicate keys, escapes
/// and spacing; a server reads the request it was sent). With a key
/// written twice, the last is the one read, as serde_json and Python's
/// `json` read it.
fn with_include_usage(json: &[u8]) -> Option<Vec<u8>> {
    // Read whole first, as a value, nested no deeper than serde_json
    // reads (128; as this was read before 2026-12-07): a body it refuses
    // is left as it is (the raw values below are skipped over at any
    // depth).
    serde_json::from_slice::<serde_json::Value>(json).ok()?;
    let top: Members<'_> = serde_json::from_slice(json).ok()?;
    if top.last("stream").map(RawValue::get) != Some("true") {
        return None;
    }
    let (at, text) = match top.last("stream_options") {
        None => (
            inside(json, json)?,
            r#""stream_options":{"include_usage":true},"#,
        ),
        Some(v) if v.get() == "null" => (span(json, v)?, r#"{"include_usage":true}"#),
        Some(v) => {
            let options: Members<'_> = serde_json::from_str(v.get()).ok()?;
            // vLLM puts a usage on every chunk when both are asked for,
            // and only then: asked for include_usage too, the client would
            // get the usages it did not have (only the last chunk is cut).
            if options
                .last("continuous_usage_stats")
                .is_some_and(|c| c.get() != "null" && lax_bool(c.get()) != Some(false))
            {
                return None;
            }
            match options.last("include_usage") {
                // Asked for (`1` and `"yes"` too: the client reads the
                // usage it asked for, and it is not cut), or a value the
                // server refuses: left as it is.
                Some(u) if u.get() != "null" && lax_bool(u.get()) != Some(false) => return None,
                Some(u) => (span(json, u)?, "true"),
                None if options.0.is_empty() => {
                    (inside(json, v.get().as_bytes())?, r#""include_usage":true"#)
                }
                None => (
                    inside(json, v.get().as_bytes())?,
                    r#""include_usage":true,"#,
                ),
            }
        }
    };
    let mut out = Vec::with_capacity(json.len() + text.len());
    out.extend_from_slice(&json[..at.start]);
    out.extend_from_slice(text.as_bytes());
    out.extend_from_slice(&json[at.end..]);
    Some(out)
}

/// A JSON value as a boolean, as vLLM and SGLang read one (pydantic's lax
/// mode): `true` and `false`, the numbers `1` and `0`, and the strings
/// `"true"`, `"1"`, `"yes"`, `"y"`, `"on"`, `"t"` and their opposites, in
/// any case. `None` for anything else, which the server refuses.
fn lax_bool(raw: &str) -> Option<bool> {
    match raw {
        "true" | "1" | "1.0" => return Some(true),
        "false" | "0" | "0.0" => return Some(false),
        _ => {}
    }
    let text: String = serde_json::from_str(raw).ok()?;
    match text.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" | "on" | "t" => Some(true),
        "false" | "0" | "no" | "n" | "off" | "f" => Some(false),
        _ => None,
    }
}

/// A JSON object's members as written: in order, duplicates kept, each
/// value's text as it stands in the input.
struct Members<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The value of the last member named `key`.
    fn last(&self, key: &str) -> Option<&'a RawValue> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members<'de>, A::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry::<Key<'de>, &'de RawValue>()? {
                    members.push((key.0, value));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// A key, borrowed when it has no escape.
#[derive(Deserialize)]
#[serde(transparent)]
struct Key<'a>(#[serde(borrow)] Cow<'a, str>);

/// Where `value`, a slice of `json`, stands in it.
fn span(json: &[u8], value: &RawValue) -> Option<Range<usize>> {
    let start = (value.get().as_ptr() as usize).checked_sub(json.as_ptr() as usize)?;
    let end = start + value.get().len();
    (end <= json.len()).then_some(start..end)
}

/// Just inside the `{` that opens `object`, a slice of `json` (or all of
/// it, with whitespace around): where a first member is written in.
fn inside(json: &[u8], object: &[u8]) -> Option<Range<usize>> {
    let start = (object.as_ptr() as usize).checked_sub(json.as_ptr() as usize)?;
    let open = start + object.iter().position(|&b| b == b'{')?;
    (open < json.len()).then_some(open + 1..open + 1)
}

pin_project! {
    /// Forwards an SSE stream without its usage-only chunk (`choices` empty
    /// or null, `usage` set), when the proxy asked for that chunk itself.
    pub struct StripUsage<B> {
        #[pin]
        inner: B,
        cutter: Option<Box<Cutter>>,
    }
}

impl<B> StripUsage<B> {
    /// Strips when `strip`, else passes every frame through untouched.
    pub fn new(inner: B, strip: bool) -> Self {
        let cutter = strip.then(|| Box::new(Cutter::default()));
        Self { inner, cutter }
    }
}

impl<B: Body<Data = Bytes>> Body for StripUsage<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut this = self.project();
        let Some(cutter) = this.cutter.as_mut() else {
            return this.inner.poll_frame(cx);
        };
        loop {
            let frame = match std::task::ready!(this.inner.as_mut().poll_frame(cx)) {
                Some(Ok(frame)) => frame,
                None => return Poll::Ready(cutter.flush().map(|b| Ok(Frame::data(b)))),
                other => return Poll::Ready(other),
            };
            let data = match frame.into_data() {
                Ok(data) => data,
                Err(frame) => return Poll::Ready(Some(Ok(frame))),
            };
            let out = cutter.cut(data);
            if !out.is_empty() {
                return Poll::Ready(Some(Ok(Frame::data(out))));
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream() && self.cutter.as_ref().is_none_or(|c| c.pending.is_empty())
    }

    fn size_hint(&self) -> SizeHint {
        match self.cutter {
            Some(_) => SizeHint::new(),
            None => self.inner.size_hint(),
        }
    }
}

/// Splits a byte stream at SSE event boundaries (blank lines) and drops
/// usage-only events.
struct Cutter {
    /// Finds the blank lines and reads the events they end. Its limit is
    /// off: an event is held whole in `pending` anyway, and one too large
    /// to read would be forwarded even if it were a usage-only chunk.
    framer: SseFramer,
    /// Bytes of the event not yet complete.
    pending: BytesMut,
}

impl Default for Cutter {
    fn default() -> Self {
        Self {
            framer: SseFramer::new(usize::MAX),
            pending: BytesMut::new(),
        }
    }
}

impl Cutter {
    /// The bytes of `data` that may be forwarded now: a slice of `data`
    /// unless an event began in an earlier frame or one was dropped from
    /// between two kept ones.
    fn cut(&mut self, data: Bytes) -> Bytes {
        let Self { framer, pending } = self;
        let mut kept = Kept::default();
        let mut from = 0;
        framer.feed_ends(&data, &mut |end| {
            let usage_only = end.event.is_some_and(|e| is_usage_only(e.data));
            if pending.is_empty() {
                if !usage_only {
                    kept.slice(from..end.end, &data);
                }
            } else if usage_only {
                pending.clear();
            } else {
                pending.extend_from_slice(&data[from..end.end]);
                kept.first_owned(pending.split());
            }
            from = end.end;
        });
        pending.extend_from_slice(&data[from..]);
        kept.into_bytes(&data)
    }

    /// What is left at the end of the stream.
    fn flush(&mut self) -> Option<Bytes> {
        (!self.pending.is_empty()).then(|| self.pending.split().freeze())
    }
}

/// The events of one frame that are forwarded, in order: bytes that had
/// to be copied, then a run of the frame still to be sliced.
#[derive(Default)]
struct Kept {
    copied: BytesMut,
    run: Option<Range<usize>>,
}

impl Kept {
    /// Keeps `data[range]`, which follows whatever was kept before.
    fn slice(&mut self, range: Range<usize>, data: &[u8]) {
        match &mut self.run {
            Some(run) if run.end == range.start => run.end = range.end,
            run => {
                if let Some(before) = run.replace(range) {
                    self.copied.extend_from_slice(&data[before]);
                }
            }
        }
    }

    /// Keeps an event assembled across frames: the first of the frame,
    /// as only that one can have begun in an earlier frame.
    fn first_owned(&mut self, event: BytesMut) {
        debug_assert!(self.run.is_none() && self.copied.is_empty());
        self.copied = event;
    }

    /// The kept bytes: a slice of `data` when nothing had to be copied.
    fn into_bytes(mut self, data: &Bytes) -> Bytes {
        match self.run {
            Some(run) if self.copied.is_empty() => data.slice(run),
            Some(run) => {
                self.copied.extend_from_slice(&data[run]);
                self.copied.freeze()
            }
            None => self.copied.freeze(),
        }
    }
}

/// Whether an SSE event's data is an OpenAI usage-only chunk.
fn is_usage_only(data: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Chunk {
        #[serde(default)]
        choices: Option<Vec<IgnoredAny>>,
        usage: Option<IgnoredAny>,
    }
    serde_json::from_slice::<Chunk>(data)
        .is_ok_and(|chunk| chunk.usage.is_some() && chunk.choices.is_none_or(|c| c.is_empty()))
}

#[cfg(test)]
mod tests;
