//! HTTP/1.1 as bytes, both sides of the proxy, with no I/O: what the
//! connections read and write is parsed and encoded here, and the
//! connections (`server::h1` on the client's side, `forward::pool` on the
//! upstream's) only move the bytes.
//!
//! - [`server`]: a client's request heads, as hyper 1.12's server reads
//!   them, and the response heads written back.
//! - [`client`]: the request head sent upstream and the upstream's
//!   response head, as hyper's client does both.
//! - [`chunked`]: a message body on the wire (length, chunked or until
//!   close), both ways.
//!
//! Every rule is hyper's, held to it by differential tests that run hyper
//! beside these on the same bytes. The module is public for the fuzz
//! targets of `tests/fuzz/`, which drive the parsers as a connection does.

use http::{HeaderMap, HeaderName, HeaderValue};

pub mod chunked;
pub(crate) mod client;
pub mod server;

/// The header names a list-valued header (`Connection`, `Trailer`) holds,
/// over all its lines; what is not a valid name is left out.
pub(crate) fn listed(headers: &HeaderMap, list: &HeaderName) -> Vec<HeaderName> {
    headers
        .get_all(list)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}

/// hyper's `is_chunked_`: the value's last comma-separated coding is
/// `chunked`, any case.
pub(crate) fn is_chunked(value: &HeaderValue) -> bool {
    let last = value.to_str().ok().and_then(|s| s.rsplit(',').next());
    last.is_some_and(|coding| coding.trim().eq_ignore_ascii_case("chunked"))
}

/// Whether the `Transfer-Encoding` lines, if any, name one coding, and
/// it is `chunked` (any case, spaces and empty list elements aside): the
/// only transfer coding either side may be sent without having asked for
/// it (RFC 9112 §6.1), and the only one tokenclock decodes.
pub(crate) fn only_chunked(lines: http::header::GetAll<'_, HeaderValue>) -> bool {
    let mut codings = lines.iter().flat_map(|line| {
        let text = line.to_str().unwrap_or("?");
        text.split(',').map(str::trim).filter(|c| !c.is_empty())
    });
    match codings.next() {
        None => true,
        Some(first) => first.eq_ignore_ascii_case("chunked") && codings.next().is_none(),
    }
}

/// hyper's `connection_has`: one of the value's comma-separated tokens is
/// `token`, trimmed, any case.
pub(crate) fn has_token(value: &HeaderValue, token: &str) -> bool {
    let Ok(s) = value.to_str() else { return false };
    s.split(',').any(|t| t.trim().eq_ignore_ascii_case(token))
}

/// hyper's `from_digits`: one or more ASCII digits, no sign, no spaces, no
/// list, no overflow.
pub(crate) fn digits(bytes: &[u8]) -> Option<u64> {
    if bytes.is_empty() {
        return None;
    }
    bytes.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}
