//! The head of a client's HTTP/1.1 request, parsed as hyper 1.12's server
//! parses it: `Server::parse` (proto/h1/role.rs), the buffer limit of
//! `Buffered::parse` (proto/h1/io.rs) and the answers of `Server::on_error`
//! and `Conn::on_parse_error` (proto/h1/conn.rs). Replacing hyper's server
//! connection must change no request's fate: the same requests reach the
//! upstream with the same headers in the same order, and the same ones are
//! refused with the same status, or closed on without one.

use std::mem::MaybeUninit;
use std::ops::Range;

use bytes::BytesMut;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, StatusCode, Uri, Version};

use crate::proxy::wire::{chunked, digits, has_token, is_chunked};

/// The most bytes a request head may take before it is complete: hyper's
/// `max_buf_size` default (8 KiB + 100 lines of 4 KiB). hyper never reads
/// more than this into its buffer while a head is incomplete, so a head is
/// refused once the buffer holds this much and no complete head.
pub const MAX_HEAD: usize = 8192 + 4096 * 100;

/// hyper's `DEFAULT_MAX_HEADERS`: httparse gets this many slots, and one
/// more header line is `TooManyHeaders`.
const MAX_HEADERS: usize = 100;

/// hyper's `MAX_URI_LEN`, checked before the `http` crate sees the target.
const MAX_URI_LEN: usize = (u16::MAX - 1) as usize;

/// hyper's `record_header_indices` refuses names of this length or more.
const MAX_NAME_LEN: usize = 1 << 16;

/// `DecodedLength`'s `MAX_LEN`: hyper keeps the two values above it to mark
/// chunked and close-delimited bodies, so a larger Content-Length is refused.
const MAX_CONTENT_LENGTH: u64 = u64::MAX - 2;

/// The start of an HTTP/2 connection (RFC 9113 3.4): hyper's server answers
/// nothing to a head it cannot parse when the buffer starts with it.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How the request's body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// Exactly this many bytes follow the head; 0: no body.
    Length(u64),
    /// `Transfer-Encoding` whose last coding is `chunked`.
    Chunked,
}

impl From<BodyFraming> for chunked::Framing {
    fn from(framing: BodyFraming) -> Self {
        match framing {
            BodyFraming::Length(n) => Self::Length(n),
            BodyFraming::Chunked => Self::Chunked,
        }
    }
}

/// A request head, taken off the front of the read buffer.
#[derive(Debug)]
pub struct RequestHead {
    /// Method, target, version (`HTTP_10` or `HTTP_11`) and headers exactly
    /// as hyper hands them to a service: same order, duplicates kept,
    /// Content-Length dropped where a Transfer-Encoding overrides it, repeated
    /// equal Content-Length lines dropped; no extensions.
    pub parts: http::request::Parts,
    /// How the body that follows the head is delimited.
    pub framing: BodyFraming,
    /// hyper's keep-alive decision for the request: HTTP/1.1 unless a
    /// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`, and
    /// never with both Transfer-Encoding and Content-Length.
    pub keep_alive: bool,
    /// hyper would answer `100 Continue` when the body is first read: an
    /// HTTP/1.1 request whose last `Expect` is `100-continue` (any case) and
    /// that has a body (`Conn::poll_read_head` ignores it otherwise).
    pub expect_continue: bool,
}

