//! A response's head on a client's connection, encoded as hyper 1.12's
//! HTTP/1.1 server encodes it.
//!
//! tokenclock is transparent: a client must not see a different byte when
//! tokenclock's own codec replaces hyper's server connection. So this module
//! makes the decisions hyper makes, in hyper's order, with hyper's quirks
//! (`Server::encode` and `Server::encode_headers` in `proto/h1/role.rs`,
//! `Conn::enforce_version` and `Conn::fix_keep_alive` in `proto/h1/conn.rs`,
//! the chunk framing of `proto/h1/encode.rs`, the cached date of
//! `common/date.rs`), for the lower-case header path only: tokenclock never
//! asks hyper for title case or original header case.

use std::cell::RefCell;
use std::time::{SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode, Version};
use http_body::SizeHint;

/// What the response's body is framed as on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body may be written (a response to HEAD, a 1xx, 204 or 304, a 2xx
    /// to CONNECT): hyper drops whatever the body yields.
    None,
    /// Exactly this many bytes: hyper writes no more than that, whatever the
    /// body yields.
    Length(u64),
    /// `transfer-encoding: chunked`: a size line per data frame, then
    /// [`encode_last_chunk`].
    Chunked,
    /// The body ends when the connection closes (an unknown size to an
    /// HTTP/1.0 client, or where chunked may not be used).
    CloseDelimited,
}

/// What the response is answering: facts of the request.
pub(crate) struct Answering<'a> {
    /// The request's method (HEAD and CONNECT change what may be written).
    pub(crate) method: &'a Method,
    /// The request's version, `HTTP_10` or `HTTP_11`: hyper answers an
    /// HTTP/1.0 client in HTTP/1.0.
    pub(crate) version: Version,
    /// Whether the connection may still be kept alive before this response:
    /// the request's decision, and false when the server is shutting down.
    pub(crate) keep_alive: bool,
}

/// A response hyper refuses to write. hyper writes no byte of the refused
/// head (it rewinds its buffer), except where said, and closes the
/// connection once what it wrote is flushed: `serve_connection` ends with the
/// error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum EncodeError {
    /// A 1xx status other than 101. hyper writes a canned
    /// `500 Internal Server Error` head in its place (`content-length: 0`
    /// unless answering HEAD, and `date`), which [`encode_head`] leaves in
    /// `dst`, then closes (`Error::new_user_unsupported_status_code`).
    #[error("response with 1xx status code {0} not supported")]
    Informational(StatusCode),
    /// A `content-length` after the length was already decided (after a
    /// `transfer-encoding`, on a 2xx to CONNECT, or a second value when
    /// answering HEAD with an empty body).
    #[error("unexpected content-length found")]
    UnexpectedContentLength,
    /// A `transfer-encoding` after the length was already decided.
    #[error("unexpected transfer-encoding found")]
    UnexpectedTransferEncoding,
    /// Two `content-length` values that differ, for a body of unknown size.
    #[error("multiple content-length values found: {0}, {1}")]
    ConflictingContentLength(u64, u64),
    /// A `content-length` that is not only digits fitting a u64, for a body
    /// of unknown size (hyper trusts the body's exact size otherwise).
    #[error("illegal content-length value")]
    InvalidContentLength,
    /// A response version hyper cannot write (HTTP/0.9, HTTP/3): hyper panics
    /// in the connection's task, which drops the connection unwritten.
    #[error("unexpected response version: {0:?}")]
    UnsupportedVersion(Version),
}

/// The body's length as hyper's dispatcher reports it to the encoder:
/// nothing when the body is at its end already, else its exact size if the
/// size hint has one.
#[derive(Clone, Copy)]
enum BodyLength {
    None,
    Known(u64),
    Unknown,
}

