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

/// The most bytes a request head may take before it is complete: hyper's
/// `max_buf_size` default (8 KiB + 100 lines of 4 KiB). hyper never reads
/// more than this into its buffer while a head is incomplete, so a head is
/// refused once the buffer holds this much and no complete head.
pub(crate) const MAX_HEAD: usize = 8192 + 4096 * 100;

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
pub(crate) enum BodyFraming {
    /// Exactly this many bytes follow the head; 0: no body.
    Length(u64),
    /// `Transfer-Encoding` whose last coding is `chunked`.
    Chunked,
}

/// A request head, taken off the front of the read buffer.
#[derive(Debug)]
pub(crate) struct RequestHead {
    /// Method, target, version (`HTTP_10` or `HTTP_11`) and headers exactly
    /// as hyper hands them to a service: same order, duplicates kept,
    /// Content-Length dropped where a Transfer-Encoding overrides it, repeated
    /// equal Content-Length lines dropped; no extensions.
    pub(crate) parts: http::request::Parts,
    /// How the body that follows the head is delimited.
    pub(crate) framing: BodyFraming,
    /// hyper's keep-alive decision for the request: HTTP/1.1 unless a
    /// `Connection: close`, HTTP/1.0 only with `Connection: keep-alive`, and
    /// never with both Transfer-Encoding and Content-Length.
    pub(crate) keep_alive: bool,
    /// hyper would answer `100 Continue` when the body is first read: an
    /// HTTP/1.1 request whose last `Expect` is `100-continue` (any case) and
    /// that has a body (`Conn::poll_read_head` ignores it otherwise).
    pub(crate) expect_continue: bool,
}

