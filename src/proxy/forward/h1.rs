//! HTTP/1.1 to the upstream, as bytes: the request head, the response
//! head, and a response body decoder that gathers what one read brought.
//!
//! hyper's client decodes a chunked body a chunk at a time, reading each
//! chunk-size line a byte at a time, and hands every chunk to the response
//! through a channel: about a third of tokenclock's user-space work per
//! streamed event (issue #14). This codec decodes in place, in the buffer
//! the socket was read into: the data of every chunk one read brought is
//! moved together and leaves as one `Bytes`, with no copy when it is one
//! chunk. It does no I/O (the pool does), and keeps hyper's rules: the
//! same limits, the same framing decisions (RFC 9112 §6), the same
//! headers added to a request.

use bytes::{Buf, Bytes, BytesMut};
use http::{
    header::{self, HeaderMap, HeaderName, HeaderValue},
    request, Method, Response, StatusCode, Version,
};

/// The most bytes a response head may take: hyper's default
/// (`max_buf_size`), 8 KiB and 100 header lines of 4 KiB.
pub(super) const MAX_HEAD: usize = 8192 + 4096 * 100;
/// The most header lines a response head (or trailer section) may hold: hyper's.
const MAX_HEADERS: usize = 100;
/// The longest chunk-size line, extensions included: hyper's limit on a
/// body's chunk extensions (16 KiB).
const MAX_SIZE_LINE: usize = 16 * 1024;
/// The most bytes of chunk extensions a whole body may carry, and of its
/// trailer section: hyper's limits (`CHUNKED_EXTENSIONS_LIMIT`,
/// `TRAILER_LIMIT`), the same for requests and responses.
const MAX_EXTENSIONS: u64 = 16 * 1024;
const MAX_TRAILERS: usize = 16 * 1024;

/// Why the upstream's bytes could not be read as HTTP/1.1.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The response head is not HTTP/1.x.
    #[error("invalid response head: {0}")]
    Head(&'static str),
    /// The response head is larger than [`MAX_HEAD`].
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// A chunk-size line, a chunk's end or the trailers are malformed.
    #[error("invalid chunked body: {0}")]
    Chunked(&'static str),
    /// The connection closed before the response ended.
    #[error("the upstream closed the connection before the response ended")]
    Incomplete,
    /// The request's body is longer or shorter than its `content-length`.
    #[error("the request body does not match its content-length")]
    RequestLength,
}

/// How a message's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// This many bytes (0: none).
    Length(u64),
    /// Chunked transfer coding.
    Chunked,
    /// Until the connection closes (responses only).
    Close,
}

/// What the request's body looks like before it is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodySize {
    /// The body is known to be empty.
    Empty,
    /// This many bytes.
    Known(u64),
    /// Not known in advance.
    Unknown,
}

