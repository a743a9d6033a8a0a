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

use crate::proxy::wire::{digits, has_token, is_chunked};

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
    // Room for the whole head at once, as hyper reserves it (30 bytes a
    // field), plus the status line, `date` and the framing field this adds:
    // grown from empty, a head of ten fields took four reallocations.
    dst.reserve(128 + 32 * head.headers.len());
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
            if !connection.iter().any(|v| has_token(v, "keep-alive")) {
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
        Version::HTTP_11 if !keep_alive && !connection.iter().any(|v| has_token(v, "close")) => {
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
                            digits(value.as_bytes()).ok_or(EncodeError::InvalidContentLength)?;
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
                if !self.is_last && has_token(value, "close") {
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

/// The IMF-fixdate of `secs` since the Unix epoch, written by `httpdate`
/// as hyper's date cache writes it (once a second, so its `String` is no
/// cost); past 9999, which it cannot write, the last second of 9999.
fn render_date(secs: u64) -> [u8; DATE_VALUE_LENGTH] {
    const LAST: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let at = UNIX_EPOCH + std::time::Duration::from_secs(secs.min(LAST));
    let text = httpdate::fmt_http_date(at);
    let mut out = *b"Thu, 01 Jan 1970 00:00:00 GMT";
    if let Some(bytes) = text.as_bytes().get(..DATE_VALUE_LENGTH) {
        out.copy_from_slice(bytes);
    }
    out
}

#[cfg(test)]
mod tests;