/// Writes the response head to `dst` as hyper writes it: the status line,
/// the headers in the map's order, and what hyper adds
/// (`content-length`/`transfer-encoding`, `connection: keep-alive`/`close`,
/// `date`). `body` is the body's size hint and `end_stream` its
/// `is_end_stream()` when the head is written. Returns how the body is framed
/// and whether the connection is kept alive after this response (its body
/// fully written).
pub(crate) fn encode_head(
    head: &http::response::Parts,
    body: &SizeHint,
    end_stream: bool,
    answering: &Answering<'_>,
    dst: &mut Vec<u8>,
) -> Result<(Framing, bool), EncodeError> {
    let method = answering.method;
    let status = head.status;
    let body = match (end_stream, body.exact()) {
        (true, _) => BodyLength::None,
        (false, Some(len)) => BodyLength::Known(len),
        (false, None) => BodyLength::Unknown,
    };

    // `Conn::enforce_version` and `fix_keep_alive` (conn.rs:672-735): the
    // value hyper appends to the `connection` header, and the version it
    // answers an HTTP/1.0 client in.
    let mut keep_alive = answering.keep_alive;
    let mut version = head.version;
    let mut added = None;
    let connection = head.headers.get_all(header::CONNECTION);
    match answering.version {
        Version::HTTP_10 => {
            if !connection.iter().any(connection_keep_alive) {
                match head.version {
                    Version::HTTP_10 => keep_alive = false,
                    Version::HTTP_11 if keep_alive => {
                        added = Some(HeaderValue::from_static("keep-alive"));
                    }
                    _ => {}
                }
            }
            version = Version::HTTP_10;
        }
        Version::HTTP_11 if !keep_alive && !connection.iter().any(connection_close) => {
            added = Some(HeaderValue::from_static("close"));
        }
        _ => {}
    }

    // `Server::encode` (role.rs:390-420).
    let mut wrote_len = false;
    let is_last = if status == StatusCode::SWITCHING_PROTOCOLS {
        true
    } else if *method == Method::CONNECT && status.is_success() {
        // No content-length nor transfer-encoding on a 2xx to CONNECT.
        wrote_len = true;
        true
    } else if status.is_informational() {
        // hyper swaps in a default head: HTTP/1.1 500, no header, no body.
        dst.extend_from_slice(b"HTTP/1.1 500 Internal Server Error\r\n");
        if can_have_implicit_zero_content_length(method, StatusCode::INTERNAL_SERVER_ERROR) {
            dst.extend_from_slice(b"content-length: 0\r\n");
        }
        write_date_header(dst);
        return Err(EncodeError::Informational(status));
    } else {
        !keep_alive
    };

    let orig_len = dst.len();
    let reason = head.extensions.get::<hyper::ext::ReasonPhrase>();
    if version == Version::HTTP_11 && status == StatusCode::OK && reason.is_none() {
        dst.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
    } else {
        dst.extend_from_slice(match version {
            Version::HTTP_10 => b"HTTP/1.0 ",
            // hyper writes an HTTP/2 response as HTTP/1.1.
            Version::HTTP_11 | Version::HTTP_2 => b"HTTP/1.1 ",
            other => return Err(EncodeError::UnsupportedVersion(other)),
        });
        dst.extend_from_slice(status.as_str().as_bytes());
        dst.push(b' ');
        match reason {
            Some(reason) => dst.extend_from_slice(reason.as_bytes()),
            None => {
                let canonical = status.canonical_reason().unwrap_or("<none>");
                dst.extend_from_slice(canonical.as_bytes());
            }
        }
        dst.extend_from_slice(b"\r\n");
    }

    let mut writer = HeaderWriter {
        dst,
        method,
        status,
        http10: version == Version::HTTP_10,
        body,
        wrote_len,
        is_last,
        framing: Framing::Length(0),
        wrote_date: false,
        is_name_written: false,
        must_write_chunked: false,
        prev_content_length: None,
    };
    let result = writer.headers(&head.headers, added);
    let HeaderWriter {
        framing,
        is_last,
        wrote_date,
        ..
    } = writer;
    if let Err(err) = result {
        dst.truncate(orig_len);
        return Err(err);
    }
    let framing = if can_chunked(method, status) {
        framing
    } else {
        Framing::None
    };
    if wrote_date {
        dst.extend_from_slice(b"\r\n");
    } else {
        write_date_header(dst);
    }
    // After the body, hyper keeps the connection (`Writing::KeepAlive`)
    // unless the encoder is last or close-delimited (conn.rs:602, 801).
    Ok((framing, !is_last && framing != Framing::CloseDelimited))
}

/// The state of `Server::encode_headers` (role.rs:672-990), value by value.
struct HeaderWriter<'a> {
    dst: &'a mut Vec<u8>,
    method: &'a Method,
    status: StatusCode,
    /// The response goes out as HTTP/1.0: no chunked, no `trailer` header.
    http10: bool,
    body: BodyLength,
    /// The framing is decided by a header (or excluded, on a 2xx to CONNECT).
    wrote_len: bool,
    /// The connection closes after this response.
    is_last: bool,
    framing: Framing,
    wrote_date: bool,
    /// A special header's line is open: its further values join it with
    /// `, ` and the next name ends it.
    is_name_written: bool,
    /// A `transfer-encoding` value did not end in `chunked`. Never reset:
    /// hyper ends every later special header's line with `, chunked` too.
    must_write_chunked: bool,
    prev_content_length: Option<u64>,
}