/// Writes the request head, origin-form, choosing the body's framing as
/// hyper's client does (`Role::set_length`): a `content-length` the request
/// carries is kept; an empty body gets none; a known size gets one; an
/// unknown size is chunked, except for GET, HEAD and CONNECT, which are
/// sent without a body.
pub(super) fn encode_request(
    head: &mut request::Parts,
    size: BodySize,
    out: &mut Vec<u8>,
) -> Framing {
    let headers = &mut head.headers;
    let framing = match size {
        BodySize::Empty => {
            headers.remove(header::TRANSFER_ENCODING);
            Framing::Length(0)
        }
        _ if headers.contains_key(header::TRANSFER_ENCODING) => {
            if !is_chunked(headers) {
                headers.append(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
            }
            headers.remove(header::CONTENT_LENGTH);
            Framing::Chunked
        }
        _ => match (content_length(headers), size) {
            (Ok(Some(len)), _) => Framing::Length(len),
            (_, BodySize::Unknown) => match head.method {
                Method::GET | Method::HEAD | Method::CONNECT => Framing::Length(0),
                _ => {
                    headers.insert(
                        header::TRANSFER_ENCODING,
                        HeaderValue::from_static("chunked"),
                    );
                    headers.remove(header::CONTENT_LENGTH);
                    Framing::Chunked
                }
            },
            (_, BodySize::Known(len)) => {
                headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
                Framing::Length(len)
            }
            (_, BodySize::Empty) => Framing::Length(0),
        },
    };
    let path = head.uri.path_and_query().map_or("/", |p| p.as_str());
    out.extend_from_slice(head.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    write_fields(headers.iter(), out);
    out.extend_from_slice(b"\r\n");
    framing
}

/// Field lines, `name: value` each, names as `http` keeps them (lower case).
fn write_fields<'h>(
    fields: impl Iterator<Item = (&'h HeaderName, &'h HeaderValue)>,
    out: &mut Vec<u8>,
) {
    for (name, value) in fields {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
}

/// A response head read from the upstream.
pub(super) struct Head {
    pub response: Response<()>,
    /// How its body is delimited.
    pub framing: Framing,
    /// The connection may carry another request once the body has ended.
    pub keep_alive: bool,
}

/// Parses a response head at the start of `buf` and removes it; `None`
/// until all of it has arrived. Informational heads (1xx but 101) are
/// removed and skipped, as hyper's client does.
pub(super) fn parse_response(
    buf: &mut BytesMut,
    method: &Method,
) -> Result<Option<Head>, WireError> {
    loop {
        // Nothing yet (the exchange is polled before the upstream answers,
        // and after a 1xx): no header array to set up.
        if buf.is_empty() {
            return Ok(None);
        }
        let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut parsed = httparse::Response::new(&mut lines);
        let len = match parsed.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                return Err(WireError::HeadTooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) => return Err(WireError::HeadTooLarge),
            Err(_) => return Err(WireError::Head("not an HTTP/1.x response head")),
        };
        let code = parsed.code.ok_or(WireError::Head("no status"))?;
        let status = StatusCode::from_u16(code).map_err(|_| WireError::Head("invalid status"))?;
        if status.is_informational() && status != StatusCode::SWITCHING_PROTOCOLS {
            buf.advance(len);
            continue;
        }
        let version = match parsed.version {
            Some(0) => Version::HTTP_10,
            _ => Version::HTTP_11,
        };
        let reason = parsed.reason.unwrap_or_default();
        let headers = header_map(parsed.headers)?;
        let mut response = Response::new(());
        *response.status_mut() = status;
        *response.version_mut() = version;
        // Kept as sent when it is not the canonical one, empty included,
        // so the client's status line is the upstream's (as hyper does).
        if status.canonical_reason() != Some(reason) {
            if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason.as_bytes()) {
                response.extensions_mut().insert(reason);
            }
        }
        let framing = if *method == Method::HEAD
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
            || status == StatusCode::SWITCHING_PROTOCOLS
        {
            Framing::Length(0)
        } else if headers.contains_key(header::TRANSFER_ENCODING) {
            // RFC 9112 §6.1: an HTTP/1.0 message with a transfer coding has
            // faulty framing (a smuggling vector); hyper refuses it too.
            if version == Version::HTTP_10 {
                return Err(WireError::Head("transfer-encoding in an HTTP/1.0 response"));
            }
            if is_chunked(&headers) {
                Framing::Chunked
            } else {
                Framing::Close
            }
        } else {
            match content_length(&headers) {
                Ok(Some(len)) => Framing::Length(len),
                Ok(None) => Framing::Close,
                Err(()) => return Err(WireError::Head("invalid content-length")),
            }
        };
        let keep_alive = framing != Framing::Close
            && status != StatusCode::SWITCHING_PROTOCOLS
            && keeps_alive(version, &headers);
        *response.headers_mut() = headers;
        buf.advance(len);
        return Ok(Some(Head {
            response,
            framing,
            keep_alive,
        }));
    }
}

/// The header lines httparse read, as a map.
fn header_map(lines: &[httparse::Header<'_>]) -> Result<HeaderMap, WireError> {
    let mut headers = HeaderMap::with_capacity(lines.len());
    for line in lines {
        let name = HeaderName::from_bytes(line.name.as_bytes())
            .map_err(|_| WireError::Head("invalid header name"))?;
        let value = HeaderValue::from_bytes(line.value)
            .map_err(|_| WireError::Head("invalid header value"))?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// Whether the last transfer coding is `chunked`.
fn is_chunked(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .next_back()
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.rsplit(',').next())
        .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
}

/// Every `content-length` value, which must agree: `Ok(None)` when there
/// is none, `Err` when one is not a number or two differ.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, ()> {
    let mut length = None;
    for value in headers.get_all(header::CONTENT_LENGTH) {
        for part in value.to_str().map_err(|_| ())?.split(',') {
            let part = part.trim();
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(());
            }
            let n: u64 = part.parse().map_err(|_| ())?;
            if length.is_some_and(|l| l != n) {
                return Err(());
            }
            length = Some(n);
        }
    }
    Ok(length)
}

/// HTTP/1.1 keeps the connection unless it says `close`; HTTP/1.0 only
/// when it says `keep-alive`.
fn keeps_alive(version: Version, headers: &HeaderMap) -> bool {
    let says = |token: &str| {
        headers.get_all(header::CONNECTION).iter().any(|v| {
            v.to_str()
                .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        })
    };
    match version {
        Version::HTTP_10 => says("keep-alive"),
        _ => !says("close"),
    }
}

