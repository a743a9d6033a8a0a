//! Events that arrive together leave together: the chunks one read brought
//! are merged into one frame before they are observed and forwarded, the
//! bytes unchanged and every event still counted, and what ends the burst
//! (the end, a cut) keeps its place after them.

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokenclock::measure::timeline::Timeline;

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

/// `wire` (a response body, chunked) sent in one write after the head,
/// through the proxy: the frames the client read, and the timeline.
async fn through(wire: Vec<u8>) -> (Vec<Bytes>, Timeline) {
    let upstream = Scripted::start(vec![Step::Write(sse_head()), Step::Write(wire.into())]).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let response = send(proxy.addr, request()).await.expect("response");
    let collected = collect(response).await.expect("a clean end");
    (
        collected.frames,
        common::next_timeline(&mut timelines).await,
    )
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
    let (frames, t) = through(wire).await;
    assert_eq!(frames.concat(), body, "the same bytes");
    // One write upstream, one read at the proxy: one chunk to the client
    // (a few if the client's reads split it), not one per event.
    assert!(
        frames.len() < EVENTS / 4,
        "{} frames for {} events",
        frames.len(),
        EVENTS + 1
    );
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

/// A long event (6,000 bytes) among short ones, all in one write, keeps
/// its place in the merge: the client gets the same bytes in the same
/// order, and every event counts.
#[tokio::test]
async fn a_large_event_in_a_burst_keeps_its_place() {
    let long = format!(
        "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}}}}]}}\n\n",
        "x".repeat(6000)
    );
    let (mut wire, mut body) = burst();
    let (tail_wire, tail_body) = burst();
    // burst() ends with [DONE]: the long event and a second burst go before it.
    let done = b"data: [DONE]\n\n";
    wire.truncate(wire.len() - chunk(done).len());
    body.truncate(body.len() - done.len());
    wire.extend_from_slice(&chunk(long.as_bytes()));
    body.extend_from_slice(long.as_bytes());
    wire.extend_from_slice(&tail_wire);
    body.extend_from_slice(&tail_body);
    wire.extend_from_slice(b"0\r\n\r\n");
    let (frames, t) = through(wire).await;
    assert_eq!(frames.concat(), body, "the same bytes, in order");
    assert_eq!(
        t.tokens.token_events,
        2 * EVENTS as u64 + 1,
        "every event counted"
    );
}