/// Why a request head was refused; [`HeadError::status`] is what hyper
/// answers with. Every refusal ends the connection.
#[derive(Clone, Copy, Debug, thiserror::Error)]
pub enum HeadError {
    /// The method is not a token (httparse, or `http::Method`).
    #[error("invalid request method")]
    Method,
    /// The request target has a byte httparse refuses, or `http::Uri` does.
    #[error("invalid request target")]
    Uri,
    /// Not `HTTP/1.0` or `HTTP/1.1`.
    #[error("unsupported HTTP version")]
    Version,
    /// A header line (or a line ending) httparse refuses.
    #[error("invalid header line")]
    Header,
    /// A Content-Length that is not all digits, overflows, or differs from an
    /// earlier one.
    #[error("invalid Content-Length")]
    ContentLength,
    /// A Transfer-Encoding whose last line does not end in `chunked`.
    #[error("Transfer-Encoding whose last coding is not chunked")]
    TransferEncoding,
    /// Transfer-Encoding in an HTTP/1.0 request.
    #[error("Transfer-Encoding in an HTTP/1.0 request")]
    TransferEncodingHttp10,
    /// No complete head within [`MAX_HEAD`] bytes.
    #[error("request head longer than {MAX_HEAD} bytes")]
    TooLarge,
    /// More than 100 header lines.
    #[error("more than {MAX_HEADERS} header lines")]
    TooManyHeaders,
    /// A header name of 64 KiB or more.
    #[error("header name of 64 KiB or more")]
    NameTooLong,
    /// A Content-Length above `u64::MAX - 2`.
    #[error("Content-Length above {MAX_CONTENT_LENGTH}")]
    ContentLengthTooLarge,
    /// A request target over 65534 bytes.
    #[error("request target longer than {MAX_URI_LEN} bytes")]
    UriTooLong,
    /// The client speaks HTTP/2 with prior knowledge (the buffer, after any
    /// empty lines, starts with its preface).
    #[error("HTTP/2 connection preface on an HTTP/1.1 connection")]
    Http2Preface,
    /// A header httparse accepted and the `http` crate refuses; not expected
    /// (their byte classes agree), and where hyper closes without answering.
    #[error("header accepted by httparse refused by the http crate")]
    Internal,
}

impl HeadError {
    /// The status hyper answers the refusal with, or None where it closes
    /// the connection without an answer (`Server::on_error`, role.rs ~510).
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            HeadError::Method
            | HeadError::Uri
            | HeadError::Version
            | HeadError::Header
            | HeadError::ContentLength
            | HeadError::TransferEncoding
            | HeadError::TransferEncodingHttp10 => Some(StatusCode::BAD_REQUEST),
            HeadError::TooLarge
            | HeadError::TooManyHeaders
            | HeadError::NameTooLong
            | HeadError::ContentLengthTooLarge => Some(StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE),
            HeadError::UriTooLong => Some(StatusCode::URI_TOO_LONG),
            HeadError::Http2Preface | HeadError::Internal => None,
        }
    }
}

/// Parses a request head from the front of `buf`.
///
/// `Ok(Some(head))` removes the head's bytes, and any empty lines before it
/// (httparse skips them, as in hyper), from `buf`; what follows (body,
/// pipelined requests) stays. `Ok(None)`: incomplete, read more; once `buf`
/// holds [`MAX_HEAD`] bytes without a complete head this returns
/// [`HeadError::TooLarge`] itself (`Buffered::parse`'s check). Like hyper it
/// parses all of `buf`: hyper reads into its buffer's whole spare capacity
/// (io.rs `poll_read_from_io`), so one read can take it past `max_buf_size`
/// and a head that ends there is still taken. A caller that reads at most
/// up to [`MAX_HEAD`] gets the strict limit. On an error the connection
/// is done; like hyper's buffer, `buf` has then lost the head's bytes if the
/// error was found after the head was split off (target, header values).
///
/// This parses all of `buf` every time it is called; a connection reads
/// heads with a [`HeadReader`], which calls it only when new bytes may
/// have ended the head, as hyper does.
pub fn parse(buf: &mut BytesMut) -> Result<Option<RequestHead>, HeadError> {
    match parse_head(buf) {
        // `Conn::on_read_head_error` drops leading CR/LF bytes, then
        // `on_parse_error` closes silently on the HTTP/2 preface.
        Err(_) if after_empty_lines(buf).starts_with(H2_PREFACE) => Err(HeadError::Http2Preface),
        result => result,
    }
}

/// Whether the bytes that came since `buf` was `prev_len` long may end a
/// head (`\r\n\r\n`, `\n\n` or `\n\r\n`, looking back 3 bytes): hyper's
/// `is_complete_fast`, which it checks before parsing a head again.
pub fn may_end(buf: &[u8], prev_len: usize) -> bool {
    let bytes = &buf[prev_len.saturating_sub(3).min(buf.len())..];
    bytes.iter().enumerate().any(|(i, &b)| {
        let rest = &bytes[i + 1..];
        match b {
            b'\r' => rest.starts_with(b"\n\r\n"),
            b'\n' => rest.starts_with(b"\n") || rest.starts_with(b"\r\n"),
            _ => false,
        }
    })
}