impl HeaderWriter<'_> {
    /// Every value of `headers` in the map's order (the order of hyper's
    /// `drain`), with `added` as the `connection` entry's last value, or as a
    /// new entry at the end, where hyper's `HeaderMap::entry` puts it.
    fn headers(
        &mut self,
        headers: &HeaderMap,
        mut added: Option<HeaderValue>,
    ) -> Result<(), EncodeError> {
        let mut prev: Option<&HeaderName> = None;
        for (name, value) in headers {
            let first = prev != Some(name);
            if first {
                if prev == Some(&header::CONNECTION) {
                    if let Some(value) = added.take() {
                        self.value(&header::CONNECTION, &value, false)?;
                    }
                }
                prev = Some(name);
            }
            self.value(name, value, first)?;
        }
        if let Some(value) = added {
            let first = prev != Some(&header::CONNECTION);
            self.value(&header::CONNECTION, &value, first)?;
        }
        self.end_line();
        if !self.wrote_len {
            self.implicit_length();
        }
        Ok(())
    }

    /// Ends the open special header's line (`handle_is_name_written!`).
    fn end_line(&mut self) {
        if self.is_name_written {
            if self.must_write_chunked {
                self.dst.extend_from_slice(b", chunked\r\n");
            } else {
                self.dst.extend_from_slice(b"\r\n");
            }
        }
    }

    /// Joins a value to the open special header's line, or opens it.
    fn join(&mut self, name_with_colon: &[u8], value: &HeaderValue) {
        if self.is_name_written {
            self.dst.extend_from_slice(b", ");
        } else {
            self.is_name_written = true;
            self.dst.extend_from_slice(name_with_colon);
        }
        self.dst.extend_from_slice(value.as_bytes());
    }

    fn value(
        &mut self,
        name: &HeaderName,
        value: &HeaderValue,
        first: bool,
    ) -> Result<(), EncodeError> {
        if first {
            self.end_line();
            self.is_name_written = false;
        }
        match *name {
            header::CONTENT_LENGTH => {
                if self.wrote_len && !self.is_name_written {
                    return Err(EncodeError::UnexpectedContentLength);
                }
                match self.body {
                    // hyper trusts the body's size over the header's value
                    // (debug builds of hyper assert they agree).
                    BodyLength::Known(len) => {
                        if !self.is_name_written {
                            self.framing = Framing::Length(len);
                            self.join(b"content-length: ", value);
                            self.wrote_len = true;
                        }
                        return Ok(());
                    }
                    BodyLength::Unknown => {
                        let len =
                            content_length_parse(value).ok_or(EncodeError::InvalidContentLength)?;
                        match self.prev_content_length {
                            Some(prev) if prev != len => {
                                return Err(EncodeError::ConflictingContentLength(prev, len));
                            }
                            Some(_) => {}
                            None => {
                                self.framing = Framing::Length(len);
                                self.join(b"content-length: ", value);
                                self.wrote_len = true;
                                self.prev_content_length = Some(len);
                            }
                        }
                        return Ok(());
                    }
                    // An empty body: the header is dropped (and
                    // `content-length: 0` added) unless answering HEAD,
                    // where it is written as is, as an ordinary header.
                    BodyLength::None if *self.method != Method::HEAD => return Ok(()),
                    BodyLength::None => self.wrote_len = true,
                }
            }
            header::TRANSFER_ENCODING => {
                if self.wrote_len && !self.is_name_written {
                    return Err(EncodeError::UnexpectedTransferEncoding);
                }
                if self.http10 || !can_chunked(self.method, self.status) {
                    return Ok(());
                }
                self.wrote_len = true;
                self.must_write_chunked = !is_chunked(value);
                if !self.is_name_written {
                    self.framing = Framing::Chunked;
                }
                self.join(b"transfer-encoding: ", value);
                return Ok(());
            }
            header::CONNECTION => {
                if !self.is_last && connection_close(value) {
                    self.is_last = true;
                }
                self.join(b"connection: ", value);
                return Ok(());
            }
            header::DATE => self.wrote_date = true,
            header::TRAILER => {
                if !self.http10 && can_chunked(self.method, self.status) {
                    self.join(b"trailer: ", value);
                }
                return Ok(());
            }
            _ => {}
        }
        self.dst.extend_from_slice(name.as_str().as_bytes());
        self.dst.extend_from_slice(b": ");
        self.dst.extend_from_slice(value.as_bytes());
        self.dst.extend_from_slice(b"\r\n");
        Ok(())
    }

    /// The framing when no header decided it, and hyper's header for it.
    fn implicit_length(&mut self) {
        let (method, status) = (self.method, self.status);
        self.framing = match self.body {
            BodyLength::Unknown if self.http10 || !can_chunked(method, status) => {
                Framing::CloseDelimited
            }
            BodyLength::Unknown => {
                self.dst
                    .extend_from_slice(b"transfer-encoding: chunked\r\n");
                Framing::Chunked
            }
            BodyLength::None | BodyLength::Known(0) => {
                if can_have_implicit_zero_content_length(method, status) {
                    self.dst.extend_from_slice(b"content-length: 0\r\n");
                }
                Framing::Length(0)
            }
            BodyLength::Known(len) if can_have_content_length(method, status) => {
                self.dst.extend_from_slice(b"content-length: ");
                self.dst
                    .extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
                self.dst.extend_from_slice(b"\r\n");
                Framing::Length(len)
            }
            BodyLength::Known(_) => Framing::Length(0),
        };
    }
}

/// `Server::can_chunked`, which is also `can_have_body` (role.rs:526).
fn can_chunked(method: &Method, status: StatusCode) -> bool {
    !(*method == Method::HEAD
        || *method == Method::CONNECT && status.is_success()
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED)
}

/// `Server::can_have_content_length` (role.rs:539): HEAD may have one.
fn can_have_content_length(method: &Method, status: StatusCode) -> bool {
    !(status.is_informational()
        || *method == Method::CONNECT && status.is_success()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED)
}

fn can_have_implicit_zero_content_length(method: &Method, status: StatusCode) -> bool {
    can_have_content_length(method, status) && *method != Method::HEAD
}

/// hyper's `connection_has`: a comma-separated token, trimmed, any case.
fn connection_has(value: &HeaderValue, needle: &str) -> bool {
    value.to_str().is_ok_and(|s| {
        s.split(',')
            .any(|token| token.trim().eq_ignore_ascii_case(needle))
    })
}

fn connection_keep_alive(value: &HeaderValue) -> bool {
    connection_has(value, "keep-alive")
}

fn connection_close(value: &HeaderValue) -> bool {
    connection_has(value, "close")
}

/// hyper's `is_chunked_`: the value's last encoding is `chunked`.
fn is_chunked(value: &HeaderValue) -> bool {
    value.to_str().is_ok_and(|s| {
        s.rsplit(',')
            .next()
            .is_some_and(|last| last.trim().eq_ignore_ascii_case("chunked"))
    })
}

/// hyper's `from_digits`: ASCII digits only (no sign, no list, no spaces),
/// fitting a u64.
fn content_length_parse(value: &HeaderValue) -> Option<u64> {
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |len, &b| {
        if !b.is_ascii_digit() {
            return None;
        }
        len.checked_mul(10)?.checked_add(u64::from(b - b'0'))
    })
}

