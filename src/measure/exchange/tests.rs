use http::{HeaderValue, Request, Response};

use super::*;

fn exchange(status: u16) -> Exchange {
    let request = Request::post("/v1/chat/completions")
        .body(())
        .unwrap_or_default();
    let reading = ReadSettings {
        max_event_bytes: 1024 * 1024,
        request_capture_bytes: 8 * 1024 * 1024,
        dialects: Default::default(),
        label_headers: Vec::new(),
        request_id_headers: Vec::new(),
        slo_headers: false,
        max_logged_model_bytes: 128,
    };
    let (mut e, _upload) = Exchange::start(Instant::now(), &request, &reading, None);
    let (head, ()) = Response::builder()
        .status(status)
        .header("content-type", "text/event-stream")
        .header("x-queue-time", "12")
        .body(())
        .unwrap_or_default()
        .into_parts();
    e.on_response_head(&head, Instant::now());
    e
}

#[test]
fn outcomes_follow_status_and_end() {
    assert_eq!(exchange(200).outcome(End::Complete), Outcome::Ok);
    assert_eq!(exchange(404).outcome(End::Complete), Outcome::HttpError);
    assert_eq!(
        exchange(200).outcome(End::Dropped),
        Outcome::ClientCancelled
    );
    let failed = End::Failed { timeout: false };
    assert_eq!(exchange(200).outcome(failed), Outcome::UpstreamError);
    let idle = End::Failed { timeout: true };
    assert_eq!(exchange(200).outcome(idle), Outcome::Timeout);
}

#[test]
fn a_local_failure_wins_over_how_its_body_ended() {
    let mut e = exchange(200);
    e.set_local_failure(StatusCode::GATEWAY_TIMEOUT, Outcome::Timeout);
    assert_eq!(e.outcome(End::Complete), Outcome::Timeout);
    let mut e = exchange(200);
    e.set_local_failure(StatusCode::BAD_GATEWAY, Outcome::UpstreamError);
    assert_eq!(e.outcome(End::Dropped), Outcome::UpstreamError);
}

#[test]
fn tgi_timing_headers_are_server_timings() {
    let e = exchange(200);
    assert_eq!(e.timeline.server.queue, Some(Duration::from_millis(12)));
    let mut headers = http::HeaderMap::new();
    headers.insert("x-inference-time", HeaderValue::from_static("1500"));
    headers.insert("x-queue-time", HeaderValue::from_static("-1"));
    let timings = tgi_header_timings(&headers);
    assert_eq!(timings.decode, Some(Duration::from_millis(1500)));
    assert_eq!(timings.queue, None, "nonsense is ignored");
}

#[test]
fn a_streamed_response_is_read_through_its_dialect() {
    let mut e = exchange(200);
    assert!(e.timeline.streamed);
    let t0 = Instant::now();
    let chunk = |s: &'static str| Bytes::from_static(s.as_bytes());
    e.on_data(
        &chunk("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n"),
        t0,
    );
    e.on_data(
        &chunk("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n"),
        t0,
    );
    assert_eq!(e.timeline.events, 3);
    assert_eq!(e.timeline.tokens.token_events, 1);
}

#[test]
fn a_long_model_is_cut_for_the_log_at_a_char_boundary() {
    assert_eq!(cut("llama", 5), "llama");
    assert_eq!(cut("llama-3", 5), "llama…");
    // "é" is two bytes: a cut inside it falls back to the boundary before.
    assert_eq!(cut("aéb", 2), "a…");
    assert_eq!(cut("ééé", 0), "…");
}

#[test]
fn the_first_response_id_of_a_stream_is_kept() {
    let mut e = exchange(200);
    let t0 = Instant::now();
    let chunk = |s: &'static str| Bytes::from_static(s.as_bytes());
    e.on_data(
        &chunk("data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n"),
        t0,
    );
    e.on_data(
        &chunk("data: {\"id\":\"chatcmpl-2\",\"choices\":[{\"delta\":{\"content\":\"!\"}}]}\n\n"),
        t0,
    );
    assert_eq!(e.timeline.ids.response_id.as_deref(), Some("chatcmpl-1"));
}
