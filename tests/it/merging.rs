//! Events that arrive together leave together: the chunks one read brought
//! are merged into one frame before they are observed and forwarded, the
//! bytes unchanged and every event still counted, and what ends the burst
//! (the end, a cut) keeps its place after them.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};

use crate::common::{
    self,
    client::{collect, send},
    upstream::{chunk, sse_head, Scripted, Step},
};

/// Token events in the burst.
const EVENTS: usize = 64;

const REQUEST: &[u8] =
    b"{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/// `EVENTS` chat events, each in its own chunk, as servers send them, and
/// `[DONE]`: the bytes on the wire (one write) and the body they carry.
fn burst() -> (Vec<u8>, Vec<u8>) {
    let (mut wire, mut body) = (Vec::new(), Vec::new());
    let events = (0..EVENTS)
        .map(|i| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" t{i}\"}}}}]}}\n\n"
            )
        })
        .chain(std::iter::once("data: [DONE]\n\n".to_owned()));
    for event in events {
        wire.extend_from_slice(&chunk(event.as_bytes()));
        body.extend_from_slice(event.as_bytes());
    }
    (wire, body)
}

fn request() -> Request<Full<Bytes>> {
    Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(REQUEST)))
        .expect("request")
}

#[tokio::test]
async fn the_chunks_of_one_read_leave_as_one_byte_for_byte_and_each_event_counts() {
    let (mut wire, body) = burst();
    wire.extend_from_slice(b"0\r\n\r\n");
    let upstream = Scripted::start(vec![Step::Write(sse_head()), Step::Write(wire.into())]).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let response = send(proxy.addr, request()).await.expect("response");
    let collected = collect(response).await.expect("a clean end");
    assert_eq!(collected.frames.concat(), body, "the same bytes");
    // One write upstream, one read at the proxy: one chunk to the client
    // (a few if the client's reads split it), not one per event.
    assert!(
        collected.frames.len() < EVENTS / 4,
        "{} frames for {} events",
        collected.frames.len(),
        EVENTS + 1
    );
    let t = common::next_timeline(&mut timelines).await;
    assert_eq!(t.tokens.token_events, EVENTS as u64, "every event counted");
    assert_eq!(t.tokens.generated, EVENTS as u64);
}

/// A cut read together with the burst (the upstream wrote its last events
/// and closed without the final chunk): the client gets every byte of the
/// burst, then the cut.
#[tokio::test]
async fn a_cut_read_with_the_burst_comes_after_all_of_its_bytes() {
    let (wire, body) = burst();
    let upstream = Scripted::start(vec![Step::Write(sse_head()), Step::Write(wire.into())]).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let response = send(proxy.addr, request()).await.expect("response");
    let mut received = Vec::new();
    let mut stream = response.into_body();
    let cut = loop {
        match stream.frame().await {
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    received.extend_from_slice(&data);
                }
            }
            Some(Err(_)) => break true,
            None => break false,
        }
    };
    assert!(cut, "a cut stream must not end cleanly");
    assert_eq!(received, body, "every byte before the cut");
}