/// Request heads read off a connection's buffer as its bytes come, as
/// hyper's server reads them (`Buffered::parse`, `Conn::poll_read_head`).
///
/// A head that came in pieces is parsed again only once the new bytes may
/// end it ([`may_end`], hyper's `is_complete_fast`): parsing it whole after
/// every read would cost the square of its length. So a head broken
/// before its end is refused once its end arrives (or when the buffer is
/// full), not as soon as the broken byte does, and a connection that
/// closes first is closed on without an answer; hyper does the same.
#[derive(Debug, Default)]
pub struct HeadReader {
    /// `buf`'s length when a head in it was last found incomplete; 0 when
    /// none was.
    partial: usize,
}

impl HeadReader {
    /// The head at the front of `buf`, once it is whole: it and the empty
    /// lines before it are taken off `buf`, and what follows stays. `Ok(None)`:
    /// read more. [`HeadError::TooLarge`] once `buf` holds [`MAX_HEAD`]
    /// bytes and no head; a caller that reads no more than that into `buf`
    /// while this returns `None` keeps hyper's limit exactly.
    pub fn read(&mut self, buf: &mut BytesMut) -> Result<Option<RequestHead>, HeadError> {
        if buf.is_empty() {
            return Ok(None);
        }
        let parsed = if self.partial == 0 || may_end(buf, self.partial) {
            parse(buf)?
        } else {
            None
        };
        match parsed {
            Some(head) => {
                self.partial = 0;
                Ok(Some(head))
            }
            None if buf.len() >= MAX_HEAD => Err(HeadError::TooLarge),
            None => {
                self.partial = buf.len();
                Ok(None)
            }
        }
    }
}

/// `buf` without the CR and LF bytes it starts with (`consume_leading_lines`).
fn after_empty_lines(buf: &[u8]) -> &[u8] {
    let start = buf.iter().position(|&b| b != b'\r' && b != b'\n');
    &buf[start.unwrap_or(buf.len())..]
}

/// Where a header's name and value lie in the head: httparse's slices
/// borrow `buf`, which the head is then split off. `u32` (heads over 4 GiB
/// are refused): the array is zeroed on every parse, hyper's is not.
#[derive(Clone, Copy, Default)]
struct Span {
    name: (u32, u32),
    value: (u32, u32),
}

/// The range `part` takes in the slice starting at address `base`.
fn range(base: usize, part: &[u8]) -> Range<usize> {
    let start = part.as_ptr() as usize - base;
    start..start + part.len()
}

fn span(base: usize, part: &[u8]) -> (u32, u32) {
    let r = range(base, part);
    (r.start as u32, r.end as u32)
}