/// Why a request head was refused; [`HeadError::status`] is what hyper
/// answers with. Every refusal ends the connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
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
    pub(crate) fn status(&self) -> Option<StatusCode> {
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
/// Unlike hyper, which after a partial read parses again only once the new
/// bytes hold an empty line (`is_complete_fast`), this parses every time: a
/// head broken before its end is refused as soon as it is seen, where hyper
/// might wait for the end (and close without an answer on EOF).
pub(crate) fn parse(buf: &mut BytesMut) -> Result<Option<RequestHead>, HeadError> {
    match parse_head(buf) {
        // `Conn::on_read_head_error` drops leading CR/LF bytes, then
        // `on_parse_error` closes silently on the HTTP/2 preface.
        Err(_) if after_empty_lines(buf).starts_with(H2_PREFACE) => Err(HeadError::Http2Preface),
        result => result,
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

/// hyper's `is_chunked_`: the value's last comma-separated coding is
/// `chunked`, any case; a value with bytes outside visible ASCII is not.
fn is_chunked(value: &HeaderValue) -> bool {
    let last = value.to_str().ok().and_then(|s| s.rsplit(',').next());
    last.is_some_and(|coding| coding.trim().eq_ignore_ascii_case("chunked"))
}

/// hyper's `connection_has`: one of the value's comma-separated tokens is
/// `token`, any case.
fn has_token(value: &HeaderValue, token: &str) -> bool {
    let Ok(s) = value.to_str() else { return false };
    s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// hyper's `from_digits`: one or more ASCII digits, no sign, no spaces, no
/// list, no overflow.
fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::convert::Infallible;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty};
    use hyper::body::Incoming;
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;
    use proptest::prelude::*;
    use proptest::sample::select;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn parsed(bytes: &[u8]) -> Result<Option<RequestHead>, HeadError> {
        parse(&mut BytesMut::from(bytes))
    }

    fn head(bytes: &[u8]) -> RequestHead {
        match parsed(bytes) {
            Ok(Some(head)) => head,
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
        }
    }

    fn status(bytes: &[u8]) -> Option<u16> {
        match parsed(bytes) {
            Err(e) => e.status().map(|s| s.as_u16()),
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
        }
    }

    fn header_list(head: &RequestHead) -> Vec<(String, Vec<u8>)> {
        let headers = head.parts.headers.iter();
        headers
            .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    fn post(version: &str, lines: &str) -> Vec<u8> {
        format!("POST /p HTTP/{version}\r\nHost: h\r\n{lines}\r\n").into_bytes()
    }

    #[test]
    fn content_length_frames_the_body() {
        let h = head(&post("1.1", "Content-Length: 5\r\n"));
        assert_eq!(h.framing, BodyFraming::Length(5));
        assert!(h.keep_alive);
        assert_eq!(head(&post("1.1", "")).framing, BodyFraming::Length(0));
        assert_eq!(
            head(&post("1.1", "content-length: 007\r\n")).framing,
            BodyFraming::Length(7)
        );
        let max = format!("Content-Length: {MAX_CONTENT_LENGTH}\r\n");
        assert_eq!(
            head(&post("1.1", &max)).framing,
            BodyFraming::Length(u64::MAX - 2)
        );
    }

    #[test]
    fn equal_content_lengths_keep_the_first_line() {
        let h = head(&post(
            "1.1",
            "Content-Length: 5\r\nX: 1\r\nContent-Length: 5\r\n",
        ));
        assert_eq!(h.framing, BodyFraming::Length(5));
        let names: Vec<_> = header_list(&h).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["host", "content-length", "x"]);
    }

    #[test]
    fn different_content_lengths_are_refused() {
        assert_eq!(
            status(&post("1.1", "Content-Length: 5\r\nContent-Length: 6\r\n")),
            Some(400)
        );
        assert!(matches!(
            parsed(&post("1.1", "Content-Length: 5\r\nContent-Length: 05x\r\n")),
            Err(HeadError::ContentLength)
        ));
    }

    #[test]
    fn invalid_content_lengths_are_refused() {
        for value in [
            "+5",
            "5 5",
            "",
            "5,5",
            "-1",
            "0x5",
            "18446744073709551616",
            "٥",
        ] {
            let lines = format!("Content-Length: {value}\r\n");
            assert!(
                matches!(parsed(&post("1.1", &lines)), Err(HeadError::ContentLength)),
                "{value:?}"
            );
            assert_eq!(status(&post("1.1", &lines)), Some(400));
        }
        for value in ["18446744073709551614", "18446744073709551615"] {
            let lines = format!("Content-Length: {value}\r\n");
            assert!(matches!(
                parsed(&post("1.1", &lines)),
                Err(HeadError::ContentLengthTooLarge)
            ));
            assert_eq!(status(&post("1.1", &lines)), Some(431));
        }
    }

    #[test]
    fn chunked_transfer_encoding() {
        for value in ["chunked", "CHUNKED", "gzip, chunked", "gzip ,  Chunked"] {
            let h = head(&post("1.1", &format!("Transfer-Encoding: {value}\r\n")));
            assert_eq!(h.framing, BodyFraming::Chunked, "{value}");
            assert!(h.keep_alive);
        }
        let h = head(&post(
            "1.1",
            "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
        ));
        assert_eq!(h.framing, BodyFraming::Chunked);
    }

    #[test]
    fn transfer_encoding_not_ending_in_chunked_is_refused() {
        for lines in [
            "Transfer-Encoding: gzip\r\n",
            "Transfer-Encoding: chunked, gzip\r\n",
            "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
            "Transfer-Encoding: \r\n",
            "Transfer-Encoding: chunked\u{e9}\r\n",
        ] {
            assert!(matches!(
                parsed(&post("1.1", lines)),
                Err(HeadError::TransferEncoding)
            ));
            assert_eq!(status(&post("1.1", lines)), Some(400), "{lines:?}");
        }
    }

    #[test]
    fn transfer_encoding_on_http10_is_refused() {
        let bytes = post("1.0", "Transfer-Encoding: chunked\r\n");
        assert!(matches!(
            parsed(&bytes),
            Err(HeadError::TransferEncodingHttp10)
        ));
        assert_eq!(status(&bytes), Some(400));
    }

    #[test]
    fn transfer_encoding_overrides_content_length_and_closes() {
        for lines in [
            "Content-Length: 5\r\nX: 1\r\nTransfer-Encoding: chunked\r\n",
            "Transfer-Encoding: chunked\r\nX: 1\r\nContent-Length: 5\r\n",
            "Transfer-Encoding: chunked\r\nX: 1\r\nContent-Length: nonsense\r\n",
        ] {
            let h = head(&post("1.1", lines));
            assert_eq!(h.framing, BodyFraming::Chunked);
            assert!(!h.keep_alive, "{lines:?}");
            let names: Vec<_> = header_list(&h).into_iter().map(|(n, _)| n).collect();
            assert!(!names.iter().any(|n| n == "content-length"), "{names:?}");
        }
    }

    #[test]
    fn connection_decides_keep_alive() {
        let cases: [(&str, &str, bool); 12] = [
            ("1.1", "", true),
            ("1.1", "Connection: close\r\n", false),
            ("1.1", "Connection: Upgrade, CLOSE\r\n", false),
            (
                "1.1",
                "Connection: close\r\nConnection: keep-alive\r\n",
                false,
            ),
            (
                "1.1",
                "Connection: keep-alive\r\nConnection: close\r\n",
                false,
            ),
            ("1.1", "Connection: closed\r\n", true),
            ("1.0", "", false),
            ("1.0", "Connection: keep-alive\r\n", true),
            ("1.0", "Connection: Keep-Alive, foo\r\n", true),
            (
                "1.0",
                "Connection: keep-alive\r\nConnection: close\r\n",
                false,
            ),
            (
                "1.0",
                "Connection: close\r\nConnection: keep-alive\r\n",
                false,
            ),
            ("1.0", "Connection: keep-alive\u{e9}\r\n", false),
        ];
        for (version, lines, keep_alive) in cases {
            assert_eq!(
                head(&post(version, lines)).keep_alive,
                keep_alive,
                "{version} {lines:?}"
            );
        }
    }

    #[test]
    fn expect_continue_needs_http11_and_a_body() {
        let cases: [(&str, &str, bool); 7] = [
            ("1.1", "Expect: 100-continue\r\nContent-Length: 1\r\n", true),
            (
                "1.1",
                "Expect: 100-Continue\r\nTransfer-Encoding: chunked\r\n",
                true,
            ),
            ("1.1", "Expect: 100-continue\r\n", false),
            (
                "1.1",
                "Expect: 100-continue\r\nContent-Length: 0\r\n",
                false,
            ),
            (
                "1.0",
                "Expect: 100-continue\r\nContent-Length: 1\r\n",
                false,
            ),
            (
                "1.1",
                "Expect: 100-continue\r\nExpect: x\r\nContent-Length: 1\r\n",
                false,
            ),
            (
                "1.1",
                "Expect: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n",
                true,
            ),
        ];
        for (version, lines, expect) in cases {
            assert_eq!(
                head(&post(version, lines)).expect_continue,
                expect,
                "{version} {lines:?}"
            );
        }
    }

    #[test]
    fn every_split_point_is_partial_then_the_same() {
        let whole: &[u8] =
            b"\r\nPOST /a?b HTTP/1.1\r\nHost: h\nContent-Length: 3\r\nX-Y:\tz \r\n\r\n";
        let full = head(whole);
        for cut in 0..whole.len() {
            let mut buf = BytesMut::from(&whole[..cut]);
            assert!(matches!(parse(&mut buf), Ok(None)), "cut at {cut}");
            assert_eq!(buf.len(), cut);
            buf.extend_from_slice(&whole[cut..]);
            buf.extend_from_slice(b"abc");
            let h = parse(&mut buf).expect("valid").expect("complete");
            assert_eq!(&buf[..], b"abc");
            assert_eq!(
                (&h.parts.method, &h.parts.uri, h.parts.version, h.framing),
                (
                    &full.parts.method,
                    &full.parts.uri,
                    full.parts.version,
                    full.framing
                )
            );
            assert_eq!(header_list(&h), header_list(&full));
        }
        assert_eq!(header_list(&full)[2], ("x-y".to_owned(), b"z".to_vec()));
    }

    #[test]
    fn pipelined_bytes_stay_in_the_buffer() {
        let mut buf = BytesMut::from(&b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nGET /3"[..]);
        assert_eq!(parse(&mut buf).expect("ok").expect("head").parts.uri, "/1");
        assert_eq!(&buf[..], b"GET /2 HTTP/1.1\r\n\r\nGET /3");
        assert_eq!(parse(&mut buf).expect("ok").expect("head").parts.uri, "/2");
        assert!(parse(&mut buf).expect("ok").is_none());
        assert_eq!(&buf[..], b"GET /3");
    }

    #[test]
    fn leading_empty_lines_are_skipped_with_the_head() {
        let mut buf = BytesMut::from(&b"\r\n\n\r\nGET / HTTP/1.1\r\n\r\nrest"[..]);
        assert!(parse(&mut buf).expect("ok").is_some());
        assert_eq!(&buf[..], b"rest");
        assert!(parsed(b"\r\n\r\n\n").expect("ok").is_none());
        // A CR not followed by LF is a broken line ending.
        assert_eq!(status(b"\rGET / HTTP/1.1\r\n\r\n"), Some(400));
    }

    #[test]
    fn at_most_100_header_lines() {
        let lines = |n: usize| (0..n).map(|i| format!("X-{i}: v\r\n")).collect::<String>();
        assert_eq!(head(&post("1.1", &lines(99))).parts.headers.len(), 100);
        assert!(matches!(
            parsed(&post("1.1", &lines(100))),
            Err(HeadError::TooManyHeaders)
        ));
        assert_eq!(status(&post("1.1", &lines(100))), Some(431));
    }

    #[test]
    fn bad_request_lines_are_400() {
        let cases: [&[u8]; 9] = [
            b"G(T / HTTP/1.1\r\n\r\n",
            b" / HTTP/1.1\r\n\r\n",
            b"GET /a\x7f HTTP/1.1\r\n\r\n",
            b"GET  / HTTP/1.1\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET / HTTP/1.2\r\n\r\n",
            b"GET / http/1.1\r\n\r\n",
            b"GET http://[::1 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: v\r\n\r\n",
        ];
        for bytes in cases {
            assert_eq!(
                status(bytes),
                Some(400),
                "{:?}",
                String::from_utf8_lossy(bytes)
            );
        }
        assert!(matches!(
            parsed(b"G(T / HTTP/1.1\r\n\r\n"),
            Err(HeadError::Method)
        ));
        assert!(matches!(
            parsed(b"GET /\x01 HTTP/1.1\r\n\r\n"),
            Err(HeadError::Uri)
        ));
        assert!(matches!(
            parsed(b"GET / HTTP/3.0\r\n"),
            Err(HeadError::Version)
        ));
    }

    #[test]
    fn long_targets_are_414() {
        let target = |len: usize| format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(len - 1));
        assert_eq!(
            head(target(MAX_URI_LEN).as_bytes()).parts.uri.path().len(),
            MAX_URI_LEN
        );
        assert!(matches!(
            parsed(target(MAX_URI_LEN + 1).as_bytes()),
            Err(HeadError::UriTooLong)
        ));
        assert_eq!(status(target(MAX_URI_LEN + 1).as_bytes()), Some(414));
    }

    /// A head of `len` bytes but for its final empty line, in lines of
    /// up to 5000 bytes (fewer than 100).
    fn big_head(len: usize) -> Vec<u8> {
        let mut lines = String::new();
        while lines.len() + 40 < len {
            let n = (len - lines.len() - 40).min(5000);
            lines.push_str(&format!("X: {}\r\n", "v".repeat(n)));
        }
        let mut head = post("1.1", &lines);
        head.truncate(head.len() - 2);
        head
    }

    /// A head cut at the limit, and that head ending 4 bytes past it.
    fn over_max_head() -> (Vec<u8>, Vec<u8>) {
        let mut at = big_head(MAX_HEAD - 200);
        at.extend_from_slice(b"Y: ");
        at.resize(MAX_HEAD, b'y');
        let mut past = at.clone();
        past.extend_from_slice(b"\r\n\r\n");
        (at, past)
    }

    #[test]
    fn heads_over_max_head_are_431() {
        let near = big_head(MAX_HEAD - 200);
        assert!(near.len() < MAX_HEAD);
        assert!(parsed(&near).expect("ok").is_none());
        let mut whole = near;
        whole.extend_from_slice(b"\r\n");
        assert!(parsed(&whole).expect("ok").is_some());
        let (at, past) = over_max_head();
        assert!(matches!(parsed(&at), Err(HeadError::TooLarge)));
        assert_eq!(status(&at), Some(431));
        // Had one read brought the end too, hyper would take it.
        assert!(parsed(&past).expect("ok").is_some());
    }

    #[test]
    fn names_of_64_kib_are_431() {
        let name = |len: usize| post("1.1", &format!("{}: v\r\n", "n".repeat(len)));
        assert!(parsed(&name(MAX_NAME_LEN - 1)).expect("ok").is_some());
        assert!(matches!(
            parsed(&name(MAX_NAME_LEN)),
            Err(HeadError::NameTooLong)
        ));
    }

    #[test]
    fn http2_preface_is_closed_without_an_answer() {
        let mut bytes = b"\r\n".to_vec();
        bytes.extend_from_slice(H2_PREFACE);
        assert!(matches!(parsed(&bytes), Err(HeadError::Http2Preface)));
        assert_eq!(status(&bytes), None);
        // Too short to tell: hyper answers 400.
        assert_eq!(status(&H2_PREFACE[..20]), Some(400));
    }

    #[test]
    fn values_share_the_head() {
        let mut buf = BytesMut::from(&b"GET /x HTTP/1.1\r\nA: 1\r\n\r\n"[..]);
        let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
        let h = parse(&mut buf).expect("ok").expect("head");
        let value = h.parts.headers.get("a").expect("a").as_bytes().as_ptr() as usize;
        assert!(range.contains(&value));
    }

    // ---- The same decisions as hyper's server, on the same bytes. ----

    /// What a service is handed, or what our parser says it would be.
    #[derive(Debug, PartialEq)]
    struct Seen {
        method: String,
        uri: String,
        version: Version,
        headers: Vec<(String, Vec<u8>)>,
        body: Result<Vec<u8>, ()>,
    }

    /// The second request appended after a complete first one: hyper serves
    /// it exactly when the first kept the connection alive.
    const NEXT: &[u8] = b"GET /next HTTP/1.1\r\nhost: n\r\n\r\n";
    const CHUNKED_BODY: &[u8] = b"5\r\nhello\r\n0\r\n\r\n";

    /// Runs hyper's HTTP/1 server on `input` (then EOF): the requests its
    /// service saw, and the bytes it wrote back.
    fn hyper_serves(input: &[u8]) -> (Vec<Seen>, Vec<u8>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let runtime = runtime.expect("runtime");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let service_seen = seen.clone();
        let service = service_fn(move |req: hyper::Request<Incoming>| {
            let seen = service_seen.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes().to_vec())
                    .map_err(|_| ());
                let headers = parts.headers.iter();
                let headers = headers.map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()));
                seen.lock().expect("lock").push(Seen {
                    method: parts.method.to_string(),
                    uri: parts.uri.to_string(),
                    version: parts.version,
                    headers: headers.collect(),
                    body,
                });
                // Not 2xx: a CONNECT stays HTTP. An HTTP/1.0 answer must
                // say keep-alive for the request's own decision to stand.
                let mut res = hyper::Response::new(Empty::<Bytes>::new());
                *res.status_mut() = StatusCode::NOT_FOUND;
                if parts.version == Version::HTTP_10 {
                    let keep = HeaderValue::from_static("keep-alive");
                    res.headers_mut().insert(header::CONNECTION, keep);
                }
                Ok::<_, Infallible>(res)
            }
        });
        let out = runtime.block_on(async move {
            let (client, server) = tokio::io::duplex(1 << 21);
            let (mut read, mut write) = tokio::io::split(client);
            // All of it is in the pipe before hyper's first read.
            let _ = write.write_all(input).await;
            let _ = write.shutdown().await;
            // Half-close: hyper must answer after the client's EOF.
            let conn = http1::Builder::new()
                .half_close(true)
                .serve_connection(TokioIo::new(server), service);
            let server = tokio::spawn(conn);
            let mut out = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut out));
            read.await
                .expect("hyper ends the connection")
                .expect("read");
            let _ = tokio::time::timeout(Duration::from_secs(10), server)
                .await
                .expect("server ends");
            out
        });
        let seen = std::mem::take(&mut *seen.lock().expect("lock"));
        (seen, out)
    }

    /// The status of the last response head in `out` before any body, after
    /// a `100 Continue`, and whether one came.
    fn first_final(out: &[u8]) -> Option<(u16, bool, String)> {
        let text = String::from_utf8_lossy(out);
        let (continued, rest) = match text.strip_prefix("HTTP/1.1 100 Continue\r\n\r\n") {
            Some(rest) => (true, rest),
            None => (false, &text[..]),
        };
        let head = rest.split("\r\n\r\n").next()?;
        let code = head.get(9..12)?.parse().ok()?;
        Some((code, continued, head.to_ascii_lowercase()))
    }

    /// Asserts that hyper's server decides on `head` as [`parse`] does.
    fn same_as_hyper(input: &[u8]) {
        let what = String::from_utf8_lossy(input);
        let mut buf = BytesMut::from(input);
        match parse(&mut buf) {
            Err(e) => {
                let (seen, out) = hyper_serves(input);
                assert!(seen.is_empty(), "{what:?}: {e:?}, hyper served {seen:?}");
                let status = first_final(&out).map(|(code, _, _)| code);
                assert_eq!(status, e.status().map(|s| s.as_u16()), "{what:?}: {e:?}");
            }
            Ok(None) => {
                let (seen, out) = hyper_serves(input);
                assert!(
                    seen.is_empty() && out.is_empty(),
                    "{what:?}: {seen:?} {out:?}"
                );
            }
            Ok(Some(head)) => {
                assert!(buf.is_empty(), "{what:?}: a second head in the input");
                let (body, expected_body) = match head.framing {
                    BodyFraming::Length(n) if n <= 64 => {
                        let body = vec![b'a'; n as usize];
                        (body.clone(), Ok(body))
                    }
                    BodyFraming::Length(_) => (vec![b'a'; 64], Err(())),
                    BodyFraming::Chunked => (CHUNKED_BODY.to_vec(), Ok(b"hello".to_vec())),
                };
                let complete = expected_body.is_ok();
                let mut bytes = input.to_vec();
                bytes.extend_from_slice(&body);
                if complete {
                    bytes.extend_from_slice(NEXT);
                }
                let (seen, out) = hyper_serves(&bytes);
                let ours = Seen {
                    method: head.parts.method.to_string(),
                    uri: head.parts.uri.to_string(),
                    version: head.parts.version,
                    headers: header_list(&head),
                    body: expected_body,
                };
                assert_eq!(seen.first(), Some(&ours), "{what:?}");
                let served_next = seen.get(1).is_some_and(|s| s.uri == "/next");
                assert_eq!(
                    served_next,
                    complete && head.keep_alive,
                    "{what:?}: {head:?}"
                );
                assert_eq!(seen.len(), 1 + usize::from(served_next), "{what:?}");
                let (code, continued, response) = first_final(&out).expect("a response");
                assert_eq!(code, 404, "{what:?}");
                assert_eq!(continued, head.expect_continue, "{what:?}");
                if complete && head.parts.version == Version::HTTP_11 {
                    let close = response.contains("\r\nconnection: close");
                    assert_eq!(close, !head.keep_alive, "{what:?}: {response}");
                }
            }
        }
    }

    #[test]
    fn matches_hyper_on_tricky_heads() {
        let preface_after_bad_head = [
            &b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"[..],
            H2_PREFACE,
        ]
        .concat();
        let long_target = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_URI_LEN));
        let many = (0..101)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect::<String>();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        let (at_max, past_max) = over_max_head();
        let mut near_max = big_head(MAX_HEAD - 200);
        near_max.extend_from_slice(b"\r\n");
        let long_name = format!("GET / HTTP/1.1\r\n{}: v\r\n\r\n", "n".repeat(MAX_NAME_LEN));
        let cases: Vec<&[u8]> = vec![
            b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
            b"\r\n\r\nGET / HTTP/1.0\r\n\r\n",
            b"\n\nGET / HTTP/1.1\n\n",
            b"POST /u HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
            b"POST /u HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
            b"POST /u HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
            b"POST /u HTTP/1.1\r\nContent-Length: 5 5\r\n\r\n",
            b"POST /u HTTP/1.1\r\nContent-Length:\r\n\r\n",
            b"POST /u HTTP/1.1\r\nContent-Length: 18446744073709551614\r\n\r\n",
            b"POST /u HTTP/1.1\r\nContent-Length: 18446744073709551613\r\n\r\n",
            b"POST /u HTTP/1.1\r\nA: 1\r\nContent-Length: 3\r\nB: 2\r\nTransfer-Encoding: chunked\r\nC: 3\r\n\r\n",
            b"POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
            b"POST /u HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"POST /u HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
            b"POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n",
            b"POST /u HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: foo\r\n\r\n",
            b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
            b"GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
            b"GET / HTTP/1.1\r\nConnection: foo,  Close \r\n\r\n",
            b"POST / HTTP/1.1\r\nExpect: 100-CONTINUE\r\nContent-Length: 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
            b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
            b"CONNECT h:443 HTTP/1.0\r\nUpgrade: x\r\n\r\n",
            b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: a\xffb\r\nY: \t sp \t\r\n\r\n",
            b"GET / HTTP/1.1\r\n: v\r\n\r\n",
            b"GET / HTTP/1.1\r\nX : v\r\n\r\n",
            b"GET / HTTP/1.1\r\n X: v\r\n\r\n",
            b"GET / HTTP/1.1\r\nX: v\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\rX: v\r\n\r\n",
            b"G\x01T / HTTP/1.1\r\n\r\n",
            b"GET /\x01 HTTP/1.1\r\n\r\n",
            b"GET http://[::1 HTTP/1.1\r\n\r\n",
            b"GET / HTTP/2.0\r\n\r\n",
            b"GET / HTTP/1.1\r\nHost: a\r\n",
            b"\r\n\r\n",
            b"\r\n",
            H2_PREFACE,
            &preface_after_bad_head,
            long_target.as_bytes(),
            many.as_bytes(),
            &at_max,
            &past_max,
            &near_max,
            long_name.as_bytes(),
        ];
        for case in cases {
            same_as_hyper(case);
        }
    }

    /// Mostly one of `good`, now and then one of `bad`: a head with a bad
    /// piece is refused whatever its other pieces, so bad ones are rare.
    fn pick(good: Vec<&'static str>, bad: Vec<&'static str>) -> BoxedStrategy<&'static str> {
        prop_oneof![39 => select(good), 1 => select(bad)].boxed()
    }

    /// A header line's name and value, weighted toward the headers that
    /// decide framing, keep-alive, 100-continue and upgrades.
    fn header_line() -> impl Strategy<Value = (&'static str, &'static str)> {
        let named =
            |names: Vec<&'static str>, values: Vec<&'static str>| (select(names), select(values));
        prop_oneof![
            3 => named(
                vec!["Content-Length", "content-length", "CONTENT-LENGTH"],
                vec!["0", "3", "5", "5", "007", "70", "+5", "5 5", "", "5,5",
                     "18446744073709551614", "99999999999999999999"],
            ),
            3 => named(
                vec!["Transfer-Encoding", "transfer-encoding"],
                vec!["chunked", "chunked", "CHUNKED", "gzip, chunked", " chunked\t",
                     "chunked, gzip", "gzip", "", "chunked\u{e9}"],
            ),
            3 => named(
                vec!["Connection", "connection"],
                vec!["close", "keep-alive", "Keep-Alive", "upgrade, close", "foo",
                     "closed", "", "keep-alive\u{e9}"],
            ),
            2 => named(vec!["Expect", "expect"], vec!["100-continue", "100-Continue", "101-continue", ""]),
            2 => named(vec!["Upgrade", "upgrade"], vec!["websocket", "h2c", ""]),
            2 => named(vec!["Host", "host"], vec!["h", "h:80", "a b", ""]),
            2 => (
                pick(vec!["X-A", "x-a", "X_b", "x-A"], vec!["", "Bad Name", "X\u{1}", "X(", "\u{e9}"]),
                pick(vec!["v", "", "\u{e9}", "a\tb", "a b"], vec!["a\u{7f}b", "a\u{1}b"]),
            ),
        ]
    }

    /// Random request heads from a small grammar of good and bad pieces.
    fn request_head() -> impl Strategy<Value = Vec<u8>> {
        let method = pick(
            vec!["GET", "POST", "HEAD", "CONNECT", "PUT", "M-SEARCH", "get"],
            vec!["G\u{1}T", "GE(T", "", "\u{e9}"],
        );
        let target = pick(
            vec![
                "/",
                "/a?b=c",
                "*",
                "http://h:80/p",
                "h:443",
                "//",
                "/%zz",
                "/a\"b",
            ],
            vec!["/\u{7f}", "/a#f", "\u{e9}", "http://[::1", "/a\u{1}"],
        );
        let version = pick(
            vec!["HTTP/1.1", "HTTP/1.0"],
            vec!["HTTP/2.0", "HTTP/1.2", "http/1.1", "HTTP/1."],
        );
        let space = pick(vec![" "], vec!["  ", "\t"]);
        let eol = || pick(vec!["\r\n", "\n"], vec!["\r", "\r\r\n"]);
        let colon = pick(vec![": ", ":", ":\t ", ":   "], vec![" : ", " :"]);
        let lines = prop::collection::vec((header_line(), colon, eol()), 0..7);
        let lead = select(vec!["", "", "", "\r\n", "\n\r\n"]);
        (lead, method, space, target, version, eol(), lines, eol()).prop_map(
            |(lead, method, space, target, version, eol, lines, last)| {
                let mut head = format!("{lead}{method}{space}{target} {version}{eol}");
                for ((name, value), colon, eol) in lines {
                    head.push_str(&format!("{name}{colon}{value}{eol}"));
                }
                head.push_str(last);
                head.into_bytes()
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        #[test]
        fn matches_hyper_on_generated_heads(input in request_head()) {
            same_as_hyper(&input);
        }
    }
}
