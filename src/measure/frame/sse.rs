//! Server-Sent Events framing: a response stream split into events, incrementally.
//!
//! [`SseFramer`] follows the WHATWG event-stream interpretation
//! (<https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation>):
//! lines end in `\r\n`, `\n` or `\r`, a blank line dispatches the event,
//! `:` lines are comments, and an event without `data` is not dispatched.
//! One field besides the spec's is read: `error`, as llama.cpp's server
//! writes its errors in a stream (the data of an event of type `error`).
//! It is sans-IO: the caller feeds byte slices as they arrive, split
//! anywhere, and gets the same events as if the stream came in one piece.
//!
//! It reads a copy of bytes that are forwarded anyway, so it never fails:
//! anomalies are counted in [`SseStats`]. An event larger than the limit is
//! dropped and skipped up to its blank line, which keeps the memory held
//! within the limit whatever the input, an endless line included.
//!
//! A data line that lies entirely in the chunk being fed is passed as a
//! slice of that chunk; only lines or events that span feeds are copied,
//! into buffers that keep their capacity from event to event.
//!
//! [`SseFramer::feed`] gives the events; [`SseFramer::feed_ends`] gives
//! every blank line with where it ends in the chunk, for a caller that cuts
//! the stream itself at event boundaries (the usage stripper of
//! `usage_mode = "inject"`).

use memchr::{memchr, memchr2};

#[cfg(test)]
pub(crate) mod tests;

/// The UTF-8 byte order mark, ignored once at the very start of a stream.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// One dispatched event, borrowed from the chunk being fed or from the
/// framer's buffers: it lives only for the duration of the sink call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The last `event:` value, or empty when the event had none (the
    /// spec's default type, `message`).
    pub event: &'a [u8],
    /// The `data:` values, joined with `\n`.
    pub data: &'a [u8],
}

/// A blank line: the end of an event, dispatched or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SseEnd<'a> {
    /// Offset in the chunk being fed just past the blank line's ending
    /// (its `\n` too, for a `\r\n` found whole in the chunk).
    pub end: usize,
    /// The event the blank line dispatched; `None` for one without data,
    /// only comments, or dropped as too large.
    pub event: Option<SseEvent<'a>>,
}

/// What a framer has seen so far. Counts, not bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SseStats {
    /// Events dispatched to the sink.
    pub events: u64,
    /// Comment lines (`:` first), usually keep-alives.
    pub comments: u64,
    /// Events dropped for exceeding the size limit.
    pub oversized: u64,
}

/// Where the data of the event being built is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Data {
    /// No `data` line yet: the event would not be dispatched.
    None,
    /// One `data` value, at this range of the chunk being fed.
    InChunk(usize, usize),
    /// In `SseFramer::data`.
    Buffered,
}

/// Incremental SSE parser over a byte stream; see the module docs.
#[derive(Debug)]
pub struct SseFramer {
    /// Largest event, in bytes of data and event type plus its line being
    /// read, that is buffered; larger ones are dropped.
    max_event_bytes: usize,
    /// How many bytes of a byte order mark the stream started with so far.
    bom_seen: usize,
    /// The start of the stream is past: no byte order mark any more.
    bom_done: bool,
    /// The last feed ended in `\r`: a `\n` first in the next one is part
    /// of the same line ending.
    pending_cr: bool,
    /// The unfinished line's bytes, when they are kept (not a comment, not
    /// being skipped).
    line: Vec<u8>,
    /// The unfinished line's length in bytes, kept or not.
    line_len: usize,
    /// The unfinished line is a comment, so its bytes are not kept.
    line_comment: bool,
    /// The current event was too large: lines are skipped up to a blank one.
    skipping: bool,
    /// The data values of the current event joined with `\n`, when
    /// `data_at` is `Buffered`.
    data: Vec<u8>,
    data_at: Data,
    /// The current event's type.
    event: Vec<u8>,
    stats: SseStats,
}