// A usize is at most 16 hex digits, which SizeLine's buffer holds.
const _: () = assert!(usize::BITS <= 64);

/// A chunk's size line: hyper's `write!("{len:X}\r\n")` (encode.rs:370),
/// upper-case hex without leading zeros, written without `core::fmt`.
pub(crate) struct SizeLine {
    buf: [u8; 18],
    start: u8,
}

impl SizeLine {
    /// The size line of a chunk of `len` bytes.
    pub(crate) fn new(len: usize) -> Self {
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
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf[usize::from(self.start)..]
    }
}

/// Writes the end of a chunked body: the last chunk, with the trailers hyper
/// lets through. hyper writes a trailer field only if the request had
/// `TE: trailers` (`te_trailers`, conn.rs:757), the response head's `trailer`
/// header (`head`, its headers) names it, and it is not a field forbidden in
/// trailers (encode.rs:263); the others are dropped silently. Call it only
/// for [`Framing::Chunked`]: hyper drops trailers of any other framing.
pub(crate) fn encode_last_chunk(
    trailers: Option<&HeaderMap>,
    head: &HeaderMap,
    te_trailers: bool,
    dst: &mut Vec<u8>,
) {
    dst.extend_from_slice(b"0\r\n");
    if let (Some(trailers), true) = (trailers, te_trailers) {
        for (name, value) in trailers {
            if is_valid_trailer_field(name) && declared_trailer(head, name) {
                dst.extend_from_slice(name.as_str().as_bytes());
                dst.extend_from_slice(b": ");
                dst.extend_from_slice(value.as_bytes());
                dst.extend_from_slice(b"\r\n");
            }
        }
    }
    dst.extend_from_slice(b"\r\n");
}

/// Whether the head's `trailer` header names `name`, as hyper parses it
/// (role.rs:910): values that are strings, split on commas, trimmed, any
/// case (a token equal to a valid name up to case is the same `HeaderName`).
fn declared_trailer(head: &HeaderMap, name: &HeaderName) -> bool {
    head.get_all(header::TRAILER).iter().any(|value| {
        value.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|token| token.trim().eq_ignore_ascii_case(name.as_str()))
        })
    })
}

/// hyper's `is_valid_trailer_field`.
fn is_valid_trailer_field(name: &HeaderName) -> bool {
    !matches!(
        *name,
        header::AUTHORIZATION
            | header::CACHE_CONTROL
            | header::CONTENT_ENCODING
            | header::CONTENT_LENGTH
            | header::CONTENT_RANGE
            | header::CONTENT_TYPE
            | header::HOST
            | header::MAX_FORWARDS
            | header::SET_COOKIE
            | header::TRAILER
            | header::TRANSFER_ENCODING
            | header::TE
    )
}

/// The length of an IMF-fixdate, `Sun, 06 Nov 1994 08:49:37 GMT`.
const DATE_VALUE_LENGTH: usize = 29;

/// The `date` value, rendered once a second per thread as hyper's
/// thread-local cache does (common/date.rs): formatting it per response costs
/// more than the rest of the head.
struct CachedDate {
    bytes: [u8; DATE_VALUE_LENGTH],
    next_update: SystemTime,
}

thread_local!(static CACHED_DATE: RefCell<CachedDate> = const { RefCell::new(CachedDate {
    bytes: [0; DATE_VALUE_LENGTH],
    next_update: UNIX_EPOCH,
}) });

/// Writes `date: <now>\r\n\r\n`, the end of a head without a `date` of its own.
fn write_date_header(dst: &mut Vec<u8>) {
    dst.extend_from_slice(b"date: ");
    extend_date(dst);
    dst.extend_from_slice(b"\r\n\r\n");
}

/// Writes the current `date` value, refreshed when its second is past.
pub(crate) fn extend_date(dst: &mut Vec<u8>) {
    CACHED_DATE.with(|cache| {
        let mut cache = cache.borrow_mut();
        let now = SystemTime::now();
        if now >= cache.next_update {
            let since_epoch = now.duration_since(UNIX_EPOCH).unwrap_or_default();
            let secs = since_epoch.as_secs();
            cache.bytes = render_date(secs);
            cache.next_update = UNIX_EPOCH + std::time::Duration::from_secs(secs + 1);
        }
        dst.extend_from_slice(&cache.bytes);
    });
}