fn parse_head(buf: &mut BytesMut) -> Result<Option<RequestHead>, HeadError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut spans = [Span::default(); MAX_HEADERS];
    let (len, method, path, is_http_11, count) = {
        let bytes = &buf[..];
        let mut slots = [MaybeUninit::<httparse::Header<'_>>::uninit(); MAX_HEADERS];
        let mut req = httparse::Request::new(&mut []);
        // hyper's server `h1_parser_config` is httparse's default (strict).
        let config = httparse::ParserConfig::default();
        let len = match config.parse_request_with_uninit_headers(&mut req, bytes, &mut slots) {
            Ok(httparse::Status::Complete(len)) if len <= u32::MAX as usize => len,
            Ok(httparse::Status::Complete(_)) => return Err(HeadError::TooLarge),
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                return Err(HeadError::TooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            // A bad token before the method is known is the method's.
            Err(httparse::Error::Token) if req.method.is_none() => return Err(HeadError::Method),
            Err(httparse::Error::Token) => return Err(HeadError::Uri),
            Err(httparse::Error::Version) => return Err(HeadError::Version),
            Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooManyHeaders),
            Err(_) => return Err(HeadError::Header),
        };
        let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
            return Err(HeadError::Internal);
        };
        // hyper's order: target length, method, header name lengths, then
        // (after the split) the target's syntax and the header semantics.
        if path.len() > MAX_URI_LEN {
            return Err(HeadError::UriTooLong);
        }
        let method = Method::from_bytes(method.as_bytes()).map_err(|_| HeadError::Method)?;
        let base = bytes.as_ptr() as usize;
        for (header, span_of) in req.headers.iter().zip(&mut spans) {
            if header.name.len() >= MAX_NAME_LEN {
                return Err(HeadError::NameTooLong);
            }
            *span_of = Span {
                name: span(base, header.name.as_bytes()),
                value: span(base, header.value),
            };
        }
        (
            len,
            method,
            range(base, path.as_bytes()),
            version == 1,
            req.headers.len(),
        )
    };

    // One allocation shared by the target and every header value, as in
    // hyper; `buf` keeps what follows the head.
    let head = buf.split_to(len).freeze();
    let uri = Uri::from_maybe_shared(head.slice(path)).map_err(|_| HeadError::Uri)?;

    let mut framing = BodyFraming::Length(0);
    let mut keep_alive = is_http_11;
    let mut expect_continue = false;
    let mut con_len = None;
    let mut is_cl = false;
    let mut is_te = false;
    let mut is_te_chunked = false;
    let mut saw_connection_close = false;
    let mut headers = HeaderMap::with_capacity(count);
    for s in &spans[..count] {
        let name = &head[s.name.0 as usize..s.name.1 as usize];
        let name = HeaderName::from_bytes(name).map_err(|_| HeadError::Internal)?;
        let value = head.slice(s.value.0 as usize..s.value.1 as usize);
        let value = HeaderValue::from_maybe_shared(value).map_err(|_| HeadError::Internal)?;
        match name {
            header::TRANSFER_ENCODING => {
                if !is_http_11 {
                    return Err(HeadError::TransferEncodingHttp10);
                }
                is_te = true;
                // A Content-Length before it goes; one after it is skipped.
                // `remove` reorders the map as hyper's does.
                if is_cl && con_len.take().is_some() {
                    headers.remove(header::CONTENT_LENGTH);
                }
                // Only the last Transfer-Encoding line counts.
                is_te_chunked = is_chunked(&value);
                if is_te_chunked {
                    framing = BodyFraming::Chunked;
                }
            }
            header::CONTENT_LENGTH => {
                is_cl = true;
                if is_te {
                    continue;
                }
                let len = digits(value.as_bytes()).ok_or(HeadError::ContentLength)?;
                if let Some(prev) = con_len {
                    if prev != len {
                        return Err(HeadError::ContentLength);
                    }
                    // An equal repeat is not handed on.
                    continue;
                }
                if len > MAX_CONTENT_LENGTH {
                    return Err(HeadError::ContentLengthTooLarge);
                }
                framing = BodyFraming::Length(len);
                con_len = Some(len);
            }
            header::CONNECTION => {
                // Once a line asks to close, a later keep-alive cannot undo it.
                if saw_connection_close || has_token(&value, "close") {
                    saw_connection_close = true;
                    keep_alive = false;
                } else if !keep_alive {
                    // HTTP/1.0, closed by default: the last line decides.
                    keep_alive = has_token(&value, "keep-alive");
                }
            }
            // The last Expect line decides.
            header::EXPECT => {
                expect_continue = value.as_bytes().eq_ignore_ascii_case(b"100-continue")
            }
            _ => (),
        }
        headers.append(name, value);
    }
    if is_te && !is_te_chunked {
        return Err(HeadError::TransferEncoding);
    }
    if is_te && is_cl {
        keep_alive = false;
    }

    let (mut parts, ()) = http::Request::new(()).into_parts();
    parts.method = method;
    parts.uri = uri;
    parts.version = if is_http_11 {
        Version::HTTP_11
    } else {
        Version::HTTP_10
    };
    parts.headers = headers;
    Ok(Some(RequestHead {
        parts,
        expect_continue: expect_continue && is_http_11 && framing != BodyFraming::Length(0),
        framing,
        keep_alive,
    }))
}

#[cfg(test)]
mod tests;
