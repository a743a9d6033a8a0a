//! What ties a request to the world outside tokenclock: the caller's
//! request id, the W3C trace context it arrived with, and the id the model
//! server gave its response. tokenclock reads them; it never adds or
//! changes a header.

use std::fmt;

use http::{HeaderMap, HeaderName};

/// Longest request or response id kept, in bytes; the rest is cut. Ids are
/// chosen by clients and servers, and records and log lines must stay small.
pub const MAX_ID_BYTES: usize = 128;

/// The ids of one request; each absent when not sent or not well formed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestIds {
    /// The first present of the configured request-id headers
    /// (`request_id_headers`, default `x-request-id`): visible ASCII, at
    /// most [`MAX_ID_BYTES`].
    pub request_id: Option<String>,
    /// The incoming W3C `traceparent`, when valid.
    pub trace: Option<TraceParent>,
    /// The id the server gave its response (`chatcmpl-…`, `msg_…`,
    /// `resp_…`): the first one seen, at most [`MAX_ID_BYTES`].
    pub response_id: Option<String>,
}

impl RequestIds {
    /// The ids a request's headers carry: the first present of `names`,
    /// and the `traceparent`.
    pub fn from_headers(headers: &HeaderMap, names: &[HeaderName]) -> Self {
        Self {
            request_id: names
                .iter()
                .find_map(|name| headers.get(name).and_then(|v| id_text(v.as_bytes()))),
            trace: only_one(headers, "traceparent")
                .and_then(|v| v.to_str().ok())
                .and_then(TraceParent::parse),
            response_id: None,
        }
    }

    /// Keeps the first response id seen (its bytes, as sent); later ones
    /// are ignored.
    pub fn response_id_seen(&mut self, id: impl AsRef<[u8]>) {
        if self.response_id.is_none() {
            self.response_id = id_text(id.as_ref());
        }
    }
}

/// The value of a header sent once. Two `traceparent`s name no one parent:
/// W3C Trace Context's test suite (`test_traceparent_duplicated`) has the
/// callee start a trace of its own, as it does for a malformed one.
fn only_one<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h http::HeaderValue> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    values.next().is_none().then_some(value)
}

/// An id as kept: trimmed, visible ASCII only (else dropped: it is then
/// not an id a user could type back), cut to [`MAX_ID_BYTES`].
fn id_text(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw).ok()?.trim().as_bytes();
    // Cut as bytes: the cut may fall inside a multi-byte character, which
    // then fails the ASCII check instead of panicking a `str` slice.
    let kept = &text[..text.len().min(MAX_ID_BYTES)];
    let visible = !kept.is_empty() && kept.iter().all(u8::is_ascii_graphic);
    visible.then(|| String::from_utf8_lossy(kept).into_owned())
}

/// A W3C Trace Context `traceparent` (version `00` layout): the caller's
/// trace, and its span that made this request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TraceParent {
    /// The trace id (16 bytes, never all zero).
    pub trace_id: [u8; 16],
    /// The caller's span id: the parent of what tokenclock reports
    /// (8 bytes, never all zero).
    pub parent_span_id: [u8; 8],
    /// The trace flags (bit 0: the caller sampled this trace).
    pub flags: u8,
}

impl TraceParent {
    /// Parses a `traceparent` value per W3C Trace Context: lowercase hex,
    /// version `ff` invalid, zero ids invalid; a later version may carry
    /// more fields after the four it shares with `00`.
    pub fn parse(value: &str) -> Option<Self> {
        let value = value.trim().as_bytes();
        if value.len() < 55 {
            return None;
        }
        let version = hex_bytes::<1>(&value[0..2])?[0];
        let exact = value.len() == 55;
        let layout_ok = value[2] == b'-' && value[35] == b'-' && value[52] == b'-';
        let extended = !exact && version != 0 && value[55] == b'-';
        if version == 0xff || !layout_ok || !(exact || extended) {
            return None;
        }
        let trace_id = hex_bytes::<16>(&value[3..35])?;
        let parent_span_id = hex_bytes::<8>(&value[36..52])?;
        let flags = hex_bytes::<1>(&value[53..55])?[0];
        let nonzero = trace_id != [0; 16] && parent_span_id != [0; 8];
        nonzero.then_some(Self {
            trace_id,
            parent_span_id,
            flags,
        })
    }

    /// Whether the caller sampled this trace (flag bit 0).
    pub fn sampled(&self) -> bool {
        self.flags & 1 == 1
    }

    /// The trace id as 32 lowercase hex digits.
    pub fn trace_id_hex(&self) -> String {
        Hex(&self.trace_id).to_string()
    }

    /// The parent span id as 16 lowercase hex digits.
    pub fn parent_span_id_hex(&self) -> String {
        Hex(&self.parent_span_id).to_string()
    }
}

/// Lowercase hex of some bytes.
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// `N` bytes from `2N` lowercase hex digits (uppercase is invalid in a
/// `traceparent`).
fn hex_bytes<const N: usize>(digits: &[u8]) -> Option<[u8; N]> {
    let nibble = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    const VALID: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specs_example_parses() {
        let tp = TraceParent::parse(VALID);
        let tp = tp.as_ref();
        assert_eq!(
            tp.map(TraceParent::trace_id_hex).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(
            tp.map(TraceParent::parent_span_id_hex).as_deref(),
            Some("00f067aa0ba902b7")
        );
        assert_eq!(tp.map(TraceParent::sampled), Some(true));
    }

    #[test]
    fn malformed_traceparents_are_refused() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_later_version_may_carry_more_fields() {
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-future";
        let tp = TraceParent::parse(later);
        assert_eq!(tp.map(|t| t.sampled()), Some(false));
    }

    #[test]
    fn the_first_configured_request_id_header_present_wins() {
        let names = [
            HeaderName::from_static("x-request-id"),
            HeaderName::from_static("x-correlation-id"),
        ];
        let mut headers = HeaderMap::new();
        headers.insert("x-correlation-id", HeaderValue::from_static("corr-7"));
        let ids = RequestIds::from_headers(&headers, &names);
        assert_eq!(ids.request_id.as_deref(), Some("corr-7"));
        headers.insert("x-request-id", HeaderValue::from_static(" req-1 "));
        headers.insert("traceparent", HeaderValue::from_static(VALID));
        let ids = RequestIds::from_headers(&headers, &names);
        assert_eq!(ids.request_id.as_deref(), Some("req-1"));
        assert!(ids.trace.is_some());
        // Two parents are none: the span starts a trace of its own.
        headers.append("traceparent", HeaderValue::from_static(VALID));
        let ids = RequestIds::from_headers(&headers, &names);
        assert_eq!(ids.trace, None, "a duplicated traceparent");
    }

    #[test]
    fn ids_are_visible_ascii_and_capped() {
        assert_eq!(id_text(b"a b"), None, "a space is not part of an id");
        assert_eq!(id_text("é".as_bytes()), None);
        assert_eq!(id_text(b"   "), None);
        // A cut inside a multi-byte character drops the id, never panics.
        let straddling = format!("{}é", "x".repeat(MAX_ID_BYTES - 1));
        assert_eq!(id_text(straddling.as_bytes()), None);
        let long = "x".repeat(MAX_ID_BYTES + 10);
        assert_eq!(
            id_text(long.as_bytes()).map(|s| s.len()),
            Some(MAX_ID_BYTES)
        );
        let mut ids = RequestIds::default();
        ids.response_id_seen("chatcmpl-1");
        ids.response_id_seen("chatcmpl-2");
        assert_eq!(ids.response_id.as_deref(), Some("chatcmpl-1"));
    }
}
