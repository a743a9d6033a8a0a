//! WebSocket upgrades, tunnelled: vLLM's Realtime API (`/v1/realtime`) and
//! any other WebSocket endpoint of the upstream keep working behind the
//! sidecar.
//!
//! A client's HTTP/1.1 request to switch to WebSocket (RFC 6455 §4.1: `GET`,
//! `Connection: upgrade`, `Upgrade: websocket`, no body) is forwarded with
//! those two hop-by-hop headers put back; when the upstream answers `101`,
//! both connections carry each other's bytes unchanged until one side
//! ends. Nothing else is upgraded: an `Upgrade: h2c` (curl's `--http2` on
//! `http://`) is stripped as before, so the upstream answers in HTTP/1.1,
//! which tokenclock reads.
//!
//! The tunnel is the exchange's two bodies: the client's bytes after the
//! `101` are the body sent upstream, read until the client closes its side
//! (whose end is passed on as a half-close), and the upstream's bytes the
//! response's body, read until the upstream closes. The request's own body
//! is empty, as HTTP frames it: the client's connection offers the switched
//! bytes apart, in [`Asked`], as hyper offers an upgraded connection. So a session is one
//! request everywhere requests are counted (`code="101"`, its bytes each
//! way, its duration as E2E), holds its slot under `max_connections` while
//! it lasts, and ends at `idle_timeout` (when set) of silence from the upstream (a
//! WebSocket server's pings, every 20 s for uvicorn's, keep it open). Its
//! bytes are not read as events: WebSocket frames are not SSE.
//!
//! Only tokenclock's own HTTP/1.1 codec (the default) tunnels, and only to
//! an HTTP/1.1 upstream: hyper's server (`http1_server = "hyper"`), h2
//! clients and an h2 upstream get the request without `Upgrade`, as
//! before.

use std::sync::{Arc, Mutex};

use http::{header, request, HeaderMap, HeaderValue, Method, Version};

use crate::proxy::server::ReceivedBody;
use crate::proxy::wire::has_token;

/// Put in a request's extensions by a client connection that can tunnel,
/// when the request asks to switch to WebSocket: the `Upgrade` value it
/// sent, and the client's bytes once switched, for the upstream.
#[derive(Clone, Debug)]
pub(crate) struct Asked {
    upgrade: HeaderValue,
    /// Nothing until a `101` goes out, then the client's bytes until it
    /// closes its side; ended with nothing by any other answer. Taken once.
    bytes: Arc<Mutex<Option<ReceivedBody>>>,
}

impl Asked {
    /// The request asks to switch, with `upgrade` (from [`asks`]); `bytes`
    /// are the client's once switched.
    pub(crate) fn new(upgrade: HeaderValue, bytes: ReceivedBody) -> Self {
        Self {
            upgrade,
            bytes: Arc::new(Mutex::new(Some(bytes))),
        }
    }

    /// The client's bytes once switched; `None` once taken.
    pub(crate) fn take_bytes(&self) -> Option<ReceivedBody> {
        self.bytes.lock().ok()?.take()
    }

    /// Puts back, on a request whose hop-by-hop headers were stripped, the
    /// two that ask the upstream to switch.
    pub(crate) fn restore(&self, headers: &mut HeaderMap) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, self.upgrade.clone());
    }
}

/// Whether `head` asks to switch to WebSocket (RFC 6455 §4.1): HTTP/1.1,
/// `GET`, a `Connection` token `upgrade`, and one `Upgrade` value whose
/// protocols include `websocket` (any case); that value. The body's framing
/// is the caller's to check: a request with a body is not switched.
pub(crate) fn asks(head: &request::Parts) -> Option<HeaderValue> {
    if head.version != Version::HTTP_11 || head.method != Method::GET {
        return None;
    }
    let connection = head.headers.get_all(header::CONNECTION);
    if !connection.iter().any(|v| has_token(v, "upgrade")) {
        return None;
    }
    let mut upgrades = head.headers.get_all(header::UPGRADE).iter();
    let upgrade = upgrades.next()?;
    if upgrades.next().is_some() || !names_websocket(upgrade) {
        return None;
    }
    Some(upgrade.clone())
}

/// Whether an `Upgrade` value lists `websocket` among its protocols
/// (`protocol[/version]`, comma-separated).
fn names_websocket(value: &HeaderValue) -> bool {
    let Ok(value) = value.to_str() else {
        return false;
    };
    value.split(',').any(|protocol| {
        let name = protocol.trim().split('/').next().unwrap_or_default();
        name.eq_ignore_ascii_case("websocket")
    })
}

/// Puts back, on the upstream's `101` whose hop-by-hop headers were
/// stripped, `Connection: upgrade` and the `Upgrade` values it sent
/// (`upstream`, taken before the strip): the client's WebSocket library
/// checks both (RFC 6455 §4.1, the client's steps 2 and 3).
pub(crate) fn restore_switch(headers: &mut HeaderMap, upstream: Vec<HeaderValue>) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    for value in upstream {
        headers.append(header::UPGRADE, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(lines: &[(&'static str, &'static str)]) -> request::Parts {
        let mut builder = http::Request::get("/v1/realtime");
        for (name, value) in lines {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("request").into_parts().0
    }

    #[test]
    fn a_websocket_handshake_asks_and_its_value_goes_upstream() {
        for (connection, upgrade) in [
            ("Upgrade", "websocket"),
            ("keep-alive, Upgrade", "WebSocket"),
            ("upgrade", "foo/2, websocket/13"),
        ] {
            let asked = asks(&head(&[("connection", connection), ("upgrade", upgrade)]));
            let asked = asked.expect("a websocket handshake");
            let asked = Asked::new(
                asked,
                ReceivedBody::from(crate::proxy::server::h1::Body::empty()),
            );
            assert!(asked.take_bytes().is_some() && asked.take_bytes().is_none());
            let mut headers = HeaderMap::new();
            asked.restore(&mut headers);
            assert_eq!(headers[header::CONNECTION], "upgrade");
            assert_eq!(headers[header::UPGRADE], upgrade);
        }
    }

    #[test]
    fn anything_else_does_not_ask() {
        let websocket = [("connection", "upgrade"), ("upgrade", "websocket")];
        // Another protocol (curl --http2 on http://), no Connection token,
        // two Upgrade lines, a header value that is not text.
        assert!(asks(&head(&[
            ("connection", "Upgrade, HTTP2-Settings"),
            ("upgrade", "h2c")
        ]))
        .is_none());
        assert!(asks(&head(&[("upgrade", "websocket")])).is_none());
        assert!(asks(&head(&[
            ("connection", "keep-alive"),
            ("upgrade", "websocket")
        ]))
        .is_none());
        let mut two = head(&websocket);
        two.headers
            .append(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(asks(&two).is_none());
        // Not GET, not HTTP/1.1.
        let mut post = head(&websocket);
        post.method = Method::POST;
        assert!(asks(&post).is_none());
        let mut http10 = head(&websocket);
        http10.version = Version::HTTP_10;
        assert!(asks(&http10).is_none());
        assert!(asks(&head(&websocket)).is_some());
    }

    #[test]
    fn the_switch_keeps_the_upstreams_protocol() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "sec-websocket-accept",
            HeaderValue::from_static("s3pPLMBiTxaQ9kYGzzhZRbK+xOo="),
        );
        restore_switch(&mut headers, vec![HeaderValue::from_static("websocket")]);
        assert_eq!(headers[header::CONNECTION], "upgrade");
        assert_eq!(headers[header::UPGRADE], "websocket");
        assert_eq!(headers.len(), 3);
    }
}
