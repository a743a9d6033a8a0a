//! A message body on the wire, both ways: the decoder of a body framed by
//! length, chunked coding or the connection's close (a client's request
//! body, an upstream's response body), and the chunk-size line written in
//! front of each chunk sent.
//!
//! The decoder works in place, in the buffer the socket was read into:
//! the data of every chunk one read brought is moved together and leaves
//! as one `Bytes`, with no copy when it is one chunk (hyper's decoder
//! reads a size line a byte at a time and hands over a chunk at a time,
//! about a third of tokenclock's user-space work per streamed event,
//! issue #14). It keeps hyper's limits and rules, for requests and
//! responses alike.

use bytes::{Buf, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

/// The longest chunk-size line, extensions included: hyper's limit on a
/// body's chunk extensions (16 KiB).
const MAX_SIZE_LINE: usize = 16 * 1024;
/// The most bytes of chunk extensions a whole body may carry, and of its
/// trailer section: hyper's limits (`CHUNKED_EXTENSIONS_LIMIT`,
/// `TRAILER_LIMIT`), the same for requests and responses.
const MAX_EXTENSIONS: u64 = 16 * 1024;
const MAX_TRAILERS: usize = 16 * 1024;
/// The most trailer fields a body may end with: hyper's header limit.
const MAX_TRAILER_FIELDS: usize = 100;

/// Why a chunked body could not be read: a chunk-size line, a chunk's end
/// or the trailers are malformed, or over hyper's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid chunked body: {0}")]
pub struct ChunkedError(pub &'static str);

/// How a message's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// This many bytes (0: none).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes: a response's, or the bytes each way of
    /// a connection switched to another protocol (`proxy::upgrade`); a
    /// request's body is never delimited so.
    Close,
}

/// What [`Decoder::decode`] found after the data it gathered.
#[derive(Debug)]
pub enum Decoded {
    /// The buffer holds nothing more to decode: read more.
    More,
    /// The data reached the limit: decode again, the buffer may hold more.
    Full,
    /// The body ended; trailers when it had some.
    End(Option<HeaderMap>),
    /// What follows the data is not a valid body: the data that came
    /// before it is still returned, the failure comes after it.
    Failed(ChunkedError),
}

/// A body's decoder (a request's or a response's), state kept across reads.
#[derive(Debug)]
pub struct Decoder {
    state: State,
    /// Bytes of chunk extensions seen so far in the body.
    extensions: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// This many bytes of body left (fixed length).
    Length(u64),
    /// Until the connection closes.
    Close,
    /// At a chunk-size line.
    Size,
    /// This many bytes of the current chunk left.
    Chunk(u64),
    /// At the CRLF that ends a chunk's data.
    ChunkEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailers,
    /// The body ended.
    Done,
}

impl Decoder {
    /// A decoder at the start of a body framed so.
    pub fn new(framing: Framing) -> Self {
        let state = match framing {
            Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Size,
            Framing::Close => State::Close,
        };
        Self {
            state,
            extensions: 0,
        }
    }

    /// Whether the body has ended.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The body bytes still to come, when the framing says.
    pub fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// Whether the connection's close ends the body (it is delimited so).
    pub fn ends_at_close(&self) -> bool {
        self.state == State::Close
    }

    /// Decodes what `buf` holds, at most `limit` bytes of body data, `limit`
    /// above 0 (and
    /// no further than what is malformed): the data of every chunk is
    /// moved together to the front of `buf` and returned
    /// as one `Bytes` (a single chunk is not copied), the framing around it
    /// is removed from `buf`, and what is left there is the start of what
    /// comes next. Partial chunks are returned as far as they arrived:
    /// nothing sent waits for the rest of its chunk.
    pub fn decode(&mut self, buf: &mut BytesMut, limit: usize) -> (Bytes, Decoded) {
        // What a paced event's read brings: one whole chunk and nothing
        // more, smaller than the limit, taken without the state loop below
        // (about 125 of the 6,000 instructions of a paced event), to the
        // loop's result: the data, `More`, the buffer empty.
        debug_assert!(limit > 0, "a limit of 0 never decodes a byte");
        if self.state == State::Size {
            if let Some(data) = one_chunk(buf, limit) {
                return (data, Decoded::More);
            }
        }
        // Body data is moved to `buf[start..start + gathered]`; `at` is
        // where decoding is.
        let (mut start, mut gathered, mut at) = (0usize, 0usize, 0usize);
        let mut place = |buf: &mut BytesMut, from: usize, len: usize, gathered: &mut usize| {
            if *gathered == 0 {
                start = from;
            } else if from != start + *gathered {
                buf.copy_within(from..from + len, start + *gathered);
            }
            *gathered += len;
        };
        let outcome = loop {
            // A finished body ends before the limit counts: its connection
            // goes back to the pool with this frame.
            if self.state == State::Done {
                break Decoded::End(None);
            }
            if gathered >= limit {
                break Decoded::Full;
            }
            let rest = buf.len() - at;
            match self.state {
                State::Done => break Decoded::End(None),
                State::Length(left) | State::Chunk(left) => {
                    let take = usize::try_from(left)
                        .unwrap_or(usize::MAX)
                        .min(rest)
                        .min(limit - gathered);
                    if take == 0 {
                        break Decoded::More;
                    }
                    place(buf, at, take, &mut gathered);
                    at += take;
                    let left = left - take as u64;
                    self.state = match (self.state, left) {
                        (State::Length(_), 0) => State::Done,
                        (State::Length(_), n) => State::Length(n),
                        (_, 0) => State::ChunkEnd,
                        (_, n) => State::Chunk(n),
                    };
                }
                State::Close => {
                    if rest == 0 {
                        break Decoded::More;
                    }
                    let take = rest.min(limit - gathered);
                    place(buf, at, take, &mut gathered);
                    at += take;
                }
                State::Size => {
                    let line = &buf[at..];
                    if let Some((size, len)) = plain_size_line(line) {
                        at += len;
                        self.state = if size == 0 {
                            State::Trailers
                        } else {
                            State::Chunk(size)
                        };
                        continue;
                    }
                    let Some(end) = memchr::memchr(b'\n', line) else {
                        if line.len() > MAX_SIZE_LINE {
                            break Decoded::Failed(ChunkedError("chunk-size line too long"));
                        }
                        break Decoded::More;
                    };
                    let size = match chunk_size(&line[..=end]) {
                        Ok(size) => size,
                        Err(e) => break Decoded::Failed(e),
                    };
                    self.extensions += extension_len(&line[..=end]);
                    if self.extensions >= MAX_EXTENSIONS {
                        break Decoded::Failed(ChunkedError("chunk extensions over 16 KiB"));
                    }
                    at += end + 1;
                    self.state = if size == 0 {
                        State::Trailers
                    } else {
                        State::Chunk(size)
                    };
                }
                State::ChunkEnd => {
                    match buf.get(at..at + 2) {
                        Some(b"\r\n") => at += 2,
                        Some(_) => break Decoded::Failed(ChunkedError("no CRLF after chunk data")),
                        None if buf.get(at..) == Some(b"\r") || rest == 0 => break Decoded::More,
                        None => break Decoded::Failed(ChunkedError("no CRLF after chunk data")),
                    }
                    self.state = State::Size;
                }
                State::Trailers => {
                    let section = &buf[at..];
                    if section.starts_with(b"\r\n") {
                        at += 2;
                        self.state = State::Done;
                        break Decoded::End(None);
                    }
                    let found = memchr::memmem::find(section, b"\r\n\r\n");
                    if found.map_or(section.len(), |end| end + 4) > MAX_TRAILERS {
                        break Decoded::Failed(ChunkedError("trailers over 16 KiB"));
                    }
                    let Some(end) = found else {
                        break Decoded::More;
                    };
                    let mut lines = [httparse::EMPTY_HEADER; MAX_TRAILER_FIELDS];
                    let parsed = match httparse::parse_headers(&section[..end + 4], &mut lines) {
                        Ok(httparse::Status::Complete((_, lines))) => header_map(lines).ok(),
                        _ => None,
                    };
                    let Some(trailers) = parsed else {
                        break Decoded::Failed(ChunkedError("invalid trailers"));
                    };
                    at += end + 4;
                    self.state = State::Done;
                    break Decoded::End(Some(trailers));
                }
            }
        };
        let data = if gathered == 0 {
            buf.advance(at);
            Bytes::new()
        } else {
            buf.advance(start);
            let data = buf.split_to(gathered).freeze();
            buf.advance(at - start - gathered);
            data
        };
        (data, outcome)
    }
}

/// The data of the one whole chunk `buf` holds, with a plain size line
/// ([`plain_size_line`]), not empty, under `limit` (at the limit the loop
/// stops before the CRLF, with `Full`), and nothing after its CRLF; `buf`
/// is left empty. `None`, with `buf` untouched, for anything else.
fn one_chunk(buf: &mut BytesMut, limit: usize) -> Option<Bytes> {
    let (size, line) = plain_size_line(buf)?;
    let n = usize::try_from(size).ok().filter(|&n| n > 0 && n < limit)?;
    if buf.len() != line.checked_add(n)?.checked_add(2)? || !buf.ends_with(b"\r\n") {
        return None;
    }
    buf.advance(line);
    let data = buf.split_to(n).freeze();
    buf.advance(2);
    Some(data)
}

/// The chunk-size line nearly every server sends, 1 to 16 hex digits and
/// CRLF, read in one pass: its size and its length with the CRLF. `None`
/// for anything else (extensions, whitespace, more digits, a line not
/// whole yet, a malformed one), which [`chunk_size`] reads as before;
/// where this reads a line, it reads the same size. A 3-digit line costs
/// about a quarter of the general reader's instructions (its search for
/// the end, then three passes over the digits).
fn plain_size_line(line: &[u8]) -> Option<(u64, usize)> {
    let mut size = 0u64;
    for (i, &b) in line.iter().enumerate().take(17) {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            b'\r' if i > 0 => return (line.get(i + 1) == Some(&b'\n')).then_some((size, i + 2)),
            _ => return None,
        };
        size = size << 4 | u64::from(digit);
    }
    None
}

