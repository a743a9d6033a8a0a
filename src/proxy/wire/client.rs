//! The client's side of HTTP/1.1, toward the upstream: the request head
//! and its chunked body written, the response head read (its body is
//! [`super::chunked`]'s). It does no I/O (`forward::pool` does), and keeps
//! hyper's client rules: the same limits, the same framing decisions
//! (RFC 9112 §6), the same headers added to a request.

use bytes::{Buf, BytesMut};
use http::{
    header::{self, HeaderMap, HeaderName, HeaderValue},
    request, Method, Response, StatusCode, Version,
};

use super::chunked::{header_map, ChunkedError, Framing, SizeLine};

/// The most bytes a response head may take: hyper's default
/// (`max_buf_size`), 8 KiB and 100 header lines of 4 KiB.
pub(crate) const MAX_HEAD: usize = 8192 + 4096 * 100;
/// The header lines a response head (or trailer section) is parsed with
/// first: hyper's limit, on the stack.
const MAX_HEADERS: usize = 100;
/// The most header lines a response head may hold: a head of more than
/// [`MAX_HEADERS`] (an API gateway's, a CDN's) is parsed again with room
/// for this many, on the heap, where hyper's client fails it. nginx counts
/// none, only bytes ([`MAX_HEAD`] here).
const MAX_RESPONSE_HEADERS: usize = 1024;

/// Why the upstream's bytes could not be read as HTTP/1.1.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The response head is not HTTP/1.x.
    #[error("invalid response head: {0}")]
    Head(&'static str),
    /// The response head is larger than [`MAX_HEAD`].
    #[error("response head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    /// The response head has more than [`MAX_RESPONSE_HEADERS`] lines.
    #[error("response head of more than {MAX_RESPONSE_HEADERS} header lines")]
    TooManyHeaders,
    /// A chunk-size line, a chunk's end or the trailers are malformed.
    #[error(transparent)]
    Chunked(#[from] ChunkedError),
    /// The connection closed before the response ended.
    #[error("the upstream closed the connection before the response ended")]
    Incomplete,
    /// The request's body is longer or shorter than its `content-length`.
    #[error("the request body does not match its content-length")]
    RequestLength,
}

/// What the request's body looks like before it is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BodySize {
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
/// unknown size is chunked, whatever the method. (hyper's client sends a
/// `GET`, `HEAD` or `CONNECT` of unknown size without its body; but a
/// proxy's request has a body of unknown size only when its client sent
/// one, chunked or in HTTP/2 `DATA` frames, and dropping it lost the bytes
/// a `GET` with a body carried, Elasticsearch-style.)
pub(crate) fn encode_request(
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
            (_, BodySize::Unknown) => {
                headers.insert(
                    header::TRANSFER_ENCODING,
                    HeaderValue::from_static("chunked"),
                );
                headers.remove(header::CONTENT_LENGTH);
                Framing::Chunked
            }
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
pub(crate) struct Head {
    pub response: Response<()>,
    /// How its body is delimited.
    pub framing: Framing,
    /// The connection may carry another request once the body has ended.
    pub keep_alive: bool,
}

/// How response heads are read: whitespace between a field's name and its
/// colon is taken off the name, as RFC 9112 §5.1 has a proxy do ("MUST
/// remove any such whitespace from a response message before forwarding
/// the message downstream"), rather than failing the answer with a `502`
/// (hyper's and nginx's default). Requests with it are still refused:
/// there it is a smuggling vector. The framing read from such a header
/// is the proxy's own, and the client gets it re-framed, so no two
/// readers of this head can disagree on it.
static PARSER: std::sync::LazyLock<httparse::ParserConfig> = std::sync::LazyLock::new(|| {
    let mut config = httparse::ParserConfig::default();
    config.allow_spaces_after_header_name_in_responses(true);
    config
});

/// Parses a response head at the start of `buf` and removes it; `None`
/// until all of it has arrived. Informational heads (1xx but 101) are
/// removed and skipped, as hyper's client does.
pub(crate) fn parse_response(
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
        let mut more;
        let mut parsed = httparse::Response::new(&mut lines);
        let mut status = PARSER.parse_response(&mut parsed, buf);
        if let Err(httparse::Error::TooManyHeaders) = status {
            more = vec![httparse::EMPTY_HEADER; MAX_RESPONSE_HEADERS];
            parsed = httparse::Response::new(&mut more);
            status = PARSER.parse_response(&mut parsed, buf);
        }
        let len = match status {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                return Err(WireError::HeadTooLarge)
            }
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(httparse::Error::TooManyHeaders) if buf.len() >= MAX_HEAD => {
                return Err(WireError::HeadTooLarge)
            }
            Err(httparse::Error::TooManyHeaders) => return Err(WireError::TooManyHeaders),
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
        let headers = header_map(parsed.headers).map_err(WireError::Head)?;
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
            // A coding besides `chunked` (`gzip, chunked`): the header is
            // hop-by-hop, and the body, forwarded, went to the client
            // still coded and labelled plain (nginx answers `502` too).
            let codings = headers.get_all(header::TRANSFER_ENCODING);
            if !super::only_chunked(codings) || !is_chunked(&headers) {
                return Err(WireError::Head("a transfer coding besides chunked"));
            }
            Framing::Chunked
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

/// Whether the last transfer coding is `chunked`.
fn is_chunked(headers: &HeaderMap) -> bool {
    let last = headers
        .get_all(header::TRANSFER_ENCODING)
        .iter()
        .next_back();
    last.is_some_and(super::is_chunked)
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
        let values = headers.get_all(header::CONNECTION);
        values.iter().any(|v| super::has_token(v, token))
    };
    match version {
        Version::HTTP_10 => says("keep-alive"),
        _ => !says("close"),
    }
}

/// Writes one chunk of a chunked request body: size line, data, CRLF.
pub(crate) fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(SizeLine::new(data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk of a chunked request body, with the trailers the
/// request's `Trailer` header announced (hyper's rule), and its end.
pub(crate) fn encode_last_chunk(
    trailers: Option<&HeaderMap>,
    announced: &HeaderMap,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"0\r\n");
    if let Some(trailers) = trailers {
        let allowed = super::listed(announced, &header::TRAILER);
        write_fields(trailers.iter().filter(|(n, _)| allowed.contains(n)), out);
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests;