/// What [`Decoder::decode`] found after the data it gathered.
#[derive(Debug)]
pub(crate) enum Decoded {
    /// The buffer holds nothing more to decode: read more.
    More,
    /// The data reached the limit: decode again, the buffer may hold more.
    Full,
    /// The body ended; trailers when it had some.
    End(Option<HeaderMap>),
    /// What follows the data is not a valid body: the data that came
    /// before it is still returned, the failure comes after it.
    Failed(WireError),
}

/// A response body's decoder, state kept across reads.
#[derive(Debug)]
pub(crate) struct Decoder {
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
    pub(crate) fn new(framing: Framing) -> Self {
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
    pub(super) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// The body bytes still to come, when the framing says.
    pub(super) fn remaining(&self) -> Option<u64> {
        match self.state {
            State::Length(n) => Some(n),
            State::Done => Some(0),
            _ => None,
        }
    }

    /// Whether the connection's close ends the body (it is delimited so).
    pub(super) fn ends_at_close(&self) -> bool {
        self.state == State::Close
    }

    /// Decodes what `buf` holds, up to `limit` bytes of body data (or up
    /// to what is malformed): the data
    /// of every chunk is moved together to the front of `buf` and returned
    /// as one `Bytes` (a single chunk is not copied), the framing around it
    /// is removed from `buf`, and what is left there is the start of what
    /// comes next. Partial chunks are returned as far as they arrived:
    /// nothing the upstream sent waits for the rest of its chunk.
    pub(crate) fn decode(&mut self, buf: &mut BytesMut, limit: usize) -> (Bytes, Decoded) {
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
                    let take = usize::try_from(left).unwrap_or(usize::MAX).min(rest);
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
                    place(buf, at, rest, &mut gathered);
                    at += rest;
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
                            break Decoded::Failed(WireError::Chunked("chunk-size line too long"));
                        }
                        break Decoded::More;
                    };
                    let size = match chunk_size(&line[..=end]) {
                        Ok(size) => size,
                        Err(e) => break Decoded::Failed(e),
                    };
                    self.extensions += extension_len(&line[..=end]);
                    if self.extensions >= MAX_EXTENSIONS {
                        break Decoded::Failed(WireError::Chunked("chunk extensions over 16 KiB"));
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
                        Some(_) => {
                            break Decoded::Failed(WireError::Chunked("no CRLF after chunk data"))
                        }
                        None if buf.get(at..) == Some(b"\r") || rest == 0 => break Decoded::More,
                        None => {
                            break Decoded::Failed(WireError::Chunked("no CRLF after chunk data"))
                        }
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
                        break Decoded::Failed(WireError::Chunked("trailers over 16 KiB"));
                    }
                    let Some(end) = found else {
                        break Decoded::More;
                    };
                    let mut lines = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    let parsed = match httparse::parse_headers(&section[..end + 4], &mut lines) {
                        Ok(httparse::Status::Complete((_, lines))) => header_map(lines).ok(),
                        _ => None,
                    };
                    let Some(trailers) = parsed else {
                        break Decoded::Failed(WireError::Chunked("invalid trailers"));
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
fn chunk_size(line: &[u8]) -> Result<u64, WireError> {
    let line = line
        .strip_suffix(b"\r\n")
        .ok_or(WireError::Chunked("chunk-size line without CRLF"))?;
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    // Leading zeros are allowed in any number (as hyper reads them); what
    // is left must fit in 64 bits.
    let zeros = line[..digits].iter().take_while(|&&b| b == b'0').count();
    if digits == 0 || digits - zeros > 16 {
        return Err(WireError::Chunked("invalid chunk size"));
    }
    let rest = &line[digits..];
    let after_space = rest
        .iter()
        .position(|b| !matches!(b, b' ' | b'\t'))
        .unwrap_or(rest.len());
    match rest.get(after_space) {
        None | Some(b';') => {}
        Some(_) => return Err(WireError::Chunked("invalid chunk size")),
    }
    if rest.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err(WireError::Chunked("invalid chunk extension"));
    }
    // At most 16 hex digits once the zeros are off: no overflow.
    Ok(line[zeros..digits].iter().fold(0u64, |n, &d| {
        n << 4 | u64::from(char::from(d).to_digit(16).unwrap_or(0))
    }))
}

/// Writes one chunk of a chunked request body: size line, data, CRLF.
pub(super) fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    let mut digits = [0u8; 16];
    let mut n = data.len();
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b"0123456789ABCDEF"[n & 0xF];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk of a chunked request body, with the trailers the
/// request's `Trailer` header announced (hyper's rule), and its end.
pub(super) fn encode_last_chunk(
    trailers: Option<&HeaderMap>,
    announced: &HeaderMap,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"0\r\n");
    if let Some(trailers) = trailers {
        let allowed = super::headers::listed(announced, &header::TRAILER);
        write_fields(trailers.iter().filter(|(n, _)| allowed.contains(n)), out);
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
