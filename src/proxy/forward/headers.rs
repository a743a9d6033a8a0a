//! Header rules of a forwarding proxy: hop-by-hop headers (RFC 9110 §7.6.1)
//! stay on their hop, end-to-end headers pass unchanged.

use http::{header, HeaderMap, HeaderName, HeaderValue};

use crate::proxy::wire::listed;

/// Headers that describe one connection, never forwarded either way.
/// `TE` is handled apart: `trailers` survives it.
const HOP_BY_HOP: [HeaderName; 4] = [
    header::CONNECTION,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::TE,
];

/// Removes hop-by-hop headers: `Connection` and every header it names,
/// `Keep-Alive`, `Proxy-Connection`, `Transfer-Encoding`, `Upgrade`, `TE`
/// (keeping `TE: trailers`, so upstreams still send trailers), and `Expect`
/// on requests, which the proxy's own server side has already answered.
pub(super) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named = listed(headers, &header::CONNECTION);
    let wants_trailers = headers
        .get_all(header::TE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case("trailers"));
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
    if wants_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Joins the crumbs an HTTP/2 client may split `cookie` into, one field
/// each (RFC 9113 §8.2.3: Go's client does), into the one field an
/// HTTP/1.1 upstream must get, in order, separated by `"; "`: servers read
/// one `Cookie` line (Starlette's `request.cookies` takes the first).
pub(super) fn join_cookie_crumbs(headers: &mut HeaderMap) {
    let mut crumbs = headers.get_all(header::COOKIE).iter();
    let (Some(first), Some(_)) = (crumbs.next(), crumbs.next()) else {
        return;
    };
    let mut joined = first.as_bytes().to_vec();
    for crumb in headers.get_all(header::COOKIE).iter().skip(1) {
        joined.extend_from_slice(b"; ");
        joined.extend_from_slice(crumb.as_bytes());
    }
    // Valid field bytes joined by valid ones.
    if let Ok(joined) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, joined);
    }
}

/// Response rule on top of [`strip_hop_by_hop`]: a `Content-Length` beside
/// a `Transfer-Encoding` is removed first (RFC 9112 §6.3). hyper's client
/// frames such a body by the encoding but keeps both headers; forwarding
/// the length would cut the body short for the client.
pub(super) fn strip_response(headers: &mut HeaderMap) {
    if headers.contains_key(header::TRANSFER_ENCODING) {
        headers.remove(header::CONTENT_LENGTH);
    }
    strip_hop_by_hop(headers);
}

/// Request-only rule on top of [`strip_hop_by_hop`]: `Expect: 100-continue`
/// is answered by the proxy's own server side, so it is not forwarded.
pub(super) fn strip_request(headers: &mut HeaderMap) {
    strip_hop_by_hop(headers);
    headers.remove(header::EXPECT);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (k, v) in pairs {
            headers.append(*k, HeaderValue::from_static(v));
        }
        headers
    }

    #[test]
    fn removes_connection_and_the_headers_it_names() {
        let mut h = map(&[
            ("connection", "keep-alive, x-hop"),
            ("keep-alive", "timeout=5"),
            ("x-hop", "1"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("proxy-connection", "keep-alive"),
            ("content-type", "text/event-stream"),
            ("authorization", "Bearer x"),
        ]);
        strip_hop_by_hop(&mut h);
        let names: Vec<_> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, vec!["content-type", "authorization"]);
    }

    #[test]
    fn te_keeps_only_trailers() {
        let mut h = map(&[("te", "gzip, trailers")]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.get("te").map(|v| v.as_bytes()), Some(&b"trailers"[..]));
        let mut h = map(&[("te", "gzip")]);
        strip_hop_by_hop(&mut h);
        assert!(h.get("te").is_none());
    }

    #[test]
    fn a_length_beside_an_encoding_is_dropped() {
        let mut h = map(&[("content-length", "3"), ("transfer-encoding", "chunked")]);
        strip_response(&mut h);
        assert!(h.is_empty());
        let mut h = map(&[("content-length", "3")]);
        strip_response(&mut h);
        assert!(h.get("content-length").is_some());
    }

    #[test]
    fn expect_is_not_forwarded() {
        let mut h = map(&[("expect", "100-continue"), ("content-length", "10")]);
        strip_request(&mut h);
        assert!(h.get("expect").is_none());
        assert!(h.get("content-length").is_some());
    }
}