/// The bytes of a chunk-size line's extensions: from its first `;` to its
/// CRLF, as hyper counts them.
fn extension_len(line: &[u8]) -> u64 {
    let body = line.strip_suffix(b"\r\n").unwrap_or(line);
    memchr::memchr(b';', body).map_or(0, |at| (body.len() - at - 1) as u64)
}

/// A chunk-size line, CRLF included: hex digits, optional whitespace and
/// extensions (ignored), as hyper reads it.
fn chunk_size(line: &[u8]) -> Result<u64, ChunkedError> {
    let line = line
        .strip_suffix(b"\r\n")
        .ok_or(ChunkedError("chunk-size line without CRLF"))?;
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    // Leading zeros are allowed in any number (as hyper reads them); what
    // is left must fit in 64 bits.
    let zeros = line[..digits].iter().take_while(|&&b| b == b'0').count();
    if digits == 0 || digits - zeros > 16 {
        return Err(ChunkedError("invalid chunk size"));
    }
    let rest = &line[digits..];
    let after_space = rest
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(rest.len());
    match rest.get(after_space) {
        None | Some(b';') => {}
        Some(_) => return Err(ChunkedError("invalid chunk size")),
    }
    if rest.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err(ChunkedError("invalid chunk extension"));
    }
    // At most 16 hex digits once the zeros are off: no overflow.
    Ok(line[zeros..digits].iter().fold(0u64, |n, &d| {
        n << 4 | u64::from(char::from(d).to_digit(16).unwrap_or(0))
    }))
}

