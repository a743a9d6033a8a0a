use http::{HeaderValue, Request, Response};

use super::*;
use crate::measure::coding::tests::ZstdEncoder;
use crate::measure::dialect::ParseError;
use crate::measure::read::CaptureBudget;
use crate::measure::timeline::{CountSource, Milestone, Stage};

fn exchange(status: u16) -> Exchange {
    answered(Method::POST, status, "text/event-stream")
}

/// A chat request by `method`, whose answer's head (`status`, of
/// `content_type`) came.
fn answered(method: Method, status: u16, content_type: &str) -> Exchange {
    answered_at("/v1/chat/completions", method, status, content_type)
}

/// [`answered`], of a request to `path`.
fn answered_at(path: &str, method: Method, status: u16, content_type: &str) -> Exchange {
    let request = Request::builder()
        .method(method)
        .uri(path)
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
        template_opens_reasoning: Default::default(),
        learnt: Default::default(),
        capture_budget: Default::default(),
    };
    let (mut e, _upload) = Exchange::start(Instant::now(), &request, &reading, None);
    let mut head = Response::builder()
        .status(status)
        .header("x-queue-time", "12");
    // None at all when empty: a body read by what its first bytes say.
    if !content_type.is_empty() {
        head = head.header("content-type", content_type);
    }
    let (head, ()) = head.body(()).unwrap_or_default().into_parts();
    e.on_response_head(&head, Instant::now());
    e
}