/// The IMF-fixdate of `secs` since the Unix epoch, as `httpdate` writes it
/// (years past 9999 wrap: hyper's httpdate cannot write them at all).
fn render_date(secs: u64) -> [u8; DATE_VALUE_LENGTH] {
    const WEEKDAYS: [&[u8; 3]; 7] = [b"Sun", b"Mon", b"Tue", b"Wed", b"Thu", b"Fri", b"Sat"];
    const MONTHS: [&[u8; 3]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    let days = secs / 86_400;
    let of_day = secs % 86_400;
    // Howard Hinnant's civil_from_days, on unsigned days since 1970-01-01.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);

    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    let two = |out: &mut [u8; DATE_VALUE_LENGTH], at: usize, n: u64| {
        out[at] = b'0' + (n / 10 % 10) as u8;
        out[at + 1] = b'0' + (n % 10) as u8;
    };
    out[..3].copy_from_slice(WEEKDAYS[((days + 4) % 7) as usize]);
    two(&mut out, 5, day);
    out[8..11].copy_from_slice(MONTHS[((month + 11) % 12) as usize]);
    two(&mut out, 12, year / 100);
    two(&mut out, 14, year);
    two(&mut out, 17, of_day / 3_600);
    two(&mut out, 20, of_day / 60 % 60);
    two(&mut out, 23, of_day % 60);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::convert::Infallible;
    use std::pin::Pin;
    use std::task::{Context, Poll};
    use std::time::Duration;

    use bytes::Bytes;
    use http::{Request, Response};
    use http_body::{Body as _, Frame};
    use http_body_util::{BodyExt, Either, Full};
    use hyper::body::Incoming;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use proptest::prelude::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// The body's data: two chunks, the second long enough for a
    /// three-digit size line.
    const CHUNKS: [&str; 2] = ["hello world, ", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"];
    const USER_DATE: &str = "Thu, 01 Jan 1970 00:00:00 GMT";

    fn payload() -> Vec<u8> {
        CHUNKS.concat().into_bytes()
    }

    /// The service's body, as the response's body kinds a service returns.
    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Kind {
        /// `Full` of nothing: at its end already.
        Empty,
        /// `Full` of the payload: its exact size.
        Full,
        /// The payload in two frames, size unknown (a stream).
        Stream,
        /// The payload in two frames with an exact size hint.
        StreamExact,
        /// No frame, an exact size of 0, but not at its end yet.
        ExactZero,
    }

    /// A streamed body: frames, trailers, a chosen size hint.
    struct TestBody {
        chunks: VecDeque<Bytes>,
        trailers: Option<HeaderMap>,
        hint: SizeHint,
        ends_visibly: bool,
    }

    impl http_body::Body for TestBody {
        type Data = Bytes;
        type Error = Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
            let frame = match self.chunks.pop_front() {
                Some(chunk) => Some(Frame::data(chunk)),
                None => self.trailers.take().map(Frame::trailers),
            };
            Poll::Ready(frame.map(Ok))
        }

        fn is_end_stream(&self) -> bool {
            self.ends_visibly && self.chunks.is_empty() && self.trailers.is_none()
        }

        fn size_hint(&self) -> SizeHint {
            self.hint
        }
    }

    type TestResponse = Response<Either<Full<Bytes>, TestBody>>;

    /// One exchange: the request's facts and the service's response.
    #[derive(Clone, Debug)]
    struct Case {
        method: Method,
        version: Version,
        req_connection: Option<&'static str>,
        te_trailers: bool,
        status: u16,
        res_version: Version,
        reason: bool,
        headers: Vec<(&'static str, String)>,
        body: Kind,
        trailers: bool,
    }

    fn case(method: Method, version: Version, status: u16, body: Kind) -> Case {
        Case {
            method,
            version,
            req_connection: None,
            te_trailers: false,
            status,
            res_version: Version::HTTP_11,
            reason: false,
            headers: Vec::new(),
            body,
            trailers: false,
        }
    }

    impl Case {
        fn conn(mut self, value: &'static str) -> Self {
            self.req_connection = Some(value);
            self
        }

        fn header(mut self, name: &'static str, value: &str) -> Self {
            self.headers.push((name, value.to_owned()));
            self
        }

        /// A `content-length` header true to the body (hyper asserts so).
        fn length(self) -> Self {
            let len = if self.body == Kind::ExactZero {
                0
            } else {
                payload().len()
            };
            self.header("content-length", &len.to_string())
        }

        fn trailers(mut self, te: bool) -> Self {
            self.trailers = true;
            self.te_trailers = te;
            self
        }

        fn request(&self) -> Vec<u8> {
            let version = if self.version == Version::HTTP_10 {
                "1.0"
            } else {
                "1.1"
            };
            let target = if self.method == Method::CONNECT {
                "t:443"
            } else {
                "/"
            };
            let mut req = format!("{} {target} HTTP/{version}\r\nhost: t\r\n", self.method);
            if let Some(connection) = self.req_connection {
                req += &format!("connection: {connection}\r\n");
            }
            if self.te_trailers {
                req += "te: trailers\r\n";
            }
            if self.method == Method::POST {
                req += "content-length: 3\r\n\r\nabc";
            } else {
                req += "\r\n";
            }
            // Answered only if the connection is kept alive: then closes.
            req += "GET /second HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n";
            req.into_bytes()
        }

        /// hyper's keep-alive decision from the request head (role.rs:290).
        fn answering(&self) -> Answering<'_> {
            let tokens = |token: &str| {
                self.req_connection
                    .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
            };
            let keep_alive = if self.version == Version::HTTP_10 {
                tokens("keep-alive")
            } else {
                !tokens("close")
            };
            Answering {
                method: &self.method,
                version: self.version,
                keep_alive,
            }
        }

        fn trailer_map(&self) -> Option<HeaderMap> {
            self.trailers.then(|| {
                let mut map = HeaderMap::new();
                map.append("x-t", HeaderValue::from_static("v1"));
                map.append("content-type", HeaderValue::from_static("text/plain"));
                map.append("x-u", HeaderValue::from_static("undeclared"));
                map.append("x-t", HeaderValue::from_static("v2"));
                map
            })
        }

        fn response(&self) -> TestResponse {
            let streamed = |hint: SizeHint, chunks: &[&str], ends_visibly| TestBody {
                chunks: chunks.iter().map(|c| Bytes::from(c.to_string())).collect(),
                trailers: self.trailer_map(),
                hint,
                ends_visibly,
            };
            let len = payload().len() as u64;
            let body = match self.body {
                Kind::Empty => Either::Left(Full::new(Bytes::new())),
                Kind::Full => Either::Left(Full::new(Bytes::from(payload()))),
                Kind::Stream => Either::Right(streamed(SizeHint::new(), &CHUNKS, true)),
                Kind::StreamExact => {
                    Either::Right(streamed(SizeHint::with_exact(len), &CHUNKS, true))
                }
                Kind::ExactZero => Either::Right(streamed(SizeHint::with_exact(0), &[], false)),
            };
            let mut res = Response::new(body);
            *res.status_mut() = StatusCode::from_u16(self.status).expect("a status");
            *res.version_mut() = self.res_version;
            for (name, value) in &self.headers {
                let value = HeaderValue::from_str(value).expect("a header value");
                res.headers_mut().append(*name, value);
            }
            if self.reason {
                let reason = hyper::ext::ReasonPhrase::from_static(b"Fine Thanks");
                res.extensions_mut().insert(reason);
            }
            res
        }

        /// What tokenclock writes: the head, the framed body, and whether
        /// the second response follows.
        fn expected(&self) -> (Vec<u8>, bool) {
            let (parts, body) = self.response().into_parts();
            let mut out = Vec::new();
            let answering = self.answering();
            let hint = body.size_hint();
            let end = body.is_end_stream();
            let (framing, keep_alive) = match encode_head(&parts, &hint, end, &answering, &mut out)
            {
                Ok(decided) => decided,
                Err(_) => return (out, false),
            };
            let data: Vec<&str> = match self.body {
                Kind::Empty | Kind::ExactZero => vec![],
                Kind::Full => vec![CHUNKS[0], CHUNKS[1]],
                Kind::Stream | Kind::StreamExact => CHUNKS.to_vec(),
            };
            match framing {
                Framing::None => {}
                Framing::Length(n) => {
                    let all = data.concat();
                    out.extend_from_slice(&all.as_bytes()[..all.len().min(n as usize)]);
                }
                Framing::CloseDelimited => out.extend_from_slice(data.concat().as_bytes()),
                Framing::Chunked => {
                    // Full is one frame.
                    let frames = if self.body == Kind::Full {
                        vec![data.concat()]
                    } else {
                        data.iter().map(|d| d.to_string()).collect()
                    };
                    for frame in frames {
                        out.extend_from_slice(SizeLine::new(frame.len()).as_bytes());
                        out.extend_from_slice(frame.as_bytes());
                        out.extend_from_slice(b"\r\n");
                    }
                    let trailers = self.trailer_map();
                    encode_last_chunk(
                        trailers.as_ref(),
                        &parts.headers,
                        self.te_trailers,
                        &mut out,
                    );
                }
            }
            (out, keep_alive)
        }
    }

    /// Everything hyper's server writes for the case's request, until it
    /// closes the connection.
    async fn hyper_writes(case: &Case) -> Vec<u8> {
        let (mut client, server) = tokio::io::duplex(1 << 16);
        let service_case = case.clone();
        let service = service_fn(move |req: Request<Incoming>| {
            let case = service_case.clone();
            async move {
                let second = req.uri().path() == "/second";
                let _ = req.into_body().collect().await;
                let res = if second {
                    Response::new(Either::Left(Full::new(Bytes::from_static(b"second"))))
                } else {
                    case.response()
                };
                Ok::<_, Infallible>(res)
            }
        });
        let conn = tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(server), service);
            let _ = conn.await;
        });
        let mut out = Vec::new();
        let exchange = async {
            client
                .write_all(&case.request())
                .await
                .expect("request written");
            client.read_to_end(&mut out).await.expect("response read");
        };
        tokio::time::timeout(Duration::from_secs(5), exchange)
            .await
            .expect("hyper closes the connection within 5 s");
        conn.abort();
        out
    }

    /// Masks the values of the `date` headers hyper (or we) added.
    fn mask_dates(bytes: &[u8]) -> String {
        let text = String::from_utf8_lossy(bytes);
        let mut out = String::new();
        let mut rest = &*text;
        while let Some(at) = rest.find("\r\ndate: ") {
            let (before, after) = rest.split_at(at + 8);
            out += before;
            let end = after.find("\r\n").unwrap_or(after.len());
            let value = &after[..end];
            if value == USER_DATE {
                out += value;
            } else {
                assert_eq!(value.len(), DATE_VALUE_LENGTH, "date {value:?}");
                assert!(value.ends_with(" GMT"), "date {value:?}");
                out += "<date>";
            }
            rest = &after[end..];
        }
        out + rest
    }

    async fn check(case: Case) {
        let written = hyper_writes(&case).await;
        let (expected, keep_alive) = case.expected();
        let actual = mask_dates(&written);
        let expected = mask_dates(&expected);
        let first = actual.get(..expected.len().min(actual.len())).unwrap_or("");
        assert_eq!(first, expected, "first response of {case:#?}");
        let rest = &actual[expected.len()..];
        assert_eq!(
            !rest.is_empty(),
            keep_alive,
            "kept alive, rest {rest:?}, {case:#?}"
        );
        if keep_alive {
            assert!(rest.starts_with("HTTP/1.1 200 OK\r\n"), "{rest:?}");
            assert!(rest.ends_with("\r\n\r\nsecond"), "{rest:?}");
        }
    }

    use Method as M;
    use Version as V;

    fn table() -> Vec<Case> {
        let (get, head, post, connect) = (M::GET, M::HEAD, M::POST, M::CONNECT);
        vec![
            case(get.clone(), V::HTTP_11, 200, Kind::Full),
            case(get.clone(), V::HTTP_11, 200, Kind::Empty),
            case(get.clone(), V::HTTP_11, 200, Kind::Stream),
            case(get.clone(), V::HTTP_11, 200, Kind::StreamExact),
            case(get.clone(), V::HTTP_11, 200, Kind::ExactZero),
            case(get.clone(), V::HTTP_11, 200, Kind::Stream).conn("close"),
            case(get.clone(), V::HTTP_11, 201, Kind::Full).length(),
            case(get.clone(), V::HTTP_11, 404, Kind::Stream).length(),
            case(get.clone(), V::HTTP_11, 500, Kind::Empty).length(),
            case(get.clone(), V::HTTP_11, 204, Kind::Stream),
            case(get.clone(), V::HTTP_11, 204, Kind::Full).length(),
            case(get.clone(), V::HTTP_11, 304, Kind::Full).length(),
            case(get.clone(), V::HTTP_11, 304, Kind::Empty),
            case(head.clone(), V::HTTP_11, 200, Kind::Full),
            case(head.clone(), V::HTTP_11, 200, Kind::Stream),
            case(head.clone(), V::HTTP_11, 200, Kind::Empty).length(),
            case(head.clone(), V::HTTP_11, 200, Kind::Empty)
                .length()
                .header("content-length", "5"),
            case(head.clone(), V::HTTP_10, 200, Kind::Full).conn("keep-alive"),
            case(post.clone(), V::HTTP_11, 201, Kind::Stream),
            case(post.clone(), V::HTTP_11, 200, Kind::Stream)
                .header("transfer-encoding", "chunked"),
            case(post.clone(), V::HTTP_11, 200, Kind::Full)
                .header("transfer-encoding", "gzip")
                .header("connection", "upgrade")
                .header("x-a", "1"),
            case(post.clone(), V::HTTP_11, 200, Kind::Stream)
                .header("transfer-encoding", "chunked")
                .length(),
            case(post.clone(), V::HTTP_11, 200, Kind::Stream)
                .length()
                .header("transfer-encoding", "chunked"),
            case(get.clone(), V::HTTP_11, 200, Kind::Stream).header("content-length", "x"),
            case(get.clone(), V::HTTP_11, 200, Kind::Stream)
                .length()
                .header("content-length", "7"),
            case(get.clone(), V::HTTP_10, 200, Kind::Full),
            case(get.clone(), V::HTTP_10, 200, Kind::Stream),
            case(get.clone(), V::HTTP_10, 200, Kind::Stream).conn("keep-alive"),
            case(get.clone(), V::HTTP_10, 200, Kind::Full).conn("keep-alive"),
            case(get.clone(), V::HTTP_10, 200, Kind::Full)
                .conn("keep-alive")
                .header("connection", "x-foo"),
            case(get.clone(), V::HTTP_10, 200, Kind::Stream).header("transfer-encoding", "chunked"),
            case(get.clone(), V::HTTP_11, 200, Kind::Full)
                .conn("close")
                .header("connection", "x-foo")
                .header("x-b", "2"),
            case(get.clone(), V::HTTP_11, 200, Kind::Full).header("connection", "close"),
            case(get.clone(), V::HTTP_11, 200, Kind::Full).header("date", USER_DATE),
            case(get.clone(), V::HTTP_11, 200, Kind::Stream)
                .header("trailer", "x-t, Content-Type")
                .trailers(true),
            case(get.clone(), V::HTTP_11, 200, Kind::Stream)
                .header("trailer", "x-t")
                .trailers(false),
            case(get.clone(), V::HTTP_11, 200, Kind::StreamExact)
                .header("trailer", "x-t")
                .trailers(true),
            case(get.clone(), V::HTTP_10, 200, Kind::Stream)
                .conn("keep-alive")
                .header("trailer", "x-t")
                .trailers(true),
            case(get.clone(), V::HTTP_11, 100, Kind::Full),
            case(head.clone(), V::HTTP_11, 103, Kind::Full),
            case(get.clone(), V::HTTP_11, 101, Kind::Stream),
            case(connect.clone(), V::HTTP_11, 200, Kind::Stream),
            case(connect.clone(), V::HTTP_11, 200, Kind::Full).length(),
            case(connect.clone(), V::HTTP_11, 404, Kind::Full),
            Case {
                res_version: V::HTTP_10,
                ..case(get.clone(), V::HTTP_11, 200, Kind::Stream)
            },
            Case {
                res_version: V::HTTP_10,
                ..case(get.clone(), V::HTTP_10, 200, Kind::Full)
            }
            .conn("keep-alive"),
            Case {
                res_version: V::HTTP_2,
                ..case(get.clone(), V::HTTP_10, 200, Kind::Full)
            }
            .conn("keep-alive"),
            Case {
                res_version: V::HTTP_2,
                ..case(get.clone(), V::HTTP_11, 404, Kind::Full)
            },
            Case {
                reason: true,
                ..case(post.clone(), V::HTTP_11, 200, Kind::Full)
            },
            Case {
                reason: true,
                ..case(get.clone(), V::HTTP_10, 500, Kind::Empty)
            },
        ]
    }

    #[tokio::test]
    async fn heads_match_hyper_on_table() {
        for case in table() {
            check(case).await;
        }
    }

    #[tokio::test]
    async fn unsupported_version_is_refused_like_hyper_panics() {
        let case = Case {
            res_version: V::HTTP_3,
            ..case(M::GET, V::HTTP_11, 404, Kind::Full)
        };
        let (parts, _) = case.response().into_parts();
        let mut dst = Vec::new();
        let result = encode_head(
            &parts,
            &SizeHint::with_exact(1),
            false,
            &case.answering(),
            &mut dst,
        );
        assert_eq!(result, Err(EncodeError::UnsupportedVersion(V::HTTP_3)));
        assert!(dst.is_empty());
        check(case).await;
    }

    fn arb_case() -> impl Strategy<Value = Case> {
        let methods = prop::sample::select(vec![M::GET, M::HEAD, M::POST, M::CONNECT]);
        let versions = prop::sample::select(vec![V::HTTP_10, V::HTTP_11]);
        let req_conn = prop::sample::select(vec![
            None,
            Some("close"),
            Some("keep-alive"),
            Some("Keep-Alive, x"),
        ]);
        let statuses = prop::sample::select(vec![200u16, 201, 204, 304, 404, 500, 101, 100]);
        let res_versions = prop::sample::select(vec![V::HTTP_11, V::HTTP_10, V::HTTP_2]);
        let kinds = prop::sample::select(vec![
            Kind::Empty,
            Kind::Full,
            Kind::Stream,
            Kind::StreamExact,
            Kind::ExactZero,
        ]);
        // Names and values; `content-length` is true to the body.
        let headers = prop::collection::vec(0..10usize, 0..6);
        (
            (methods, versions, req_conn, any::<bool>()),
            (
                statuses,
                res_versions,
                any::<bool>(),
                headers,
                kinds,
                any::<bool>(),
            ),
        )
            .prop_map(
                |(
                    (method, version, conn, te),
                    (status, res_version, reason, headers, body, trailers),
                )| {
                    let mut case = Case {
                        req_connection: conn,
                        te_trailers: te,
                        res_version,
                        reason,
                        trailers,
                        ..case(method, version, status, body)
                    };
                    for pick in headers {
                        case = match pick {
                            0 | 1 => case.length(),
                            2 => case.header("transfer-encoding", "chunked"),
                            3 => case.header("transfer-encoding", "gzip"),
                            4 => case.header("connection", "close"),
                            5 => case.header("connection", "keep-alive"),
                            6 => case.header("connection", "upgrade"),
                            7 => case.header("date", USER_DATE),
                            8 => case.header("trailer", "x-t, content-type"),
                            _ => case.header("x-a", "1"),
                        };
                    }
                    case
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 256,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn heads_match_hyper_on_random_cases(case in arb_case()) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(check(case));
        }
    }

    #[test]
    fn size_lines_are_hypers_upper_case_hex() {
        for len in [0, 1, 15, 16, 255, 4096, 0xABCDEF, usize::MAX] {
            let line = SizeLine::new(len);
            assert_eq!(line.as_bytes(), format!("{len:X}\r\n").as_bytes(), "{len}");
        }
        assert_eq!(SizeLine::new(255).as_bytes(), b"FF\r\n");
        assert_eq!(
            SizeLine::new(usize::MAX).as_bytes(),
            b"FFFFFFFFFFFFFFFF\r\n"
        );
    }

    #[test]
    fn last_chunk_writes_only_declared_valid_trailers_when_asked() {
        let mut head = HeaderMap::new();
        head.append(
            header::TRAILER,
            HeaderValue::from_static(" X-T ,content-type"),
        );
        head.append(header::TRAILER, HeaderValue::from_static("x-w"));
        let mut trailers = HeaderMap::new();
        trailers.append("x-t", HeaderValue::from_static("1"));
        trailers.append("content-type", HeaderValue::from_static("a/b"));
        trailers.append("x-u", HeaderValue::from_static("2"));
        trailers.append("x-w", HeaderValue::from_static("3"));
        trailers.append("x-t", HeaderValue::from_static("4"));
        let last = |trailers: Option<&HeaderMap>, te| {
            let mut dst = Vec::new();
            encode_last_chunk(trailers, &head, te, &mut dst);
            String::from_utf8(dst).expect("ascii")
        };
        assert_eq!(last(None, true), "0\r\n\r\n");
        assert_eq!(last(Some(&trailers), false), "0\r\n\r\n");
        assert_eq!(
            last(Some(&trailers), true),
            "0\r\nx-t: 1\r\nx-t: 4\r\nx-w: 3\r\n\r\n"
        );
        assert_eq!(last(Some(&HeaderMap::new()), true), "0\r\n\r\n");
    }

    #[test]
    fn dates_are_imf_fixdates() {
        let date = |secs| String::from_utf8(render_date(secs).to_vec()).expect("ascii");
        assert_eq!(date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
        assert_eq!(date(4_102_444_799), "Thu, 31 Dec 2099 23:59:59 GMT");
    }

    #[tokio::test]
    async fn date_matches_hypers() {
        let now = || {
            let mut dst = Vec::new();
            extend_date(&mut dst);
            String::from_utf8(dst).expect("ascii")
        };
        let case = case(M::GET, V::HTTP_11, 200, Kind::Full).conn("close");
        for _ in 0..3 {
            let before = now();
            let written = String::from_utf8(hyper_writes(&case).await).expect("ascii");
            let after = now();
            if before == after {
                assert!(
                    written.contains(&format!("\r\ndate: {before}\r\n")),
                    "{written}"
                );
                return;
            }
        }
        panic!("the second changed three times in a row");
    }
}