/// Parsed header lines (a response head's, a trailer section's) as a map,
/// in order, duplicates kept; the error says which part was invalid.
pub(crate) fn header_map(lines: &[httparse::Header<'_>]) -> Result<HeaderMap, &'static str> {
    let mut headers = HeaderMap::with_capacity(lines.len());
    for line in lines {
        let name =
            HeaderName::from_bytes(line.name.as_bytes()).map_err(|_| "invalid header name")?;
        let value = HeaderValue::from_bytes(line.value).map_err(|_| "invalid header value")?;
        headers.append(name, value);
    }
    Ok(headers)
}

// A usize is at most 16 hex digits, which SizeLine's buffer holds.
const _: () = assert!(usize::BITS <= 64);

/// A chunk's size line: hyper's `write!("{len:X}\r\n")` (encode.rs:370),
/// upper-case hex without leading zeros, written without `core::fmt`.
pub struct SizeLine {
    buf: [u8; 18],
    start: u8,
}

impl SizeLine {
    /// The size line of a chunk of `len` bytes.
    pub fn new(len: usize) -> Self {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let mut buf = [0; 18];
        buf[16] = b'\r';
        buf[17] = b'\n';
        let mut start = 16;
        let mut rest = len;
        loop {
            start -= 1;
            buf[start] = HEX[rest & 0xF];
            rest >>= 4;
            if rest == 0 {
                break;
            }
        }
        #[allow(clippy::cast_possible_truncation)] // start < 16
        Self {
            buf,
            start: start as u8,
        }
    }

    /// The line's bytes, CRLF included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[usize::from(self.start)..]
    }
}

#[cfg(test)]
mod tests;