impl SseFramer {
    /// A framer that drops events larger than `max_event_bytes` bytes.
    ///
    /// An event is too large once its data (values joined with `\n`) and
    /// event type, plus the raw bytes of its line being read (field name
    /// included, line ending excluded), exceed the limit. Comment lines
    /// are not held, so they never count.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            max_event_bytes,
            bom_seen: 0,
            bom_done: false,
            pending_cr: false,
            line: Vec::new(),
            line_len: 0,
            line_comment: false,
            skipping: false,
            data: Vec::new(),
            data_at: Data::None,
            event: Vec::new(),
            stats: SseStats::default(),
        }
    }

    /// Feeds the next bytes of the stream; calls `sink` once per complete
    /// event, in order.
    pub fn feed(&mut self, chunk: &[u8], sink: &mut impl FnMut(SseEvent<'_>)) {
        self.feed_ends(chunk, &mut |end| {
            if let Some(event) = end.event {
                sink(event);
            }
        });
    }

    /// Feeds the next bytes of the stream; calls `sink` once per blank
    /// line, in order, with the event it dispatched if any.
    pub fn feed_ends(&mut self, chunk: &[u8], sink: &mut impl FnMut(SseEnd<'_>)) {
        let mut pos = self.skip_bom(chunk);
        if self.pending_cr && pos < chunk.len() {
            self.pending_cr = false;
            if chunk.get(pos) == Some(&b'\n') {
                pos += 1;
            }
        }
        while let Some(off) = memchr2(b'\n', b'\r', &chunk[pos..]) {
            let end = pos + off;
            if let Some(next) = self.whole_data_event(chunk, pos, end, sink) {
                pos = next;
                continue;
            }
            let blank = self.end_line(chunk, pos, end);
            pos = end + 1;
            if chunk[end] == b'\r' {
                match chunk.get(pos) {
                    Some(b'\n') => pos += 1,
                    None => self.pending_cr = true,
                    Some(_) => {}
                }
            }
            if blank {
                self.dispatch(chunk, pos, sink);
            }
        }
        self.append_partial(&chunk[pos..]);
        self.materialize(chunk);
    }

    /// The event nearly every stream is made of, `data: …` and a blank
    /// line, both ended by `\n`, whole in `chunk` from `chunk[start]` (the
    /// line ends at `chunk[end]`), with no line or event begun before it:
    /// dispatched at once, as the line-by-line path would (the same event,
    /// end and counts), without going through its state. Returns where the
    /// stream goes on, or `None`, having done nothing, for anything else.
    #[inline]
    fn whole_data_event(
        &mut self,
        chunk: &[u8],
        start: usize,
        end: usize,
        sink: &mut impl FnMut(SseEnd<'_>),
    ) -> Option<usize> {
        let clean = self.line_len == 0
            && !self.skipping
            && self.data_at == Data::None
            && self.event.is_empty();
        let line = &chunk[start..end];
        if !clean
            || chunk[end] != b'\n'
            || chunk.get(end + 1) != Some(&b'\n')
            || line.len() > self.max_event_bytes
        {
            return None;
        }
        let value = line.strip_prefix(b"data:")?;
        let data = value.strip_prefix(b" ").unwrap_or(value);
        self.stats.events += 1;
        sink(SseEnd {
            end: end + 2,
            event: Some(SseEvent { event: &[], data }),
        });
        Some(end + 2)
    }

    /// What the framer has seen so far.
    pub fn stats(&self) -> SseStats {
        self.stats
    }

    /// Bytes of an unfinished line or event held: non-zero at the end of
    /// the stream means an unterminated event was left undispatched.
    pub fn pending_bytes(&self) -> usize {
        self.line.len() + self.buffered()
    }

    /// Consumes a byte order mark at the start of the stream, even one
    /// split across feeds; returns where the stream proper starts in
    /// `chunk`.
    fn skip_bom(&mut self, chunk: &[u8]) -> usize {
        if self.bom_done {
            return 0;
        }
        for (pos, &byte) in chunk.iter().enumerate() {
            if byte != BOM[self.bom_seen] {
                self.bom_done = true;
                // What looked like the start of a mark is the first line's.
                self.append_partial(&BOM[..self.bom_seen]);
                return pos;
            }
            self.bom_seen += 1;
            if self.bom_seen == BOM.len() {
                self.bom_done = true;
                return pos + 1;
            }
        }
        chunk.len()
    }

    /// Handles the line that ends at `chunk[end]`, of which `chunk[start..end]`
    /// is the part in this chunk; true when it is blank.
    fn end_line(&mut self, chunk: &[u8], start: usize, end: usize) -> bool {
        let tail = &chunk[start..end];
        if self.line_len == 0 {
            return self.whole_line(tail, start, chunk);
        }
        self.append_partial(tail);
        self.line_len = 0;
        let comment = std::mem::take(&mut self.line_comment);
        if self.skipping {
            // Not blank, so it does not end the skipped event.
        } else if comment {
            self.stats.comments += 1;
        } else {
            let line = std::mem::take(&mut self.line);
            self.field(&line, None, chunk);
            self.line = line;
        }
        self.line.clear();
        false
    }

    /// Handles a complete line found whole at `chunk[at..]`; true when it
    /// is blank.
    fn whole_line(&mut self, line: &[u8], at: usize, chunk: &[u8]) -> bool {
        if line.is_empty() {
            return true;
        }
        if self.skipping {
            // Not blank, so it does not end the skipped event.
        } else if line[0] == b':' {
            self.stats.comments += 1;
        } else if self.buffered() + line.len() > self.max_event_bytes {
            self.oversize();
        } else {
            self.field(line, Some(at), chunk);
        }
        false
    }

    /// Keeps the bytes of a line not ended yet, unless it is a comment,
    /// skipped, or makes the event too large.
    fn append_partial(&mut self, bytes: &[u8]) {
        let Some(&first) = bytes.first() else { return };
        if self.line_len == 0 && first == b':' {
            self.line_comment = true;
        }
        self.line_len = self.line_len.saturating_add(bytes.len());
        if self.skipping || self.line_comment {
            return;
        }
        if self.buffered().saturating_add(self.line_len) > self.max_event_bytes {
            return self.oversize();
        }
        self.line.extend_from_slice(bytes);
    }

    /// Applies a field line (not blank, not a comment), found at
    /// `chunk[at..]` when `at` is given.
    fn field(&mut self, line: &[u8], at: Option<usize>, chunk: &[u8]) {
        let (name, value_start) = match memchr(b':', line) {
            Some(colon) if line.get(colon + 1) == Some(&b' ') => (&line[..colon], colon + 2),
            Some(colon) => (&line[..colon], colon + 1),
            None => (line, line.len()),
        };
        let value = &line[value_start..];
        match name {
            b"data" => self.push_data(value, at.map(|at| at + value_start), chunk),
            b"event" => {
                self.event.clear();
                self.event.extend_from_slice(value);
            }
            // llama.cpp's server writes an error in a stream as a field of
            // its own (`error: {…}`, then `data: [DONE]` on its OpenAI
            // routes), which the spec ignores: read as the data of an event
            // of type `error`, so that the error is seen (a browser's
            // `EventSource` would not see it; a proxy's copy must).
            b"error" => {
                self.event.clear();
                self.event.extend_from_slice(b"error");
                self.push_data(value, at.map(|at| at + value_start), chunk);
            }
            // `id` and `retry` steer a browser's reconnection, not timing.
            _ => {}
        }
    }

    /// Appends a data value, found at `chunk[at..]` when `at` is given.
    fn push_data(&mut self, value: &[u8], at: Option<usize>, chunk: &[u8]) {
        self.materialize(chunk);
        match (self.data_at, at) {
            (Data::None, Some(at)) => self.data_at = Data::InChunk(at, at + value.len()),
            (Data::None, None) => {
                self.data.extend_from_slice(value);
                self.data_at = Data::Buffered;
            }
            _ => {
                self.data.push(b'\n');
                self.data.extend_from_slice(value);
            }
        }
    }

    /// Copies data still in `chunk` into the buffer, before `chunk` goes
    /// away or more data joins it.
    fn materialize(&mut self, chunk: &[u8]) {
        if let Data::InChunk(start, end) = self.data_at {
            self.data.clear();
            self.data.extend_from_slice(&chunk[start..end]);
            self.data_at = Data::Buffered;
        }
    }

    /// Passes the blank line ending at `chunk[..end]` to `sink`, with the
    /// current event if it has data (none after a skipped one), then starts
    /// a new event.
    fn dispatch(&mut self, chunk: &[u8], end: usize, sink: &mut impl FnMut(SseEnd<'_>)) {
        self.skipping = false;
        let data = match self.data_at {
            Data::None => None,
            Data::InChunk(start, end) => Some(&chunk[start..end]),
            Data::Buffered => Some(&self.data[..]),
        };
        let event = data.map(|data| SseEvent {
            event: &self.event,
            data,
        });
        self.stats.events += u64::from(event.is_some());
        sink(SseEnd { end, event });
        self.reset_event();
    }

    /// Drops the current event and skips the rest of it.
    fn oversize(&mut self) {
        self.stats.oversized += 1;
        self.reset_event();
        self.line.clear();
        self.skipping = true;
    }

    fn reset_event(&mut self) {
        self.data.clear();
        self.data_at = Data::None;
        self.event.clear();
    }

    /// Bytes of the current event's data and type.
    fn buffered(&self) -> usize {
        let data = match self.data_at {
            Data::None => 0,
            Data::InChunk(start, end) => end - start,
            Data::Buffered => self.data.len(),
        };
        data + self.event.len()
    }
}
