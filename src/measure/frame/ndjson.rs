//! Newline-delimited JSON framing: a response stream split into lines, incrementally.
//!
//! NDJSON (`application/x-ndjson`) is what Ollama streams.
//!
//! [`NdjsonFramer`] passes each `\n`-terminated line, less a trailing `\r`,
//! to a sink, skipping blank lines. It does not parse JSON. It is sans-IO:
//! the caller feeds byte slices as they arrive, split anywhere, and gets
//! the same lines as if the stream came in one piece.
//!
//! It reads a copy of bytes that are forwarded anyway, so it never fails:
//! anomalies are counted in [`NdjsonStats`]. A line longer than the limit
//! is dropped and skipped up to its `\n`, which keeps the memory held within
//! the limit whatever the input, an endless line included.
//!
//! A line that lies entirely in the chunk being fed is passed as a slice of
//! that chunk; only lines that span feeds are copied, into a buffer that
//! keeps its capacity from line to line.

use memchr::memchr;

#[cfg(test)]
mod tests;

/// What a framer has seen so far. Counts, not bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NdjsonStats {
    /// Lines passed to the sink.
    pub lines: u64,
    /// Lines dropped for exceeding the size limit.
    pub oversized: u64,
}

/// Incremental NDJSON line splitter over a byte stream; see the module docs.
#[derive(Debug)]
pub struct NdjsonFramer {
    /// Longest line, in bytes without its `\r\n` or `\n`, that is passed on.
    max_event_bytes: usize,
    /// The unfinished line's bytes, unless it is being skipped.
    line: Vec<u8>,
    /// The unfinished line's length in bytes, kept or not.
    line_len: usize,
    /// The unfinished line is too long: it is skipped up to its `\n`.
    skipping: bool,
    stats: NdjsonStats,
}

impl NdjsonFramer {
    /// A framer that drops lines longer than `max_event_bytes` bytes, not
    /// counting the `\r\n` or `\n` that ends them. Blank lines are
    /// skipped only after this check, so an over-long one is counted too.
    pub fn new(max_event_bytes: usize) -> Self {
        Self {
            max_event_bytes,
            line: Vec::new(),
            line_len: 0,
            skipping: false,
            stats: NdjsonStats::default(),
        }
    }

    /// Feeds the next bytes of the stream; calls `sink` once per complete,
    /// non-blank line, in order.
    pub fn feed(&mut self, chunk: &[u8], sink: &mut impl FnMut(&[u8])) {
        let mut pos = 0;
        while let Some(off) = memchr(b'\n', &chunk[pos..]) {
            let end = pos + off;
            self.end_line(&chunk[pos..end], sink);
            pos = end + 1;
        }
        self.append_partial(&chunk[pos..]);
    }

    /// End of stream: a last line without `\n` is still a line. The framer
    /// is then ready for a new stream.
    pub fn finish(&mut self, sink: &mut impl FnMut(&[u8])) {
        if self.line_len > 0 {
            self.end_line(&[], sink);
        }
    }

    /// What the framer has seen so far.
    pub fn stats(&self) -> NdjsonStats {
        self.stats
    }

    /// Bytes of an unfinished line held: at most `max_event_bytes + 1`,
    /// as its last byte may be a `\r` to strip.
    pub fn pending_bytes(&self) -> usize {
        self.line.len()
    }

    /// Handles the line that ends here, of which `tail` is the part in the
    /// chunk being fed.
    fn end_line(&mut self, tail: &[u8], sink: &mut impl FnMut(&[u8])) {
        if self.line_len == 0 {
            return self.emit(tail, sink);
        }
        self.append_partial(tail);
        self.line_len = 0;
        if !std::mem::take(&mut self.skipping) {
            let line = std::mem::take(&mut self.line);
            self.emit(&line, sink);
            self.line = line;
        }
        self.line.clear();
    }

    /// Keeps the bytes of a line not ended yet, unless it is already too
    /// long even if its last byte is a `\r` to strip.
    fn append_partial(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        self.line_len = self.line_len.saturating_add(bytes.len());
        if self.skipping {
            return;
        }
        if self.line_len > self.max_event_bytes.saturating_add(1) {
            self.stats.oversized += 1;
            self.line.clear();
            self.skipping = true;
            return;
        }
        self.line.extend_from_slice(bytes);
    }

    /// Passes a complete line on unless it is too long or blank.
    fn emit(&mut self, line: &[u8], sink: &mut impl FnMut(&[u8])) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > self.max_event_bytes {
            self.stats.oversized += 1;
        } else if !line.iter().all(u8::is_ascii_whitespace) {
            self.stats.lines += 1;
            sink(line);
        }
    }
}