#[test]
fn outcomes_follow_status_and_end() {
    let mut whole = exchange(200);
    whole.on_data(&Bytes::from_static(b"data: [DONE]\n\n"), Instant::now());
    assert_eq!(whole.outcome(End::Complete), Outcome::Ok);
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
fn a_stream_that_ends_before_it_says_it_is_whole_is_an_upstream_error() {
    const SSE: &str = "text/event-stream";
    const TOKEN: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n";
    let ended = |method: Method, content_type: &str, events: &[&'static str]| {
        let mut e = answered(method, 200, content_type);
        for event in events {
            e.on_data(&Bytes::from_static(event.as_bytes()), Instant::now());
        }
        e.outcome(End::Complete)
    };
    // A gateway that ended the body cleanly after an upstream's failure.
    assert_eq!(ended(Method::POST, SSE, &[TOKEN]), Outcome::UpstreamError);
    // Not judged without a token read: events the dialect does not know
    // (an older llama.cpp's native ones on `/v1/completions`), a whole
    // JSON answer labelled a stream, nothing at all.
    let native = "data: {\"content\":\"Hi\",\"stop\":false}\n\n";
    assert_eq!(ended(Method::POST, SSE, &[native]), Outcome::Ok);
    assert_eq!(ended(Method::POST, SSE, &[body_of_chat()]), Outcome::Ok);
    assert_eq!(ended(Method::POST, SSE, &[]), Outcome::Ok);
    assert_eq!(ended(Method::POST, SSE, &[": keep-alive\n\n"]), Outcome::Ok);
    // Its closing event, or a finish reason, says it was whole.
    assert_eq!(
        ended(Method::POST, SSE, &[TOKEN, "data: [DONE]\n\n"]),
        Outcome::Ok
    );
    let finished = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n";
    assert_eq!(ended(Method::POST, SSE, &[TOKEN, finished]), Outcome::Ok);
    // An event that could not be read may have been its end: not judged.
    let unread = "data: {\"choices\n\n";
    assert_eq!(ended(Method::POST, SSE, &[TOKEN, unread]), Outcome::Ok);
    // Unless an event was read after it: it was not the last.
    assert_eq!(
        ended(Method::POST, SSE, &[unread, TOKEN]),
        Outcome::UpstreamError
    );
    // Not streams: a whole body, and a HEAD's answer; an unlabelled body
    // too short to tell (`da` may begin `data:`), whose bytes are held.
    assert_eq!(
        ended(Method::POST, "application/json", &[body_of_chat()]),
        Outcome::Ok
    );
    assert_eq!(ended(Method::POST, "", &["da"]), Outcome::Ok);
    assert_eq!(ended(Method::HEAD, SSE, &[]), Outcome::Ok);
}

/// An NDJSON stream cut inside its last line, then ended cleanly, is cut
/// as an SSE one is (its partial line is no unreadable payload); a last
/// line whole but for its newline is read.
#[test]
fn an_ndjson_stream_cut_inside_its_last_line_is_an_upstream_error() {
    const LINE: &str = "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"Hi\"},\"done\":false}\n";
    const DONE: &str = "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true,\"done_reason\":\"stop\"}";
    for (last, want, errors) in [
        (&DONE[..30], Outcome::UpstreamError, vec![]),
        (DONE, Outcome::Ok, vec![]),
        ("not json", Outcome::Ok, vec![ParseError::Json]),
    ] {
        let mut e = answered_at("/api/chat", Method::POST, 200, "application/x-ndjson");
        for part in [LINE, last] {
            e.on_data(&Bytes::copy_from_slice(part.as_bytes()), Instant::now());
        }
        e.complete(End::Complete, Instant::now());
        assert_eq!(e.timeline.outcome, want, "{last}");
        assert_eq!(e.timeline.parse_errors, errors, "{last}");
    }
}

/// A whole JSON answer that ends inside a value, though its body ended
/// cleanly, was cut short on its way: `upstream_error`, and no payload of
/// another shape (`invalid_json`). A black-box pass found it `ok`.
#[test]
fn a_whole_json_answer_that_ends_inside_a_value_is_an_upstream_error() {
    let whole = body_of_chat();
    for (body, want, errors) in [
        (whole, Outcome::Ok, vec![]),
        (&whole[..40], Outcome::UpstreamError, vec![]),
        (
            "<html>Bad gateway</html>",
            Outcome::Ok,
            vec![ParseError::Json],
        ),
        (r#"{"shape":"another"}"#, Outcome::Ok, vec![]),
    ] {
        let mut e = answered(Method::POST, 200, "application/json");
        e.on_data(&Bytes::copy_from_slice(body.as_bytes()), Instant::now());
        e.complete(End::Complete, Instant::now());
        assert_eq!(e.timeline.outcome, want, "{body}");
        assert_eq!(e.timeline.parse_errors, errors, "{body}");
    }
}

/// A whole chat answer, not a stream.
fn body_of_chat() -> &'static str {
    r#"{"object":"chat.completion","choices":[{"message":{"content":"hi"},"finish_reason":null}]}"#
}

#[test]
fn a_local_failure_wins_over_how_its_body_ended() {
    let mut e = exchange(200);
    e.set_local_failure(StatusCode::GATEWAY_TIMEOUT, Outcome::Timeout, true);
    assert_eq!(e.outcome(End::Complete), Outcome::Timeout);
    let mut e = exchange(200);
    e.set_local_failure(StatusCode::BAD_GATEWAY, Outcome::UpstreamError, true);
    assert_eq!(e.outcome(End::Dropped), Outcome::UpstreamError);
}

#[test]
fn tgi_timing_headers_are_server_timings() {
    let e = exchange(200);
    assert_eq!(e.timeline.server.queue, Some(Duration::from_millis(12)));
    let mut headers = http::HeaderMap::new();
    headers.insert("x-inference-time", HeaderValue::from_static("1500"));
    headers.insert("x-queue-time", HeaderValue::from_static("-1"));
    let timings = head::reported(&headers, Router::Other).server;
    assert_eq!(timings.decode, Some(Duration::from_millis(1500)));
    assert_eq!(timings.queue, None, "nonsense is ignored");
    // TGI's router: its inference time is decode; TEI's: prefill, with
    // its count of the input.
    headers.insert("x-compute-type", HeaderValue::from_static("gpu+optimized"));
    assert_eq!(Router::of(&headers), Router::Tgi);
    let tgi = head::reported(&headers, Router::Tgi);
    assert_eq!(tgi.server.decode, Some(Duration::from_millis(1500)));
    assert_eq!(tgi.usage, None);
    headers.insert("x-compute-tokens", HeaderValue::from_static("31"));
    assert_eq!(Router::of(&headers), Router::Tei);
    let tei = head::reported(&headers, Router::Tei);
    assert_eq!(tei.server.prefill, Some(Duration::from_millis(1500)));
    assert_eq!(tei.server.decode, None);
    assert_eq!(tei.usage.and_then(|u| u.input), Some(31));
    // Past `Duration`'s range: no timing, and no panic.
    headers.insert("x-inference-time", HeaderValue::from_static("1e30"));
    headers.insert("x-queue-time", HeaderValue::from_static("NaN"));
    let tei = head::reported(&headers, Router::Tei);
    assert_eq!((tei.server.prefill, tei.server.queue), (None, None));
}

#[test]
fn a_request_slo_past_durations_range_is_no_limit() {
    let mut headers = http::HeaderMap::new();
    headers.insert("x-slo-ttft-ms", HeaderValue::from_static("1e30"));
    headers.insert("x-slo-tpot-ms", HeaderValue::from_static("25"));
    let limits = request_slo(&headers).expect("the tpot limit");
    assert_eq!(limits.ttft, None);
    assert_eq!(limits.tpot, Some(Duration::from_millis(25)));
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

/// What a sink was told, in order: each milestone with the model it was
/// labelled with, each stage move, and the milestones left to the end.
#[derive(Default)]
struct Told(Lines);

impl TimelineSink for Told {
    fn progressed(&self, t: &Timeline, milestones: Milestones) {
        for milestone in milestones.iter() {
            self.push(format!(
                "{milestone:?} {}",
                t.model.as_deref().unwrap_or("-")
            ));
        }
    }
    fn entered(&self, _: crate::measure::dialect::Dialect, stage: Stage) {
        self.push(format!("+{}", stage.as_str()));
    }
    fn left(&self, _: crate::measure::dialect::Dialect, stage: Stage) {
        self.push(format!("-{}", stage.as_str()));
    }
    fn finished(&self, t: &Timeline) {
        let rest: Vec<_> = Milestone::ALL
            .into_iter()
            .filter(|m| t.reached().contains(*m) && !t.delivered.contains(*m))
            .map(|m| format!("{m:?}"))
            .collect();
        self.push(format!(
            "finished {} [{}]",
            t.model.as_deref().unwrap_or("-"),
            rest.join(" ")
        ));
    }
}

/// What a test sink was told, one line each.
#[derive(Default)]
struct Lines(std::sync::Mutex<Vec<String>>);

impl Lines {
    fn push(&self, line: String) {
        if let Ok(mut lines) = self.0.lock() {
            lines.push(line);
        }
    }

    /// What was told since the last call.
    fn take(&self) -> Vec<String> {
        self.0
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default()
    }
}

impl std::ops::Deref for Told {
    type Target = Lines;
    fn deref(&self) -> &Lines {
        &self.0
    }
}

fn told_exchange(path: &str) -> (Arc<Told>, Exchange, Upload) {
    let request = Request::post(path).body(()).unwrap_or_default();
    let reading = shared_settings();
    let told = Arc::new(Told::default());
    let sink: Arc<dyn TimelineSink> = told.clone();
    let (e, upload) = Exchange::start(Instant::now(), &request, &reading, Some(sink));
    (told, e, upload)
}

fn upload(mut upload: Upload, body: &'static str) {
    upload.on_data(&Bytes::from_static(body.as_bytes()), Instant::now());
    upload.on_end(End::Complete, Instant::now());
}

fn head(e: &mut Exchange, content_type: &str) {
    head_of(e, 200, &[("content-type", content_type)]);
}

fn data(e: &mut Exchange, text: &'static str) {
    e.on_data(&Bytes::from_static(text.as_bytes()), Instant::now());
}

const ROLE: &str =
    "data: {\"model\":\"served\",\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n";
const THINK: &str = "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"hm\"}}]}\n\n";
const SAY: &str = "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n";

#[test]
fn milestones_go_out_once_each_as_they_happen_and_the_end_keeps_the_rest() {
    let (told, mut e, up) = told_exchange("/v1/chat/completions");
    assert_eq!(told.take(), ["+upload"]);
    upload(up, r#"{"model":"asked","stream":true}"#);
    assert_eq!(told.take(), ["+waiting_headers", "-upload"]);
    head(&mut e, "text/event-stream");
    assert_eq!(
        told.take(),
        [
            "+waiting_first_token",
            "-waiting_headers",
            "RequestUpload asked",
            "ResponseHeaders asked"
        ]
    );
    data(&mut e, ROLE);
    data(&mut e, THINK);
    assert_eq!(
        told.take(),
        ["+reasoning", "-waiting_first_token", "FirstToken asked"]
    );
    data(&mut e, THINK);
    data(&mut e, SAY);
    data(&mut e, SAY);
    assert_eq!(
        told.take(),
        ["+streaming", "-reasoning", "FirstOutput asked"]
    );
    e.on_end(End::Complete, Instant::now());
    assert_eq!(told.take(), ["-streaming", "finished asked []"]);
}

#[test]
fn a_request_without_a_model_waits_for_the_response_to_name_one() {
    let (told, mut e, up) = told_exchange("/v1/chat/completions");
    upload(up, r#"{"stream":true}"#);
    head(&mut e, "text/event-stream");
    told.take();
    data(&mut e, ROLE);
    assert_eq!(
        told.take(),
        ["RequestUpload served", "ResponseHeaders served"],
        "the first event naming the model settles the label"
    );
}

#[test]
fn a_request_still_uploading_at_the_head_is_labelled_once_its_body_is_read() {
    let (told, mut e, up) = told_exchange("/v1/chat/completions");
    head(&mut e, "text/event-stream");
    data(&mut e, SAY);
    assert_eq!(
        told.take(),
        [
            "+upload",
            "+waiting_first_token",
            "-upload",
            "+streaming",
            "-waiting_first_token"
        ],
        "no milestone before the request's model is known"
    );
    upload(up, r#"{"model":"late"}"#);
    assert!(told.take().is_empty(), "the stage never moves back");
    data(&mut e, SAY);
    assert_eq!(
        told.take(),
        [
            "RequestUpload late",
            "ResponseHeaders late",
            "FirstToken late",
            "FirstOutput late"
        ]
    );
}

#[test]
fn a_response_that_never_names_a_model_settles_at_its_head() {
    // TGI's native events carry no model; a non-stream is not read.
    for (path, content_type) in [
        ("/generate_stream", "text/event-stream"),
        ("/v1/chat/completions", "text/plain"),
    ] {
        let (told, mut e, up) = told_exchange(path);
        upload(up, r#"{"inputs":"x"}"#);
        head(&mut e, content_type);
        let lines = told.take();
        assert!(
            lines.contains(&"ResponseHeaders -".to_owned()),
            "{path}: {lines:?}"
        );
    }
    // A whole JSON body may name it at its end: wait for the end.
    let (told, mut e, up) = told_exchange("/v1/chat/completions");
    upload(up, r#"{"messages":[]}"#);
    head(&mut e, "application/json");
    data(&mut e, r#"{"model":"whole","choices":[]}"#);
    e.on_end(End::Complete, Instant::now());
    assert_eq!(
        told.take().last().map(String::as_str),
        Some("finished whole [RequestUpload ResponseHeaders]")
    );
}

#[test]
fn a_request_that_ends_before_its_label_settles_leaves_everything_to_the_end() {
    let (told, e, up) = told_exchange("/v1/chat/completions");
    drop(up);
    drop(e);
    assert_eq!(told.take(), ["+upload", "-upload", "finished - []"]);
}

/// An exchange whose response is `content_type`, compressed with `coding`.
fn compressed(content_type: &str, coding: &str) -> Exchange {
    let mut e = exchange(200);
    let (head, ()) = Response::builder()
        .status(200)
        .header("content-type", content_type)
        .header("content-encoding", coding)
        .body(())
        .unwrap_or_default()
        .into_parts();
    e.on_response_head(&head, Instant::now());
    e
}

/// `parts` compressed with gzip, the compressor flushed after each: the
/// frames a streaming server sends, and the trailer that ends them.
fn gzip_frames(parts: &[&str]) -> (Vec<Bytes>, Bytes) {
    compressed_frames("gzip", parts)
}

/// `parts` compressed with `coding` (`gzip` or `br`), the compressor
/// flushed after each, and the trailer that ends them.
fn compressed_frames(coding: &str, parts: &[&str]) -> (Vec<Bytes>, Bytes) {
    use std::io::Write;
    /// Each part written and flushed, and what `take` then finds written.
    fn flushed<W: Write>(
        encoder: &mut W,
        parts: &[&str],
        take: fn(&mut W) -> Vec<u8>,
    ) -> Vec<Bytes> {
        parts
            .iter()
            .map(|part| {
                encoder.write_all(part.as_bytes()).unwrap_or_default();
                encoder.flush().unwrap_or_default();
                Bytes::from(take(encoder))
            })
            .collect()
    }
    if coding == "zstd" {
        let mut e = ZstdEncoder::new(3, 22);
        let frames = parts
            .iter()
            .map(|part| {
                let mut frame = e.write(part.as_bytes());
                frame.extend(e.flush(false));
                Bytes::from(frame)
            })
            .collect();
        (frames, Bytes::from(e.flush(true)))
    } else if coding == "br" {
        let mut e = brotli::CompressorWriter::new(Vec::new(), 4096, 5, 22);
        let frames = flushed(&mut e, parts, |e| std::mem::take(e.get_mut()));
        (frames, Bytes::from(e.into_inner()))
    } else {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let frames = flushed(&mut e, parts, |e| std::mem::take(e.get_mut()));
        (frames, Bytes::from(e.finish().unwrap_or_default()))
    }
}

#[test]
fn a_gzip_body_is_read_inflated() {
    let mut e = compressed("application/json", "gzip");
    let body = r#"{"choices":[{"message":{"content":"Hi there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
    let (frames, trailer) = gzip_frames(&[&body[..40], &body[40..]]);
    let t0 = Instant::now();
    for frame in frames {
        e.on_data(&frame, t0);
    }
    e.on_data(&trailer, t0);
    e.complete(End::Complete, t0);
    assert_eq!(e.timeline.parse_errors, vec![]);
    assert_eq!(
        (e.timeline.usage.input, e.timeline.usage.output),
        (Some(3), Some(2))
    );
}

/// Each event of a flushed gzip stream is read with the frame that carried
/// it; a stream cut before its trailer keeps what it read and is not
/// counted as one that could not be inflated, unless it claimed to end.
#[test]
fn a_gzip_stream_is_read_event_by_event_and_a_cut_one_keeps_its_events() {
    let events = [
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n",
    ];
    for (end, errors) in [
        (End::Failed { timeout: false }, vec![]),
        (End::Complete, vec![ParseError::Encoding]),
    ] {
        let mut e = compressed("text/event-stream", "gzip");
        let (frames, _trailer) = gzip_frames(&events);
        for (n, frame) in frames.iter().enumerate() {
            e.on_data(frame, Instant::now());
            assert_eq!(e.timeline.tokens.token_events, n as u64 + 1);
        }
        e.complete(end, Instant::now());
        assert_eq!(e.timeline.tokens.token_events, 2);
        assert_eq!(e.timeline.parse_errors, errors, "{end:?}");
    }
}

/// A compressed stream whose body ended cleanly but whose coding did not
/// (no gzip trailer, no brotli or zstd end) was cut after what it
/// inflated: its events stand, and it is judged by them as a plain
/// stream is (a black-box pass found such a cut `ok`, since the coding's
/// error at the end stopped the judgement). The coding that ended short is
/// counted either way.
#[test]
fn a_compressed_stream_whose_coding_ended_short_is_judged_by_its_events() {
    let token = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    for coding in ["gzip", "br", "zstd"] {
        for (events, want) in [
            (&[token, token][..], Outcome::UpstreamError),
            (&[token, token, "data: [DONE]\n\n"][..], Outcome::Ok),
        ] {
            let mut e = compressed("text/event-stream", coding);
            let (frames, _end) = compressed_frames(coding, events);
            for frame in &frames {
                e.on_data(frame, Instant::now());
            }
            e.complete(End::Complete, Instant::now());
            let t = &e.timeline;
            assert_eq!(t.outcome, want, "{coding}, {} events", events.len());
            assert_eq!(t.parse_errors, vec![ParseError::Encoding], "{coding}");
            assert_eq!(t.tokens.token_events, 2, "{coding}");
        }
    }
}

#[test]
fn a_coding_that_is_not_inflated_is_counted_once() {
    for coding in [
        "compress",
        "x-compress",
        "gzip, gzip",
        "br, gzip",
        "zstd, br",
    ] {
        let mut e = compressed("text/event-stream", coding);
        e.on_data(&Bytes::from_static(b"\x1b\x2c\x00"), Instant::now());
        e.complete(End::Complete, Instant::now());
        assert_eq!(
            e.timeline.parse_errors,
            vec![ParseError::Encoding],
            "{coding}"
        );
        assert_eq!(e.timeline.tokens.token_events, 0);
    }
}

/// `n` token events of an OpenAI stream.
fn token_events(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"w{i}\"}}}}]}}\n\n"))
        .collect()
}

/// A flushed gzip stream whose frames arrive a second apart: each event is
/// timed by the frame that carried it, not by a later one or the end.
#[test]
fn each_flushed_compressed_event_is_timed_by_its_own_frame() {
    for coding in ["gzip", "br", "zstd"] {
        each_flushed_event_is_timed_by_its_own_frame(coding);
    }
}

fn each_flushed_event_is_timed_by_its_own_frame(coding: &str) {
    let events = token_events(20);
    let parts: Vec<&str> = events.iter().map(String::as_str).collect();
    let (frames, trailer) = compressed_frames(coding, &parts);
    let mut e = compressed("text/event-stream", coding);
    let t0 = Instant::now() + Duration::from_secs(3600);
    let at = |i: usize| t0 + Duration::from_secs(i as u64);
    for (i, frame) in frames.iter().enumerate() {
        e.on_data(frame, at(i));
        assert_eq!(e.timeline.tokens.token_events, i as u64 + 1);
        assert_eq!(e.timeline.first_token, Some(t0));
        assert_eq!(e.timeline.last_token, Some(at(i)), "event {i}");
    }
    e.on_data(&trailer, at(frames.len()));
    e.complete(End::Complete, at(frames.len()));
    assert_eq!(e.timeline.last_token, Some(at(frames.len() - 1)));
    assert_eq!(e.timeline.parse_errors, vec![]);
}

/// A stream whose compressor is never flushed (one gzip body, cut into
/// small frames anywhere) still reads every event, each with a frame that
/// arrived (not at the end's clock), and with no error.
#[test]
fn an_unflushed_gzip_stream_reads_every_event_with_its_frames() {
    use std::io::Write;
    let events = token_events(200);
    let cases = [
        ("gzip", 5),
        ("gzip", 333),
        ("deflate", 7),
        ("x-gzip", 4096),
        ("br", 3),
        ("br", 500),
        ("zstd", 5),
        ("zstd", 777),
    ];
    for (coding, piece) in cases {
        let body = if coding == "zstd" {
            let mut z = ZstdEncoder::new(19, 22);
            let mut body = z.write(events.concat().as_bytes());
            body.extend(z.flush(true));
            body
        } else if coding == "br" {
            let mut b = brotli::CompressorWriter::new(Vec::new(), 4096, 11, 22);
            b.write_all(events.concat().as_bytes()).unwrap_or_default();
            b.into_inner()
        } else if coding == "deflate" {
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::best());
            z.write_all(events.concat().as_bytes()).unwrap_or_default();
            z.finish().unwrap_or_default()
        } else {
            let mut g = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            g.write_all(events.concat().as_bytes()).unwrap_or_default();
            g.finish().unwrap_or_default()
        };
        let mut e = compressed("text/event-stream", coding);
        let t0 = Instant::now() + Duration::from_secs(3600);
        let frames: Vec<&[u8]> = body.chunks(piece).collect();
        let last = t0 + Duration::from_millis(frames.len() as u64 - 1);
        for (i, frame) in frames.iter().enumerate() {
            e.on_data(
                &Bytes::copy_from_slice(frame),
                t0 + Duration::from_millis(i as u64),
            );
        }
        assert_eq!(e.timeline.tokens.token_events, 200, "{coding} {piece}");
        e.complete(End::Complete, last);
        assert_eq!(e.timeline.tokens.token_events, 200, "{coding} {piece}");
        assert_eq!(e.timeline.parse_errors, vec![], "{coding} {piece}");
        let (first, last_token) = (e.timeline.first_token, e.timeline.last_token);
        assert!(first.is_some_and(|f| f >= t0), "{coding} {piece}");
        assert!(last_token.is_some_and(|l| l <= last), "{coding} {piece}");
    }
}

/// An uncompressed response (no `content-encoding`, or only `identity`)
/// is read byte for byte as before, in any frames.
#[test]
fn an_uncompressed_stream_is_read_as_before() {
    let events = token_events(10).concat();
    for coding in [None, Some("identity"), Some("")] {
        let mut e = match coding {
            None => exchange(200),
            Some(c) => compressed("text/event-stream", c),
        };
        for frame in events.as_bytes().chunks(3) {
            e.on_data(&Bytes::copy_from_slice(frame), Instant::now());
        }
        e.complete(End::Complete, Instant::now());
        assert_eq!(e.timeline.tokens.token_events, 10, "{coding:?}");
        assert_eq!(e.timeline.parse_errors, vec![], "{coding:?}");
    }
}

/// Hostile compressed bodies (garbage after a gzip header, a bomb) neither
/// panic nor error the response: the copy is just not read further.
#[test]
fn a_hostile_compressed_body_is_only_counted() {
    use std::io::Write;
    let mut bomb = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    bomb.write_all(&vec![b'\n'; 16 << 20]).unwrap_or_default();
    let bomb = bomb.finish().unwrap_or_default();
    let mut garbage = vec![0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 0xff];
    let noise = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8);
    garbage.extend(noise.clone());
    let mut br_bomb = brotli::CompressorWriter::new(Vec::new(), 4096, 5, 24);
    br_bomb
        .write_all(&vec![b'\n'; 64 << 20])
        .unwrap_or_default();
    let br_bomb = br_bomb.into_inner();
    let br_garbage: Vec<u8> = noise.clone().collect();
    let mut zstd_bomb = ZstdEncoder::new(19, 23);
    let mut z = zstd_bomb.write(&vec![b'\n'; 64 << 20]);
    z.extend(zstd_bomb.flush(true));
    let mut zstd_garbage = vec![0x28, 0xb5, 0x2f, 0xfd];
    zstd_garbage.extend(noise);
    // The bomb is read until it inflates past its bound, the garbage until
    // it fails: counted once each. A whole body's bomb may pass its 1 MiB
    // cap first (brotli and zstd hand their output on 16 KiB at a time,
    // gzip a step's at once, checked before): then it is counted as too
    // large, and its decoding stops there.
    let bodies = [
        ("gzip", bomb, true),
        ("gzip", garbage, false),
        ("br", br_bomb, true),
        ("br", br_garbage, false),
        ("zstd", z, true),
        ("zstd", zstd_garbage, false),
    ];
    for (coding, body, bomb) in bodies {
        for content_type in ["text/event-stream", "application/json"] {
            let mut e = compressed(content_type, coding);
            for frame in body.chunks(16 * 1024) {
                e.on_data(&Bytes::copy_from_slice(frame), Instant::now());
            }
            e.complete(End::Complete, Instant::now());
            assert_eq!(e.outcome(End::Complete), Outcome::Ok);
            assert_eq!(e.timeline.tokens.token_events, 0);
            let errors = &e.timeline.parse_errors;
            let whole_too_large =
                bomb && content_type == "application/json" && errors == &vec![ParseError::TooLarge];
            assert!(
                errors == &vec![ParseError::Encoding] || whole_too_large,
                "{coding} {content_type}: {errors:?}"
            );
        }
    }
}

/// A whole body past its cap is read no further, so it is inflated no
/// further either: counted once, as too large.
#[test]
fn a_compressed_whole_body_past_its_cap_is_no_longer_inflated() {
    let words: String = (0..400_000).map(|i| format!("w{} ", i % 977)).collect();
    let body = format!(r#"{{"choices":[{{"message":{{"content":"{words}"}}}}]}}"#);
    let (frames, trailer) = gzip_frames(&[&body]);
    let mut e = compressed("application/json", "gzip");
    assert!(e.reader.inflating());
    for frame in frames.iter().chain([&trailer]) {
        for piece in frame.chunks(4096) {
            e.on_data(&Bytes::copy_from_slice(piece), Instant::now());
        }
    }
    assert!(!e.reader.inflating());
    e.complete(End::Complete, Instant::now());
    assert_eq!(e.timeline.parse_errors, vec![ParseError::TooLarge]);
}

/// Under which endpoint a sink was told each thing (`/generate`, which
/// TGI and SGLang share).
#[derive(Default)]
struct Endpoints(Lines);

impl TimelineSink for Endpoints {
    fn started(&self, dialect: Dialect) {
        self.push(format!("in {}", dialect.as_str()));
    }
    fn moved(&self, from: Dialect, to: Dialect) {
        self.push(format!("moved {} {}", from.as_str(), to.as_str()));
    }
    fn progressed(&self, t: &Timeline, milestones: Milestones) {
        for milestone in milestones.iter() {
            self.push(format!("{milestone:?} {}", t.dialect.as_str()));
        }
    }
    fn entered(&self, dialect: Dialect, stage: Stage) {
        self.push(format!("+{} {}", stage.as_str(), dialect.as_str()));
    }
    fn left(&self, dialect: Dialect, stage: Stage) {
        self.push(format!("-{} {}", stage.as_str(), dialect.as_str()));
    }
    fn finished(&self, t: &Timeline) {
        if !t.parse_errors.is_empty() {
            self.push(format!("parse errors {:?}", t.parse_errors));
        }
        self.push(format!(
            "finished {} {} tokens",
            t.dialect.as_str(),
            t.tokens.generated
        ));
    }
}

impl std::ops::Deref for Endpoints {
    type Target = Lines;
    fn deref(&self) -> &Lines {
        &self.0
    }
}

fn generate(path: &str, forced: Option<Dialect>) -> (Arc<Endpoints>, Exchange) {
    let reading = ReadSettings {
        dialects: forced.map(|d| (path.to_owned(), d)).into_iter().collect(),
        ..shared_settings()
    };
    generate_with(&reading, path)
}

/// Settings for requests on the shared paths: nothing forced, nothing
/// learnt yet (what the requests made with them learn, they share).
fn shared_settings() -> ReadSettings {
    ReadSettings {
        max_event_bytes: 1024 * 1024,
        request_capture_bytes: 1024,
        dialects: Default::default(),
        label_headers: Vec::new(),
        request_id_headers: Vec::new(),
        slo_headers: false,
        max_logged_model_bytes: 128,
        template_opens_reasoning: Default::default(),
        learnt: Default::default(),
        capture_budget: Default::default(),
    }
}

/// A request on `path` under `reading` (whose learnt server it shares).
fn generate_with(reading: &ReadSettings, path: &str) -> (Arc<Endpoints>, Exchange) {
    let request = Request::post(path).body(()).unwrap_or_default();
    let told = Arc::new(Endpoints::default());
    let sink: Arc<dyn TimelineSink> = told.clone();
    let (e, up) = Exchange::start(Instant::now(), &request, reading, Some(sink));
    upload(
        up,
        r#"{"text":"Hi","sampling_params":{"max_new_tokens":8}}"#,
    );
    (told, e)
}

/// No parse error was told (an error body read to tell whose it is
/// counts none).
fn no_parse_error(told: &[String]) -> bool {
    told.iter().all(|l| !l.starts_with("parse errors"))
}

fn head_with(e: &mut Exchange, headers: &[(&str, &str)]) {
    head_of(e, 200, headers);
}

/// A head with `status` and `headers`.
fn head_of(e: &mut Exchange, status: u16, headers: &[(&str, &str)]) {
    let mut builder = Response::builder().status(status);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let (head, ()) = builder.body(()).unwrap_or_default().into_parts();
    e.on_response_head(&head, Instant::now());
}

/// A head of TGI's: `content_type`, and the `x-compute-type` its router
/// adds to every successful answer.
fn tgi_head(e: &mut Exchange, content_type: &str) {
    head_with(
        e,
        &[
            ("content-type", content_type),
            ("x-compute-type", "gpu+optimized"),
        ],
    );
}

const SGLANG: &str = "data: {\"text\":\" Paris\",\"meta_info\":{\"id\":\"a\",\"finish_reason\":null,\"prompt_tokens\":5,\"completion_tokens\":1}}\n\ndata: {\"text\":\" Paris.\",\"meta_info\":{\"id\":\"a\",\"finish_reason\":{\"type\":\"stop\",\"matched\":2},\"prompt_tokens\":5,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n";

#[test]
fn a_stream_on_generate_is_sglangs_from_its_head() {
    let (told, mut e) = generate("/generate", None);
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    assert_eq!(e.dialect(), Dialect::Sglang);
    data(&mut e, SGLANG);
    e.on_end(End::Complete, Instant::now());
    assert_eq!(
        told.take(),
        [
            "in tgi",
            "+upload tgi",
            "+waiting_headers tgi",
            "-upload tgi",
            // Moved at the head, before any milestone went out.
            "+waiting_headers sglang",
            "-waiting_headers tgi",
            "moved tgi sglang",
            "+waiting_first_token sglang",
            "-waiting_headers sglang",
            "RequestUpload sglang",
            "ResponseHeaders sglang",
            "+streaming sglang",
            "-waiting_first_token sglang",
            "FirstToken sglang",
            "FirstOutput sglang",
            "-streaming sglang",
            "finished sglang 3 tokens",
        ]
    );
}

#[test]
fn a_whole_body_on_generate_tells_which_server_wrote_it_at_its_end() {
    let sglang = "{\"text\":\" Paris.\",\"meta_info\":{\"id\":\"a\",\"finish_reason\":{\"type\":\"length\",\"length\":4},\"prompt_tokens\":5,\"completion_tokens\":4}}";
    let tgi = "{\"generated_text\":\" Paris.\",\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":2}}";
    for (body, dialect, tokens) in [(sglang, "sglang", 4), (tgi, "tgi", 2)] {
        let (told, mut e) = generate("/generate", None);
        head_with(&mut e, &[("content-type", "application/json")]);
        data(&mut e, body);
        let before_end = told.take();
        assert!(
            !before_end.iter().any(|l| l.starts_with("Re")),
            "no milestone before the body tells its server: {before_end:?}"
        );
        e.on_end(End::Complete, Instant::now());
        let told = told.take();
        let moved = told.iter().any(|l| l == "moved tgi sglang");
        assert_eq!(moved, dialect == "sglang", "{told:?}");
        assert_eq!(
            told.last().map(String::as_str),
            Some(format!("finished {dialect} {tokens} tokens").as_str())
        );
        assert!(told
            .iter()
            .all(|l| !l.starts_with('+') || l.ends_with(dialect)));
    }
}

#[test]
fn tgi_headers_an_error_or_a_forced_dialect_keep_generate_tgis() {
    // TGI's router adds `x-compute-type` to every successful answer.
    let (told, mut e) = generate("/generate", None);
    tgi_head(&mut e, "application/json");
    assert_eq!(e.dialect(), Dialect::Tgi);
    assert!(e.undecided.is_none(), "decided at the head");
    data(&mut e, "{\"generated_text\":\"x\",\"meta_info\":{}}");
    e.on_end(End::Complete, Instant::now());
    assert!(told.take().iter().all(|l| !l.contains("sglang")));
    // An error's body is read only to tell whose it is: SGLang's `error`
    // is an object, TGI's a string; one that is not JSON cannot tell.
    let sglang =
        r#"{"error":{"message":"Input length (9000 tokens) exceeds the maximum allowed length."}}"#;
    let tgi = r#"{"error":"Input validation error: `inputs` must have less than 4096 tokens.","error_type":"validation"}"#;
    for (status, content_type, body, dialect) in [
        (400, "application/json", sglang, "sglang"),
        (
            503,
            "application/json",
            r#"{"object":"error","message":"overloaded","type":"503","param":null,"code":503}"#,
            "sglang",
        ),
        (422, "application/json", tgi, "tgi"),
        (503, "text/plain", "busy", "tgi"),
    ] {
        let (told, mut e) = generate("/generate/", None);
        head_of(&mut e, status, &[("content-type", content_type)]);
        e.on_data(&Bytes::from(body), Instant::now());
        e.on_end(End::Complete, Instant::now());
        let told = told.take();
        assert_eq!(
            told.last().map(String::as_str),
            Some(format!("finished {dialect} 0 tokens").as_str()),
            "{status} {body}: {told:?}"
        );
        assert!(no_parse_error(&told), "{told:?}");
    }
    // A dialect forced for the path is never changed.
    let (told, mut e) = generate("/generate", Some(Dialect::Tgi));
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    assert_eq!(e.dialect(), Dialect::Tgi);
    e.on_end(End::Complete, Instant::now());
    assert!(told.take().iter().all(|l| !l.contains("sglang")));
    // `/generate_stream` is TGI's alone.
    let (_, mut e) = generate("/generate_stream", None);
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    assert_eq!(e.dialect(), Dialect::Tgi);
}

/// A TGI stream as TGI's `generate_stream` writes it (its events; the head
/// carries `x-compute-type`).
const TGI_STREAM: &str = "data:{\"index\":1,\"token\":{\"id\":415,\"text\":\" The\",\"logprob\":-0.4,\"special\":false},\"generated_text\":null,\"details\":null}\n\ndata:{\"index\":2,\"token\":{\"id\":4372,\"text\":\" end\",\"logprob\":-0.1,\"special\":false},\"generated_text\":\" The end\",\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":2,\"seed\":null}}\n\n";

#[test]
fn tgis_root_route_is_read_when_its_head_is_tgis() {
    // `POST /`, as huggingface_hub's InferenceClient sends it to a TGI URL.
    let (told, mut e) = generate("/", None);
    tgi_head(&mut e, "text/event-stream");
    assert_eq!(e.dialect(), Dialect::Tgi);
    data(&mut e, TGI_STREAM);
    e.on_end(End::Complete, Instant::now());
    let told = told.take();
    assert_eq!(told.first().map(String::as_str), Some("in unknown"));
    assert!(told.contains(&"moved unknown tgi".to_owned()), "{told:?}");
    assert!(told.contains(&"FirstToken tgi".to_owned()), "{told:?}");
    assert_eq!(
        told.last().map(String::as_str),
        Some("finished tgi 2 tokens")
    );
    // Its whole answer is wrapped in an array.
    let (told, mut e) = generate("/", None);
    tgi_head(&mut e, "application/json");
    data(&mut e, "[{\"generated_text\":\" The end\",\"details\":{\"finish_reason\":\"length\",\"generated_tokens\":2}}]");
    e.on_end(End::Complete, Instant::now());
    assert_eq!(
        told.take().last().map(String::as_str),
        Some("finished tgi 2 tokens")
    );
}

#[test]
fn the_root_routes_body_is_read_only_when_tgi_answered() {
    // The helper's body asks for 8 tokens.
    let (_, mut e) = generate("/", None);
    tgi_head(&mut e, "text/event-stream");
    data(&mut e, TGI_STREAM);
    e.complete(End::Complete, Instant::now());
    assert_eq!(e.timeline.request.max_tokens, Some(8));
    let (_, mut e) = generate("/", None);
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    e.complete(End::Complete, Instant::now());
    assert_eq!(
        e.timeline.request,
        Default::default(),
        "unknown: nothing read"
    );
}

#[test]
fn the_root_path_of_another_server_stays_unknown() {
    // No TGI head: whatever else answers `POST /` is not read.
    let (told, mut e) = generate("/", None);
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    assert_eq!(e.dialect(), Dialect::Unknown);
    assert!(e.undecided.is_none(), "decided at the head");
    data(&mut e, TGI_STREAM);
    e.on_end(End::Complete, Instant::now());
    let told = told.take();
    assert!(told.iter().all(|l| !l.contains("tgi")), "{told:?}");
    assert_eq!(
        told.last().map(String::as_str),
        Some("finished unknown 0 tokens")
    );
    // Only a POST is TGI's route: a GET of `/` (a load balancer's check)
    // is not even asked.
    let request = Request::get("/").body(()).unwrap_or_default();
    let reading = ReadSettings {
        max_event_bytes: 1024,
        request_capture_bytes: 1024,
        dialects: Default::default(),
        label_headers: Vec::new(),
        request_id_headers: Vec::new(),
        slo_headers: false,
        max_logged_model_bytes: 128,
        template_opens_reasoning: Default::default(),
        learnt: Default::default(),
        capture_budget: Default::default(),
    };
    let (e, _upload) = Exchange::start(Instant::now(), &request, &reading, None);
    assert!(e.undecided.is_none());
}

/// A head of TEI's, as its router writes one on every successful answer
/// (`ResponseMetadata`'s headers): TGI's `x-compute-type` too, and the
/// tokens of the inputs it ran.
const TEI_HEAD: [(&str, &str); 9] = [
    ("content-type", "application/json"),
    ("x-compute-type", "gpu+optimized"),
    ("x-compute-time", "7"),
    ("x-compute-characters", "93"),
    ("x-compute-tokens", "27"),
    ("x-total-time", "7"),
    ("x-tokenization-time", "0"),
    ("x-queue-time", "2"),
    ("x-inference-time", "4"),
];

/// TEI's answer to an embedding model's `POST /` (`/embed`'s): a bare
/// array of vectors, which no dialect reads.
const TEI_VECTORS: &str = "[[0.0123,-0.0456,0.0789],[0.0321,-0.0654,0.0987]]";

#[test]
fn teis_answers_are_read_from_their_head_not_as_tgis() {
    // huggingface_hub's `feature_extraction` given a TEI URL posts to `/`,
    // as LangChain's `HuggingFaceEndpointEmbeddings` does; SageMaker to
    // `/invocations`; LlamaIndex's `TextEmbeddingsInference` to `/embed`.
    for path in [
        "/",
        "/invocations",
        "/embed",
        "/embed_all",
        "/predict",
        "/similarity",
        "/rerank",
    ] {
        let (told, mut e) = generate(path, None);
        head_with(&mut e, &TEI_HEAD);
        assert_eq!(e.dialect(), Dialect::Tei, "{path}");
        data(&mut e, TEI_VECTORS);
        e.complete(End::Complete, Instant::now());
        let told = told.take();
        let from = if path == "/rerank" {
            "rerank"
        } else {
            "unknown"
        };
        let started = format!("in {from}");
        assert_eq!(told.first(), Some(&started), "{path}");
        assert!(told.contains(&format!("moved {from} tei")), "{told:?}");
        assert!(no_parse_error(&told), "{path}: {told:?}");
        let t = &e.timeline;
        assert_eq!(t.outcome, Outcome::Ok, "{path}");
        assert_eq!(t.parse_errors, vec![], "{path}");
        assert_eq!(t.first_token, None, "{path}: nothing generated");
        assert_eq!(t.tokens.input, Some(27), "{path}: x-compute-tokens");
        assert_eq!(t.tokens.input_source, Some(CountSource::Usage), "{path}");
        assert_eq!(t.tokens.generated, 0, "{path}");
        assert_eq!(
            t.tokens.generated_source,
            Some(CountSource::Usage),
            "{path}"
        );
        assert_eq!(t.server.queue, Some(Duration::from_millis(2)), "{path}");
        // One forward pass over the inputs: prefill, not decode.
        assert_eq!(t.server.prefill, Some(Duration::from_millis(4)), "{path}");
        assert_eq!(t.server.decode, None, "{path}");
    }
    // A batch past `max_event_bytes` is no `event_too_large`: not read.
    let (told, mut e) = generate("/", None);
    head_with(&mut e, &TEI_HEAD);
    let row = format!("[{}]", vec!["-0.0123456"; 1024].join(","));
    let batch = format!("[{}]", vec![row; 128].join(","));
    assert!(batch.len() > 1024 * 1024);
    e.on_data(&Bytes::from(batch), Instant::now());
    e.complete(End::Complete, Instant::now());
    assert!(no_parse_error(&told.take()));
    assert_eq!(e.timeline.tokens.input, Some(27));
}

#[test]
fn teis_routes_answered_by_another_server_stay_unknown() {
    for path in ["/predict", "/embed", "/invocations"] {
        let (told, mut e) = generate(path, None);
        head_with(&mut e, &[("content-type", "application/json")]);
        assert_eq!(e.dialect(), Dialect::Unknown, "{path}");
        data(
            &mut e,
            r#"{"model":"m","usage":{"total_tokens":9},"results":[]}"#,
        );
        e.complete(End::Complete, Instant::now());
        assert!(told.take().iter().all(|l| !l.contains("tei")), "{path}");
        assert_eq!(e.timeline.tokens.input, None, "{path}: nothing read");
    }
    // vLLM and Infinity answer `/rerank` too, with no TEI head: the
    // Cohere-style answer, read.
    let (told, mut e) = generate("/rerank", None);
    assert_eq!(e.dialect(), Dialect::Rerank, "the path's");
    head_with(&mut e, &[("content-type", "application/json")]);
    assert_eq!(e.dialect(), Dialect::Rerank);
    data(
        &mut e,
        r#"{"model":"m","usage":{"total_tokens":9},"results":[]}"#,
    );
    e.complete(End::Complete, Instant::now());
    assert!(told.take().iter().all(|l| !l.contains("tei")));
    assert_eq!(e.timeline.tokens.input, Some(9));
    assert_eq!(e.timeline.response_model.as_deref(), Some("m"));
    // TGI answers SageMaker's route with its generate, chat or
    // completions handler, as the body asks, its head the same: not read.
    let (told, mut e) = generate("/invocations", None);
    tgi_head(&mut e, "text/event-stream");
    assert_eq!(e.dialect(), Dialect::Unknown);
    data(&mut e, "data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n");
    e.complete(End::Complete, Instant::now());
    assert!(no_parse_error(&told.take()));
    // A TEI head on a path of no known endpoint (its Vertex route) gives
    // no counts: `unknown` is timed only.
    let (_, mut e) = generate("/vertex", None);
    head_with(&mut e, &TEI_HEAD);
    e.complete(End::Complete, Instant::now());
    assert_eq!(e.timeline.dialect, Dialect::Unknown);
    assert_eq!(e.timeline.tokens.input, None);
    // A TEI error names no router (no `x-compute-type`): it stays unknown,
    // its body unread.
    let (_, mut e) = generate("/", None);
    head_of(&mut e, 413, &[("content-type", "application/json")]);
    assert_eq!(e.dialect(), Dialect::Unknown);
    // A TEI head on `/generate` is no TGI's: nothing tells there.
    let (_, mut e) = generate("/generate", None);
    head_with(&mut e, &TEI_HEAD);
    assert_eq!(e.dialect(), Dialect::Tgi, "the path's, until a body tells");
}

#[test]
fn teis_paths_start_under_the_server_last_seen_answering_them() {
    let reading = shared_settings();
    let first = |told: &Arc<Endpoints>| told.take().first().cloned();
    for (path, path_dialect) in [
        ("/embed", "unknown"),
        ("/", "unknown"),
        ("/rerank", "rerank"),
    ] {
        // Before any answer told, the path's.
        let (told, mut e) = generate_with(&reading, path);
        assert_eq!(first(&told), Some(format!("in {path_dialect}")), "{path}");
        head_with(&mut e, &TEI_HEAD);
        e.complete(End::Complete, Instant::now());
        // TEI answered: the next request starts under `tei`, and a JSON
        // error (TEI's "Model is overloaded" 429 carries no router header)
        // stays there, with its gauges, counting no tokens (TEI ran none,
        // and its request is not read).
        let (told, mut e) = generate_with(&reading, path);
        assert_eq!(first(&told).as_deref(), Some("in tei"), "{path}");
        head_of(&mut e, 429, &[("content-type", "application/json")]);
        assert_eq!(e.dialect(), Dialect::Tei, "{path}");
        data(
            &mut e,
            r#"{"error":"Model is overloaded","error_type":"overloaded"}"#,
        );
        e.complete(End::Complete, Instant::now());
        assert!(
            told.take().iter().all(|l| !l.contains(path_dialect)),
            "{path}"
        );
        assert_eq!(e.timeline.tokens.input, None, "{path}: nothing ran");
        // A client gone before the head stays there too.
        let (told, e) = generate_with(&reading, path);
        drop(e);
        assert_eq!(
            told.take().last().map(String::as_str),
            Some("finished tei 0 tokens"),
            "{path}"
        );
        // A plain-text refusal (axum's, to a scanner's junk body) is not
        // the server's error shape: the path's.
        let (_, mut e) = generate_with(&reading, path);
        head_of(
            &mut e,
            422,
            &[("content-type", "text/plain; charset=utf-8")],
        );
        assert_eq!(e.dialect().as_str(), path_dialect, "{path}");
        e.complete(End::Complete, Instant::now());
        // Another server's successful answer teaches it back.
        let (_, mut e) = generate_with(&reading, path);
        head_with(&mut e, &[("content-type", "application/json")]);
        assert_eq!(e.dialect().as_str(), path_dialect, "{path}");
        e.complete(End::Complete, Instant::now());
        let (told, _e) = generate_with(&reading, path);
        assert_eq!(first(&told), Some(format!("in {path_dialect}")), "{path}");
    }
}

#[test]
fn generate_starts_under_the_server_last_seen_answering_it() {
    let reading = shared_settings();
    let first = |told: &Arc<Endpoints>| told.take().first().cloned();
    // Before any answer told, TGI's, the path's.
    let (told, mut e) = generate_with(&reading, "/generate");
    assert_eq!(first(&told).as_deref(), Some("in tgi"));
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    data(&mut e, SGLANG);
    e.on_end(End::Complete, Instant::now());
    // An SGLang stream told: the next request starts under `sglang`, and
    // one whose answer never tells (its client left before the head; a
    // refusal that names no server) stays there, as do its gauges.
    let (told, e) = generate_with(&reading, "/generate");
    assert_eq!(first(&told).as_deref(), Some("in sglang"));
    drop(e);
    let lines = told.take();
    assert_eq!(
        lines.last().map(String::as_str),
        Some("finished sglang 0 tokens")
    );
    assert!(lines.iter().all(|l| !l.contains("tgi")), "{lines:?}");
    let (told, mut e) = generate_with(&reading, "/generate");
    head_of(&mut e, 401, &[("content-type", "application/json")]);
    data(&mut e, r#"{"error":"Unauthorized"}"#);
    e.on_end(End::Complete, Instant::now());
    let lines = told.take();
    assert_eq!(
        lines.last().map(String::as_str),
        Some("finished sglang 0 tokens")
    );
    assert!(lines.iter().all(|l| !l.contains("tgi")), "{lines:?}");
    // Once a successful answer has shown the server, an error body of the
    // other's shape neither moves its request nor teaches anything: a
    // gateway in front (a rate limiter, an auth proxy) may have written it.
    // Before any, it decides its own request (and teaches nothing).
    let tgi_error = r#"{"error":"Model is overloaded","error_type":"overloaded"}"#;
    let (told, mut e) = generate_with(&reading, "/generate");
    head_of(&mut e, 429, &[("content-type", "application/json")]);
    data(&mut e, tgi_error);
    e.on_end(End::Complete, Instant::now());
    assert_eq!(
        told.take().last().map(String::as_str),
        Some("finished sglang 0 tokens")
    );
    assert_eq!(reading.learnt.generate.get(), Dialect::Sglang);
    let fresh = shared_settings();
    let (told, mut e) = generate_with(&fresh, "/generate");
    head_of(&mut e, 429, &[("content-type", "application/json")]);
    data(&mut e, r#"{"error":{"message":"overloaded"}}"#);
    e.on_end(End::Complete, Instant::now());
    assert_eq!(
        told.take().last().map(String::as_str),
        Some("finished sglang 0 tokens")
    );
    assert!(!fresh.learnt.generate.known());
    let (_, mut e) = generate_with(&reading, "/generate");
    tgi_head(&mut e, "application/json");
    e.on_end(End::Complete, Instant::now());
    assert_eq!(reading.learnt.generate.get(), Dialect::Tgi);
}

/// llama.cpp's server answers `/api/chat` (for the clients that speak
/// Ollama's API to it) as it answers `/v1/chat/completions`.
const LLAMACPP_CHAT: &str = "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":null}}],\"created\":1,\"id\":\"chatcmpl-a\",\"model\":\"qwen\",\"object\":\"chat.completion.chunk\"}\n\ndata: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\" Paris\"}}],\"created\":1,\"id\":\"chatcmpl-a\",\"model\":\"qwen\",\"object\":\"chat.completion.chunk\"}\n\ndata: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"delta\":{\"content\":\".\"}}],\"created\":1,\"id\":\"chatcmpl-a\",\"model\":\"qwen\",\"object\":\"chat.completion.chunk\"}\n\ndata: {\"choices\":[{\"finish_reason\":\"stop\",\"index\":0,\"delta\":{}}],\"created\":1,\"id\":\"chatcmpl-a\",\"model\":\"qwen\",\"object\":\"chat.completion.chunk\",\"usage\":{\"completion_tokens\":2,\"prompt_tokens\":9,\"total_tokens\":11}}\n\ndata: [DONE]\n\n";

const OLLAMA_CHAT: &str = "{\"model\":\"qwen\",\"created_at\":\"2026-12-05T21:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\" Paris\"},\"done\":false}\n{\"model\":\"qwen\",\"created_at\":\"2026-12-05T21:00:00Z\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done_reason\":\"stop\",\"done\":true,\"prompt_eval_count\":9,\"eval_count\":3}\n";

#[test]
fn an_event_stream_on_api_chat_is_llamacpps_openai_chat_from_its_head() {
    let reading = shared_settings();
    let first = |told: &Arc<Endpoints>| told.take().first().cloned();
    // Ollama's NDJSON: the path's dialect, nothing moves.
    let (told, mut e) = generate_with(&reading, "/api/chat");
    head_with(&mut e, &[("content-type", "application/x-ndjson")]);
    assert_eq!(e.dialect(), Dialect::Ollama);
    data(&mut e, OLLAMA_CHAT);
    e.on_end(End::Complete, Instant::now());
    let lines = told.take();
    assert_eq!(lines.first().map(String::as_str), Some("in ollama"));
    assert_eq!(
        lines.last().map(String::as_str),
        Some("finished ollama 3 tokens")
    );
    assert!(lines.iter().all(|l| !l.contains("openai")), "{lines:?}");
    // llama.cpp's SSE: moved at the head, before any milestone, and read
    // as OpenAI chat (its usage counted).
    let (told, mut e) = generate_with(&reading, "/api/chat");
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    assert_eq!(e.dialect(), Dialect::OpenAiChat);
    data(&mut e, LLAMACPP_CHAT);
    e.on_end(End::Complete, Instant::now());
    let lines = told.take();
    let moved = lines.iter().position(|l| l == "moved ollama openai_chat");
    let milestone = lines.iter().position(|l| l.starts_with("Re"));
    assert!(moved.is_some() && moved < milestone, "{lines:?}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("finished openai_chat 2 tokens")
    );
    // Learnt: the next request starts there, and one whose client left
    // before the head stays there.
    assert_eq!(reading.learnt.api_chat.get(), Dialect::OpenAiChat);
    let (told, e) = generate_with(&reading, "/api/chat");
    assert_eq!(first(&told).as_deref(), Some("in openai_chat"));
    drop(e);
    assert!(told.take().iter().all(|l| !l.contains("ollama")));
    // An Ollama-shaped error (a gateway's) then stays with it.
    let (told, mut e) = generate_with(&reading, "/api/chat");
    head_of(&mut e, 401, &[("content-type", "application/json")]);
    data(&mut e, r#"{"error":"unauthorized"}"#);
    e.on_end(End::Complete, Instant::now());
    assert_eq!(
        told.take().last().map(String::as_str),
        Some("finished openai_chat 0 tokens")
    );
    // `/generate`'s learnt server is another's.
    assert_eq!(reading.learnt.generate.get(), Dialect::Tgi);
    assert!(!reading.learnt.generate.known());
    // Only a POST is asked: a CORS preflight or a GET is the path's.
    let request = Request::get("/api/chat").body(()).unwrap_or_default();
    let (e, _upload) = Exchange::start(Instant::now(), &request, &reading, None);
    assert!(e.undecided.is_none());
    assert_eq!(e.dialect(), Dialect::Ollama);
}

#[test]
fn a_whole_body_on_api_chat_tells_which_server_wrote_it_at_its_end() {
    let llamacpp = r#"{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","content":" Paris."}}],"created":1,"model":"qwen","object":"chat.completion","usage":{"completion_tokens":4,"prompt_tokens":9,"total_tokens":13},"id":"chatcmpl-b"}"#;
    let ollama = r#"{"model":"qwen","created_at":"2026-12-05T21:00:00Z","message":{"role":"assistant","content":" Paris."},"done_reason":"stop","done":true,"prompt_eval_count":9,"eval_count":3}"#;
    for (body, dialect, tokens) in [(llamacpp, "openai_chat", 4), (ollama, "ollama", 3)] {
        let (told, mut e) = generate("/api/chat", None);
        head_with(
            &mut e,
            &[("content-type", "application/json; charset=utf-8")],
        );
        data(&mut e, body);
        e.on_end(End::Complete, Instant::now());
        let told = told.take();
        let moved = told.iter().any(|l| l == "moved ollama openai_chat");
        assert_eq!(moved, dialect == "openai_chat", "{told:?}");
        assert_eq!(
            told.last().map(String::as_str),
            Some(format!("finished {dialect} {tokens} tokens").as_str())
        );
    }
    // Error bodies: llama.cpp's `error` is an object, Ollama's a string;
    // each decides its own request, counting nothing.
    for (body, dialect) in [
        (
            r#"{"error":{"code":400,"message":"bad","type":"invalid_request_error"}}"#,
            "openai_chat",
        ),
        (
            r#"{"error":"model \"x\" not found, try pulling it first"}"#,
            "ollama",
        ),
    ] {
        let (told, mut e) = generate("/api/chat", None);
        head_of(&mut e, 400, &[("content-type", "application/json")]);
        data(&mut e, body);
        e.on_end(End::Complete, Instant::now());
        let told = told.take();
        assert!(no_parse_error(&told), "{told:?}");
        assert_eq!(
            told.last().map(String::as_str),
            Some(format!("finished {dialect} 0 tokens").as_str())
        );
    }
    // Forced, it is not asked.
    let (told, mut e) = generate("/api/chat", Some(Dialect::Ollama));
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    assert_eq!(e.dialect(), Dialect::Ollama);
    e.on_end(End::Complete, Instant::now());
    assert!(told.take().iter().all(|l| !l.contains("openai")));
}

/// An exchange on `/v1/embeddings` whose whole answer is JSON, compressed
/// with `coding` unless `identity`.
fn embeddings(coding: &str) -> Exchange {
    let request = Request::post("/v1/embeddings").body(()).unwrap_or_default();
    let (mut e, _upload) = Exchange::start(Instant::now(), &request, &shared_settings(), None);
    let (head, ()) = Response::builder()
        .header("content-type", "application/json")
        .header("content-encoding", coding)
        .body(())
        .unwrap_or_default()
        .into_parts();
    e.on_response_head(&head, Instant::now());
    e
}

/// An embeddings answer in OpenAI's order, `model` and `usage` after
/// `vectors` vectors of 1,536 numbers (about 20 KiB each).
fn embeddings_answer(vectors: usize) -> String {
    // Each vector its own: repeated, they would compress as a bomb does.
    let vector = |i: usize| {
        (0..1536)
            .map(|d| format!("{:.9}", ((d * 7 + i * 13) as f64 * 0.37).sin() / 9.0))
            .collect::<Vec<_>>()
            .join(",")
    };
    let data = (0..vectors)
        .map(|i| {
            let vector = vector(i);
            format!(r#"{{"object":"embedding","index":{i},"embedding":[{vector}]}}"#)
        })
        .collect::<Vec<_>>()
        .join(",");
    format!(
        r#"{{"object":"list","data":[{data}],"model":"text-embedding-3-large","usage":{{"prompt_tokens":4021,"total_tokens":4021}}}}"#
    )
}

/// A batch's embeddings answer of MiBs, past `max_event_bytes` (1 MiB
/// here), plain or compressed: its usage and model are read from its
/// last bytes, with no parse error; it generated nothing. Cut short (the
/// upstream failed; its outcome says so), it is not read, and not counted
/// as unreadable: its last bytes, the usage's own object, are no end.
#[test]
fn an_embeddings_answer_past_max_event_bytes_is_read_by_its_ends() {
    let answer = embeddings_answer(200);
    assert!(answer.len() > 3 << 20, "{}", answer.len());
    for coding in ["identity", "gzip", "zstd"] {
        let mut e = embeddings(coding);
        assert_eq!(e.timeline.dialect, Dialect::OpenAiEmbeddings);
        let frames = match coding {
            "identity" => vec![Bytes::from(answer.clone())],
            _ => {
                let (mut frames, trailer) = compressed_frames(coding, &[&answer]);
                frames.push(trailer);
                frames
            }
        };
        for frame in &frames {
            for piece in frame.chunks(16 * 1024) {
                e.on_data(&Bytes::copy_from_slice(piece), Instant::now());
            }
        }
        e.complete(End::Complete, Instant::now());
        let t = &e.timeline;
        assert_eq!(t.parse_errors, vec![], "{coding}");
        assert_eq!(t.tokens.input, Some(4021), "{coding}");
        assert_eq!(t.tokens.input_source, Some(CountSource::Usage), "{coding}");
        assert_eq!(t.tokens.generated, 0, "{coding}");
        assert_eq!(t.response_model.as_deref(), Some("text-embedding-3-large"));
    }
    let mut e = embeddings("identity");
    e.on_data(
        &Bytes::from(answer[..answer.len() - 1].to_owned()),
        Instant::now(),
    );
    e.complete(End::Failed { timeout: false }, Instant::now());
    assert_eq!(e.timeline.parse_errors, vec![]);
    assert_eq!(e.timeline.tokens.input, None);
    assert_eq!(e.timeline.response_model, None);
}

/// A whole JSON answer cut short, by the client leaving or the upstream
/// failing, is not read and not counted as unreadable: its outcome says
/// what happened (as a cut compressed body's does).
#[test]
fn a_whole_body_cut_short_is_no_parse_error() {
    for end in [End::Dropped, End::Failed { timeout: false }] {
        let mut e = compressed("application/json", "identity");
        data(&mut e, r#"{"choices":[{"message":{"content":"half an ans"#);
        e.complete(end, Instant::now());
        assert_eq!(e.timeline.parse_errors, vec![], "{end:?}");
        assert_eq!(e.timeline.tokens.generated_source, None, "{end:?}");
    }
}

/// Anthropic's `message_start` reports `output_tokens: 1` before anything
/// is generated: a stream that ends before `message_delta` (a user's stop,
/// an `error` event, a cut) is counted by its events, with its TPOT,
/// not as one token.
#[test]
fn an_anthropic_stream_cut_before_its_count_is_counted_by_its_events() {
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":12,\"output_tokens\":1}}}\n\n";
    let text = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ab\"}}\n\n";
    let error = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    for (last, end) in [
        (None, End::Failed { timeout: false }),
        (None, End::Dropped),
        (Some(error), End::Complete),
    ] {
        let (_told, mut e, _upload) = told_exchange("/v1/messages");
        head(&mut e, "text/event-stream");
        let t0 = Instant::now();
        e.on_data(&Bytes::from_static(start.as_bytes()), t0);
        for i in 1..=4u64 {
            let at = t0 + Duration::from_millis(20 * i);
            e.on_data(&Bytes::from_static(text.as_bytes()), at);
        }
        if let Some(last) = last {
            e.on_data(
                &Bytes::from_static(last.as_bytes()),
                t0 + Duration::from_millis(90),
            );
        }
        e.complete(end, t0 + Duration::from_millis(100));
        let t = &e.timeline;
        assert_eq!(t.tokens.generated, 4, "{end:?}");
        assert_eq!(t.tokens.generated_source, Some(CountSource::Events));
        assert_eq!(
            t.tokens.input,
            Some(12),
            "the input is still message_start's"
        );
        assert_eq!(t.tpot(), Some(Duration::from_millis(20)), "{end:?}");
    }
}

/// Anthropic's `message_delta` may repeat `input_tokens` without the cache
/// fields `message_start` had (null, or absent): the prompt stays the
/// whole prompt, cache reads and writes included, and the cached count
/// stays.
#[test]
fn an_anthropic_delta_without_the_cache_fields_keeps_the_whole_prompt() {
    let start = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude\",\"usage\":{\"input_tokens\":25,\"cache_creation_input_tokens\":3,\"cache_read_input_tokens\":5,\"output_tokens\":1}}}\n\n";
    let text = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"ab\"}}\n\n";
    for usage in [
        r#"{"input_tokens":25,"output_tokens":2}"#,
        r#"{"input_tokens":25,"cache_creation_input_tokens":null,"cache_read_input_tokens":null,"output_tokens":2}"#,
        r#"{"output_tokens":2}"#,
        r#"{"input_tokens":25,"cache_creation_input_tokens":3,"cache_read_input_tokens":5,"output_tokens":2}"#,
        // A gateway's explicit zeros beside the smaller count.
        r#"{"input_tokens":25,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}"#,
    ] {
        let (_told, mut e, _upload) = told_exchange("/v1/messages");
        head(&mut e, "text/event-stream");
        let t0 = Instant::now();
        e.on_data(&Bytes::from_static(start.as_bytes()), t0);
        for i in 1..=2u64 {
            let at = t0 + Duration::from_millis(20 * i);
            e.on_data(&Bytes::from_static(text.as_bytes()), at);
        }
        let delta = format!(
            "event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\"}},\"usage\":{usage}}}\n\n"
        );
        e.on_data(&Bytes::from(delta), t0 + Duration::from_millis(50));
        e.complete(End::Complete, t0 + Duration::from_millis(60));
        let t = &e.timeline;
        assert_eq!(t.tokens.input, Some(33), "{usage}");
        assert_eq!(t.tokens.cached_input, Some(5), "{usage}");
        assert_eq!(t.tokens.generated, 2, "{usage}");
    }
}

/// `/completions`: llama.cpp's native completion, and OpenAI's legacy
/// completions where a proxy serves OpenAI's routes without `/v1`
/// (LiteLLM's). Both stream SSE, so the first event tells, before it is
/// read; a whole body tells at its end.
#[test]
fn the_first_event_on_completions_tells_which_api_answered() {
    const OPENAI: &str = "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\"Hi\",\"finish_reason\":null}]}\n\n\
        data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" there\",\"finish_reason\":\"stop\"}]}\n\n\
        data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2,\"total_tokens\":5}}\n\n\
        data: [DONE]\n\n";
    const LLAMACPP: &str = "data: {\"content\":\"Hi\",\"stop\":false,\"tokens_predicted\":1}\n\n\
        data: {\"content\":\"\",\"stop\":true,\"model\":\"m\",\"tokens_predicted\":3,\"tokens_evaluated\":4,\"stop_type\":\"eos\"}\n\n";
    let reading = shared_settings();
    let (told, mut e) = generate_with(&reading, "/completions");
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    assert_eq!(e.dialect(), Dialect::LlamaCpp, "undecided: the path's");
    data(&mut e, OPENAI);
    e.on_end(End::Complete, Instant::now());
    let lines = told.take();
    let moved = lines
        .iter()
        .position(|l| l == "moved llamacpp openai_completions");
    let milestone = lines.iter().position(|l| l.starts_with("Re"));
    assert!(moved.is_some() && moved < milestone, "{lines:?}");
    assert!(no_parse_error(&lines), "{lines:?}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("finished openai_completions 2 tokens")
    );
    // Learnt: the next request starts there, and a llama.cpp stream moves
    // it back.
    assert_eq!(reading.learnt.completions.get(), Dialect::OpenAiCompletions);
    let (told, mut e) = generate_with(&reading, "/completions");
    head_with(&mut e, &[("content-type", "text/event-stream")]);
    data(&mut e, LLAMACPP);
    e.on_end(End::Complete, Instant::now());
    let lines = told.take();
    assert_eq!(
        lines.first().map(String::as_str),
        Some("in openai_completions")
    );
    assert!(no_parse_error(&lines), "{lines:?}");
    assert_eq!(
        lines.last().map(String::as_str),
        Some("finished llamacpp 3 tokens")
    );
    // A whole body tells at its end.
    let body = r#"{"id":"cmpl-2","object":"text_completion","model":"m","choices":[{"index":0,"text":"Hi","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}"#;
    let (told, mut e) = generate_with(&reading, "/completions");
    head_with(&mut e, &[("content-type", "application/json")]);
    data(&mut e, body);
    e.on_end(End::Complete, Instant::now());
    assert_eq!(
        told.take().last().map(String::as_str),
        Some("finished openai_completions 1 tokens")
    );
    // `/completion` is llama.cpp's alone.
    let request = Request::post("/completion").body(()).unwrap_or_default();
    let (e, _upload) = Exchange::start(Instant::now(), &request, &reading, None);
    assert!(e.undecided.is_none());
    assert_eq!(e.dialect(), Dialect::LlamaCpp);
}

/// The events of a stream that `events` (payloads) make, read for a
/// request on `path` with `body`, under `template_opens_reasoning` =
/// `globs`, one event every 10 ms: which events were answer (by index,
/// from TTFO) and how many were reasoning.
fn opened(path: &str, body: &'static str, globs: &[&str], events: &[&str]) -> (Option<u64>, u64) {
    let request = Request::post(path).body(()).unwrap_or_default();
    let reading = ReadSettings {
        template_opens_reasoning: globs.iter().map(|g| g.to_string()).collect(),
        ..shared_settings()
    };
    let (mut e, up) = Exchange::start(Instant::now(), &request, &reading, None);
    upload(up, body);
    head(&mut e, "text/event-stream");
    let start = Instant::now();
    let at = |i: usize| start + Duration::from_millis(10 * i as u64);
    for (i, event) in events.iter().enumerate() {
        e.on_data(&Bytes::from(format!("data: {event}\n\n")), at(i + 1));
    }
    e.on_data(
        &Bytes::from_static(b"data: [DONE]\n\n"),
        at(events.len() + 1),
    );
    let t = &e.timeline;
    let answer_at = t
        .first_output
        .map(|o| (o.duration_since(start).as_millis() / 10) as u64 - 1);
    let mut tokens = t.tokens.clone();
    tokens.settle(&t.usage, &t.request);
    (answer_at, tokens.reasoning)
}

fn content(text: &str) -> String {
    format!(r#"{{"choices":[{{"delta":{{"content":{text:?}}}}}]}}"#)
}

/// DeepSeek-R1's template ends the prompt with `<think>`: its answer
/// shows only the close. Named in `template_opens_reasoning` (by the
/// request, or by the response when the request names none, before its
/// first text), the text before the close is reasoning; unnamed, or for
/// a model that does not match, it is answer, as before.
#[test]
fn a_model_whose_template_opens_think_reasons_until_the_close() {
    let chat = "/v1/chat/completions";
    let [role, okay, so, close, hi] = [
        r#"{"model":"deepseek-r1-distill","choices":[{"delta":{"role":"assistant","content":""}}]}"#
            .to_owned(),
        content("Okay"),
        content(", so"),
        content("</think>"),
        content("Hi"),
    ];
    let events = [&role, &okay, &so, &close, &hi].map(String::as_str);
    let named = r#"{"model":"deepseek-r1-distill","stream":true,"messages":[]}"#;
    assert_eq!(opened(chat, named, &["*-r1-*"], &events), (Some(4), 3));
    assert_eq!(opened(chat, named, &["qwq*"], &events), (Some(1), 0));
    assert_eq!(opened(chat, named, &[], &events), (Some(1), 0));
    // The request names no model: the role chunk names it, before text.
    let unnamed = r#"{"stream":true,"messages":[]}"#;
    assert_eq!(
        opened(chat, unnamed, &["deepseek-r1*"], &events),
        (Some(4), 3)
    );
    // vLLM with its reasoning parser: the reasoning comes in its field,
    // and the content is answer.
    let field = r#"{"choices":[{"delta":{"reasoning_content":"Okay"}}]}"#;
    let parsed = [role.as_str(), field, hi.as_str()];
    assert_eq!(opened(chat, named, &["*-r1-*"], &parsed), (Some(2), 1));
}

/// A raw prompt that ends in `<think>` (the client applied the template)
/// opens the reasoning on the raw-text routes, with nothing configured;
/// on a chat route a `prompt` field is no prompt the model continues.
#[test]
fn a_raw_prompt_ending_in_think_reasons_until_the_close() {
    let text = |t: &str| format!(r#"{{"choices":[{{"text":{t:?}}}]}}"#);
    let events = [text("Okay"), text("</think>"), text("Hi")];
    let events = events.each_ref().map(String::as_str);
    let opening = r#"{"model":"m","stream":true,"prompt":"<｜User｜>2+2<｜Assistant｜><think>\n"}"#;
    let plain = r#"{"model":"m","stream":true,"prompt":"2+2="}"#;
    assert_eq!(
        opened("/v1/completions", opening, &[], &events),
        (Some(2), 2)
    );
    assert_eq!(opened("/v1/completions", plain, &[], &events), (Some(0), 0));
    let chat = [content("Okay"), content("</think>"), content("Hi")];
    let chat = chat.each_ref().map(String::as_str);
    assert_eq!(
        opened("/v1/chat/completions", opening, &[], &chat),
        (Some(0), 0)
    );
    // A model named in `template_opens_reasoning` is a chat's template: a
    // raw prompt is its own, and one that does not end in the tag is not
    // opened, nor is vLLM's token-in route, which carries no text.
    assert_eq!(
        opened("/v1/completions", plain, &["m"], &events),
        (Some(0), 0)
    );
    let ids = |ids: &str| format!(r#"{{"choices":[{{"index":0,"token_ids":{ids}}}]}}"#);
    let tokens = [ids("[791]"), ids("[6864,315]")];
    let tokens = tokens.each_ref().map(String::as_str);
    let token_prompt = r#"{"model":"m","token_ids":[1,2],"sampling_params":{"max_tokens":3}}"#;
    assert_eq!(
        opened("/inference/v1/generate", token_prompt, &["m"], &tokens),
        (Some(0), 0)
    );
    // The request decides, before the first event, when it names no model
    // (vLLM's and llama.cpp's servers take that; llama.cpp names it only
    // on its last event) and on `/completions`, a path two servers share.
    let unnamed = r#"{"stream":true,"prompt":"<think>\n"}"#;
    assert_eq!(
        opened("/v1/completions", unnamed, &[], &events),
        (Some(2), 2)
    );
    assert_eq!(opened("/completions", opening, &[], &events), (Some(2), 2));
    let llama = [
        r#"{"index":0,"content":"Okay","stop":false,"tokens_predicted":1}"#,
        r#"{"index":0,"content":"</think>","stop":false,"tokens_predicted":2}"#,
        r#"{"index":0,"content":"Hi","stop":false,"tokens_predicted":3}"#,
        r#"{"index":0,"content":"","stop":true,"model":"r1.gguf","tokens_predicted":3}"#,
    ];
    assert_eq!(opened("/completion", unnamed, &[], &llama), (Some(2), 2));
}

/// A whole answer on a path two servers share (SGLang's `/generate`, no
/// router head to tell it from TGI's) is read once its body tells which
/// answered: a raw prompt that opened the reasoning is known by then, and
/// an answer cut while thinking is all reasoning.
#[test]
fn a_whole_answer_on_a_shared_path_cut_while_thinking_is_reasoning() {
    let request = Request::post("/generate").body(()).unwrap_or_default();
    let reading = shared_settings();
    let (mut e, up) = Exchange::start(Instant::now(), &request, &reading, None);
    upload(
        up,
        r#"{"text":"2+2?<think>\n","sampling_params":{"max_new_tokens":4}}"#,
    );
    head(&mut e, "application/json");
    let body = r#"{"text":"Okay, so","output_ids":[1,2,3,4],"meta_info":{"id":"x","finish_reason":{"type":"length","length":4},"prompt_tokens":5,"completion_tokens":4}}"#;
    e.on_data(&Bytes::from_static(body.as_bytes()), Instant::now());
    e.complete(End::Complete, Instant::now());
    let t = &e.timeline;
    assert_eq!(t.dialect, Dialect::Sglang);
    assert_eq!(
        (t.tokens.generated, t.tokens.reasoning),
        (4, 4),
        "{:?}",
        t.tokens
    );
}

/// The copies of request bodies in flight share `request_capture_total_bytes`:
/// a body whose copy would pass what is left is not read (counted as
/// `request_over_budget`), the others are, and a copy gives its share back
/// once its request was read, failed or was dropped.
#[test]
fn request_copies_share_one_budget_and_give_it_back() {
    let reading = ReadSettings {
        request_capture_bytes: 1024,
        capture_budget: CaptureBudget::new(1024),
        ..shared_settings()
    };
    let start = |reading: &ReadSettings| {
        let request = Request::post("/v1/chat/completions")
            .body(())
            .unwrap_or_default();
        Exchange::start(Instant::now(), &request, reading, None)
    };
    let part = |text: String| Bytes::from(text);
    // A first body, half sent, holds what its copy's capacity took.
    let (_first, mut first_up) = start(&reading);
    first_up.on_data(
        &part(format!(r#"{{"model":"first","x":"{}"#, "a".repeat(600))),
        Instant::now(),
    );
    let held = reading.capture_budget.held();
    assert!((600..=1024).contains(&held), "{held}");
    // A second does not fit beside it: forwarded unread, and counted.
    let (mut second, mut second_up) = start(&reading);
    second_up.on_data(
        &part(format!(r#"{{"model":"second","x":"{}"}}"#, "b".repeat(500))),
        Instant::now(),
    );
    assert_eq!(
        reading.capture_budget.held(),
        held,
        "the second took nothing"
    );
    second_up.on_end(End::Complete, Instant::now());
    head(&mut second, "text/event-stream");
    assert_eq!(second.timeline.request.model, None);
    assert_eq!(
        second.timeline.parse_errors,
        [ParseError::RequestOverBudget]
    );
    // The first ends, is read, and gives its share back.
    first_up.on_data(&part(r#""}"#.to_owned()), Instant::now());
    first_up.on_end(End::Complete, Instant::now());
    assert_eq!(reading.capture_budget.held(), 0);
    // A third, sent whole now, is read; one dropped unfinished gives
    // its share back too.
    let (mut third, third_up) = start(&reading);
    upload(third_up, r#"{"model":"third"}"#);
    head(&mut third, "text/event-stream");
    assert_eq!(third.timeline.request.model.as_deref(), Some("third"));
    assert!(third.timeline.parse_errors.is_empty());
    let (_fourth, mut fourth_up) = start(&reading);
    fourth_up.on_data(&part("{".repeat(300)), Instant::now());
    assert!(reading.capture_budget.held() >= 300);
    drop(fourth_up);
    assert_eq!(reading.capture_budget.held(), 0);
    // Past `request_capture_bytes` is not the budget's doing: not counted.
    let (mut big, big_up) = start(&reading);
    let body: &'static str =
        Box::leak(format!(r#"{{"x":"{}"}}"#, "c".repeat(2000)).into_boxed_str());
    upload(big_up, body);
    head(&mut big, "text/event-stream");
    assert!(big.timeline.parse_errors.is_empty());
    assert_eq!(reading.capture_budget.held(), 0);
}

/// A copy doubles as a `Vec` does while the budget has room, and grows to
/// just what it needs when it has not; a body that says it is longer than
/// `request_capture_bytes` takes nothing, as it would never be read.
#[test]
fn a_copy_grows_to_what_it_needs_when_doubling_has_no_room() {
    let reading = ReadSettings {
        request_capture_bytes: 1000,
        capture_budget: CaptureBudget::new(1000),
        ..shared_settings()
    };
    let mut other = reading.capture_budget.holder();
    assert!(other.grow(100));
    let request = Request::post("/v1/chat/completions")
        .body(())
        .unwrap_or_default();
    let (mut e, mut up) = Exchange::start(Instant::now(), &request, &reading, None);
    let body = format!(r#"{{"model":"m","x":"{}"}}"#, "a".repeat(780));
    let (first, rest) = body.as_bytes().split_at(500);
    up.on_data(&Bytes::copy_from_slice(first), Instant::now());
    assert_eq!(reading.capture_budget.held(), 600);
    // Doubled (1,000) would pass the budget; what it needs (800) fits.
    up.on_data(&Bytes::copy_from_slice(rest), Instant::now());
    assert_eq!(reading.capture_budget.held(), 100 + body.len());
    up.on_end(End::Complete, Instant::now());
    head(&mut e, "text/event-stream");
    assert_eq!(e.timeline.request.model.as_deref(), Some("m"));
    assert!(e.timeline.parse_errors.is_empty());
    // Declared longer than the cap: not copied, nothing taken or counted.
    let long = Request::post("/v1/chat/completions")
        .header("content-length", "1001")
        .body(())
        .unwrap_or_default();
    let (mut e, mut up) = Exchange::start(Instant::now(), &long, &reading, None);
    up.on_data(&Bytes::from_static(b"{\"model\":\"m\""), Instant::now());
    assert_eq!(reading.capture_budget.held(), 100);
    up.on_end(End::Complete, Instant::now());
    head(&mut e, "text/event-stream");
    assert_eq!(e.timeline.request.model, None);
    assert!(e.timeline.parse_errors.is_empty());
}

/// A request that names no model: the response's first event names it,
/// and when that event and the answer's first text come in one frame
/// (as a server that writes two events at once, or TCP, joins them), the
/// name still decides before the text is split.
#[test]
fn a_model_named_by_the_response_in_the_frame_of_the_first_text_opens_it() {
    let request = Request::post("/v1/chat/completions")
        .body(())
        .unwrap_or_default();
    let reading = ReadSettings {
        template_opens_reasoning: ["sim-r1*".to_owned()].into_iter().collect(),
        ..shared_settings()
    };
    let (mut e, up) = Exchange::start(Instant::now(), &request, &reading, None);
    upload(up, r#"{"stream":true,"messages":[]}"#);
    head(&mut e, "text/event-stream");
    let role = r#"{"model":"sim-r1","choices":[{"delta":{"role":"assistant","content":""}}]}"#;
    let frame = format!(
        "data: {role}\n\ndata: {}\n\ndata: {}\n\n",
        content("Okay"),
        content("</think>")
    );
    let start = Instant::now();
    e.on_data(&Bytes::from(frame), start + Duration::from_millis(10));
    e.on_data(
        &Bytes::from(format!("data: {}\n\n", content("Hi"))),
        start + Duration::from_millis(20),
    );
    let t = &e.timeline;
    assert_eq!(t.model.as_deref(), Some("sim-r1"));
    assert!(
        t.first_output > t.first_token,
        "{:?} {:?}",
        t.first_token,
        t.first_output
    );
    assert!(t.parse_errors.is_empty(), "{:?}", t.parse_errors);
}

/// A response whose head has no `content-type` (Starlette's
/// `StreamingResponse` without a `media_type`) is read as its first bytes
/// show, however they are cut: an SSE stream, each event at its time, or a
/// whole JSON body; anything else is not read. Before 2026-12-07 none was
/// read, and nothing was counted.
#[test]
fn a_body_without_a_content_type_is_read_as_its_first_bytes_show() {
    let stream = format!("\n{SAY}{SAY}data: [DONE]\n\n");
    for cut in [1, 2, 4, 6, 20] {
        let (_, mut e, up) = told_exchange("/v1/chat/completions");
        upload(up, r#"{"model":"m","stream":true}"#);
        head_of(&mut e, 200, &[]);
        assert!(e.timeline.streamed, "taken for a stream until it tells");
        let (first, rest) = stream.split_at(cut);
        e.on_data(&Bytes::copy_from_slice(first.as_bytes()), Instant::now());
        e.on_data(&Bytes::copy_from_slice(rest.as_bytes()), Instant::now());
        assert!(e.timeline.streamed, "cut at {cut}");
        assert_eq!(e.timeline.tokens.token_events, 2, "cut at {cut}");
        assert!(e.timeline.first_token.is_some(), "cut at {cut}");
    }
    let (_, mut e, up) = told_exchange("/v1/chat/completions");
    upload(up, r#"{"model":"m"}"#);
    head_of(&mut e, 200, &[]);
    let whole = r#"{"choices":[{"message":{"content":"Hello there"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#;
    data(&mut e, whole);
    e.complete(End::Complete, Instant::now());
    assert!(!e.timeline.streamed);
    assert_eq!(e.timeline.tokens.generated, 2);
    assert!(e.timeline.parse_errors.is_empty());
    // Neither: not read, and no error.
    for body in ["Hello", "<html>", "dat a"] {
        let (_, mut e, up) = told_exchange("/v1/chat/completions");
        upload(up, r#"{"model":"m"}"#);
        head_of(&mut e, 200, &[]);
        e.on_data(&Bytes::copy_from_slice(body.as_bytes()), Instant::now());
        e.complete(End::Complete, Instant::now());
        assert_eq!(e.timeline.tokens.generated, 0, "{body}");
        assert!(e.timeline.parse_errors.is_empty(), "{body}");
    }
    // A type that is not read stays unread, whatever the body.
    let (_, mut e, up) = told_exchange("/v1/chat/completions");
    upload(up, r#"{"model":"m"}"#);
    head_of(&mut e, 200, &[("content-type", "text/plain")]);
    data(&mut e, SAY);
    assert_eq!(e.timeline.tokens.token_events, 0);
}
