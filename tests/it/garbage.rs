//! Bad traffic is forwarded unchanged and counted: garbage, truncated JSON,
//! an endless line, a 100 MB event and binary noise reach the client byte
//! for byte, tokenclock records parse errors and keeps serving.

use crate::common::{
    self,
    client::{collect, send},
    next_timeline,
    upstream::{bytes, chunk, head, sse_head, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokenclock::measure::dialect::ParseError;

const MIB: usize = 1024 * 1024;

/// The chunked body `parts` as written, and the bytes the client must read.
fn stream(parts: Vec<Vec<u8>>) -> (Vec<Step>, Vec<u8>) {
    let mut script = vec![Step::Write(sse_head())];
    let mut expected = Vec::new();
    for part in parts {
        for piece in part.chunks(256 * 1024) {
            script.push(Step::Write(chunk(piece)));
        }
        expected.extend_from_slice(&part);
    }
    script.push(Step::Write(bytes("0\r\n\r\n")));
    (script, expected)
}

const GOOD: &[u8] = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"}}]}\n\n";

async fn through_proxy(parts: Vec<Vec<u8>>) -> tokenclock::measure::timeline::Timeline {
    let (script, expected) = stream(parts);
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let request = Request::post("/v1/chat/completions")
        .body(Full::new(Bytes::from_static(b"{\"stream\":true}")))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    let got = collect(response).await.expect("complete").body();
    assert!(
        got == expected,
        "the client got other bytes ({} vs {})",
        got.len(),
        expected.len()
    );
    let timeline = next_timeline(&mut timelines).await;
    // The proxy keeps serving after bad traffic.
    let again = send(
        proxy.addr,
        Request::get("/v1/models")
            .body(Full::new(Bytes::new()))
            .expect("request"),
    )
    .await;
    assert!(again.is_ok(), "the proxy stopped serving");
    timeline
}

#[tokio::test]
async fn garbage_and_truncated_json_are_counted_and_forwarded() {
    let t = through_proxy(vec![
        GOOD.to_vec(),
        b"data: this is not json\n\n".to_vec(),
        b"data: {\"choices\":[{\"delta\":{\"content\":\"cut\n\n".to_vec(),
        GOOD.to_vec(),
    ])
    .await;
    assert_eq!(t.parse_errors, vec![ParseError::Json, ParseError::Json]);
    assert_eq!(
        t.tokens.token_events, 2,
        "good events around bad ones still count"
    );
}

#[tokio::test]
async fn an_endless_line_and_a_100_mb_event_are_skipped_and_counted() {
    let mut huge = b"data: {\"choices\":[{\"delta\":{\"content\":\"".to_vec();
    huge.resize(100 * MIB, b'x');
    huge.extend_from_slice(b"\"}}]}\n\n");
    let endless = vec![b'y'; 48 * MIB];
    let t = through_proxy(vec![GOOD.to_vec(), huge, GOOD.to_vec(), endless]).await;
    assert_eq!(
        t.parse_errors,
        vec![ParseError::TooLarge, ParseError::TooLarge]
    );
    assert_eq!(t.tokens.token_events, 2);
}

#[tokio::test]
async fn binary_noise_is_forwarded_unchanged() {
    let noise = common::noise(3 * MIB, 42);
    let t = through_proxy(vec![GOOD.to_vec(), noise, b"\n\n".to_vec(), GOOD.to_vec()]).await;
    assert!(t.tokens.token_events >= 1);
    assert_eq!(t.status.map(|s| s.as_u16()), Some(200));
}

/// A compressed body tokenclock cannot decode, because it is not what its
/// `content-encoding` says (noise said to be gzip, brotli or zstd) or a
/// coding it does not undo (compress): forwarded byte for byte, timed end
/// to end, counted once as `unparsed_encoding`. (Real gzip, brotli and zstd
/// bodies are read: `real_streams`.)
#[tokio::test]
async fn a_compressed_stream_it_cannot_inflate_is_timed_but_not_read() {
    for coding in ["gzip", "br", "zstd", "compress"] {
        let field = format!("content-encoding: {coding}");
        let compressed_head = head(
            "200 OK",
            &[
                "content-type: text/event-stream",
                &field,
                "transfer-encoding: chunked",
                "connection: close",
            ],
        );
        let body = common::noise(10_000, 3);
        let upstream = Scripted::start(vec![
            Step::Write(compressed_head),
            Step::Write(chunk(&body)),
            Step::Write(bytes("0\r\n\r\n")),
        ])
        .await;
        let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
        let response = send(
            proxy.addr,
            Request::post("/v1/chat/completions")
                .body(Full::new(Bytes::new()))
                .expect("request"),
        )
        .await
        .expect("response");
        assert_eq!(
            response
                .headers()
                .get("content-encoding")
                .map(|v| v.as_bytes()),
            Some(coding.as_bytes())
        );
        assert!(collect(response).await.expect("body").body() == body);
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.parse_errors, vec![ParseError::Encoding], "{coding}");
        assert!(t.e2e().is_some());
        assert_eq!(t.ttft(), None);
        proxy.shutdown().await;
    }
}
