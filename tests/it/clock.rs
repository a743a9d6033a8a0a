//! The request clock end to end: an upstream streams on a known schedule
//! through the real proxy, and the timeline tokenclock builds matches it.
//!
//! Two checks per figure. Precision: every proxy timestamp is within 2 ms of
//! the instant the upstream finished writing that event (the upstream runs
//! in this process, on the same monotonic clock), so timer lateness on a
//! busy machine cannot fail the test, and cannot hide a clock bug; a run
//! that misses only this runs again (twice at most), since the scheduler can
//! hold one read back by milliseconds once where a clock bug misses every
//! run. The worked examples: each figure is near its nominal value, counted
//! from where the schedule starts on the proxy's clock (the upstream writes
//! its response head at the origin of its schedule, so that is the proxy's
//! `time_to_response_headers`).

use std::time::Duration;

use crate::common::{
    self,
    client::{collect, send},
    next_timeline,
    upstream::{bytes, chunk, head, sse_head, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokenclock::measure::timeline::{CountSource, Outcome, Phase, Timeline};

/// How far a proxy timestamp may be from the upstream's write.
const TOLERANCE: Duration = Duration::from_millis(2);

/// How far a figure may be from its nominal value on a busy machine.
const SCHEDULE: Duration = Duration::from_millis(25);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Where the upstream's schedule starts on the proxy's clock.
fn origin(t: &Timeline) -> Duration {
    let origin = t
        .phases()
        .get(Phase::TimeToResponseHeaders)
        .expect("a response head");
    assert!(origin < ms(50), "connect and upload took {origin:?}");
    origin
}

#[track_caller]
fn within(measured: Option<Duration>, expected: Duration, tolerance: Duration) {
    let measured = measured.expect("the figure was measured");
    let diff = measured.abs_diff(expected);
    assert!(
        diff <= tolerance,
        "measured {measured:?}, expected {expected:?} (±{tolerance:?})"
    );
}

/// How many times a scenario runs when its only misses are of the 2 ms
/// precision.
const ATTEMPTS: usize = 3;

/// The precision checks of one run: each figure against what the upstream
/// actually did, the misses noted rather than failed at once.
#[derive(Default)]
struct Precision {
    misses: Vec<String>,
}

impl Precision {
    /// Within 2 ms of what the upstream actually did.
    #[track_caller]
    fn near(&mut self, measured: Option<Duration>, expected: Duration) {
        let measured = measured.expect("the figure was measured");
        if measured.abs_diff(expected) > TOLERANCE {
            self.misses.push(format!(
                "line {}: measured {measured:?}, expected {expected:?}",
                std::panic::Location::caller().line()
            ));
        }
    }
}

/// Runs `script` through the proxy, and `check` on its timeline and the
/// upstream's writes: `check` asserts what must hold on every run (counts,
/// figures near their nominal values) and notes the precision misses. A
/// run whose only misses are of precision runs again, up to [`ATTEMPTS`]
/// in all: on a busy machine the scheduler can hold one read back by
/// milliseconds once; a clock bug misses every time.
async fn measure(script: Vec<Step>, check: impl Fn(&Timeline, &[Duration], &mut Precision)) {
    let mut runs = Vec::new();
    for attempt in 1..=ATTEMPTS {
        let (t, w) = run(script.clone()).await;
        let mut precision = Precision::default();
        check(&t, &w, &mut precision);
        if precision.misses.is_empty() {
            return;
        }
        let misses = format!("run {attempt}: {}", precision.misses.join("; "));
        // Shown with the test's output: a run that passes on a retry still
        // leaves its misses in the log.
        eprintln!("off the upstream's writes by more than {TOLERANCE:?}: {misses}");
        runs.push(misses);
    }
    panic!(
        "off the upstream's writes by more than {TOLERANCE:?} in every run:\n{}",
        runs.join("\n")
    );
}

/// Near the nominal schedule.
#[track_caller]
fn nominal(measured: Option<Duration>, expected: Duration) {
    within(measured, expected, SCHEDULE);
}

fn chat_chunk(delta: &str) -> Bytes {
    let data = format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":null}}]}}\n\n"
    );
    chunk(data.as_bytes())
}

fn usage_chunk(prompt: u64, completion: u64) -> Bytes {
    let data = format!(
        "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":{prompt},\"completion_tokens\":{completion},\"total_tokens\":{}}}}}\n\n",
        prompt + completion
    );
    chunk(data.as_bytes())
}

fn done() -> Vec<Step> {
    vec![
        Step::Write(chunk(b"data: [DONE]\n\n")),
        Step::Write(bytes("0\r\n\r\n")),
    ]
}

/// Runs `script` through the proxy: the timeline, and when each `Write`
/// step finished, as offsets from the timeline's `t0`.
async fn run(script: Vec<Step>) -> (Timeline, Vec<Duration>) {
    let mut upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let request = Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            b"{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"Say hi\"}]}",
        )))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    collect(response).await.expect("whole stream");
    let t = next_timeline(&mut timelines).await;
    let writes = upstream.writes().await;
    let offsets = writes
        .iter()
        .map(|w| w.saturating_duration_since(t.start))
        .collect();
    (t, offsets)
}

#[tokio::test]
async fn ttft_450ms_then_120_tokens_at_25ms() {
    // TTFT 450 ms, 120 tokens 25 ms apart: TPOT 25 ms, E2E 0.450 + 119 × 0.025 = 3.425 s.
    let mut script = vec![
        Step::Write(sse_head()),
        Step::At(ms(100)),
        Step::Write(chat_chunk("{\"role\":\"assistant\",\"content\":\"\"}")),
    ];
    for i in 0..120 {
        script.push(Step::At(ms(450 + 25 * i)));
        script.push(Step::Write(chat_chunk("{\"content\":\" tok\"}")));
    }
    script.push(Step::Write(usage_chunk(9, 120)));
    script.extend(done());
    measure(script, |t, w, p| {
        assert_eq!(t.outcome, Outcome::Ok);
        assert!(t.streamed);
        // Writes: head, role chunk, 120 tokens (w[2]..=w[121]), usage, [DONE], end.
        p.near(t.ttft(), w[2]);
        p.near(t.ttfo(), w[2]);
        p.near(t.ttst(), w[3]);
        p.near(t.tpot(), (w[121] - w[2]) / 119);
        p.near(t.to_last_token(), w[121]);
        p.near(t.e2e(), w[124]);
        let o = origin(t);
        nominal(t.ttft(), o + ms(450));
        within(t.tpot(), ms(25), Duration::from_micros(500));
        nominal(t.e2e(), o + ms(3425));
        assert_eq!(t.tokens.generated, 120);
        assert_eq!(t.tokens.generated_source, Some(CountSource::Usage));
        assert_eq!(t.tokens.input, Some(9));
        assert_eq!(t.model.as_deref(), Some("m"));
        assert_eq!(t.request.stream, Some(true));
        let gaps: Vec<_> = t.gaps.inter_event().collect();
        assert_eq!(gaps.len(), 119);
        for (i, gap) in gaps.iter().enumerate() {
            p.near(Some(*gap), w[i + 3] - w[i + 2]);
        }
        let itl: Vec<_> = t.inter_token_latencies().collect();
        assert_eq!(itl.iter().map(|(_, n)| n).sum::<u64>(), 119);
        let mean = itl.iter().map(|(d, _)| *d).sum::<Duration>() / itl.len() as u32;
        within(Some(mean), ms(25), Duration::from_micros(500));
        let phases = t.phases();
        p.near(phases.get(Phase::Decode), w[121] - w[2]);
        p.near(phases.get(Phase::Reasoning), Duration::ZERO);
        p.near(phases.get(Phase::Tail), w[124] - w[121]);
    })
    .await;
}

#[tokio::test]
async fn three_tokens_every_90ms_is_30ms_per_token() {
    let mut script = vec![Step::Write(sse_head())];
    for i in 0..10 {
        script.push(Step::At(ms(200 + 90 * i)));
        script.push(Step::Write(chat_chunk("{\"content\":\"a b c\"}")));
    }
    script.push(Step::Write(usage_chunk(5, 30)));
    script.extend(done());
    measure(script, |t, w, p| {
        // Writes: head, then the ten events at w[1]..=w[10].
        let gaps: Vec<_> = t.gaps.inter_event().collect();
        assert_eq!(gaps.len(), 9);
        for (i, gap) in gaps.iter().enumerate() {
            p.near(Some(*gap), w[i + 2] - w[i + 1]);
            nominal(Some(*gap), ms(90));
        }
        let itl: Vec<_> = t.inter_token_latencies().collect();
        assert_eq!(
            itl.iter().map(|(_, n)| n).sum::<u64>(),
            27,
            "one observation per token"
        );
        for (i, (value, count)) in itl.into_iter().enumerate() {
            assert_eq!(count, 3);
            p.near(Some(value), (w[i + 2] - w[i + 1]) / 3);
            nominal(Some(value), ms(30));
        }
    })
    .await;
}

#[tokio::test]
async fn reasoning_for_300ms_separates_ttft_from_ttfo() {
    let mut script = vec![
        Step::Write(sse_head()),
        Step::At(ms(150)),
        Step::Write(chat_chunk("{\"role\":\"assistant\",\"content\":\"\"}")),
    ];
    for i in 0..6 {
        script.push(Step::At(ms(250 + 50 * i)));
        script.push(Step::Write(chat_chunk("{\"reasoning_content\":\"hmm\"}")));
    }
    for i in 0..5 {
        script.push(Step::At(ms(550 + 20 * i)));
        script.push(Step::Write(chat_chunk("{\"content\":\"ok\"}")));
    }
    script.extend(done());
    measure(script, |t, w, p| {
        // Writes: head, role, six reasoning events (w[2]..), five answers (w[8]..).
        p.near(t.ttft(), w[2]);
        p.near(t.ttfo(), w[8]);
        let reasoning = t.ttfo().zip(t.ttft()).map(|(o, f)| o - f);
        p.near(reasoning, w[8] - w[2]);
        p.near(t.phases().get(Phase::Reasoning), w[8] - w[2]);
        let o = origin(t);
        nominal(t.ttft(), o + ms(250));
        nominal(t.ttfo(), o + ms(550));
        nominal(reasoning, ms(300));
        assert_eq!(t.tokens.generated, 11);
        assert_eq!(t.tokens.reasoning, 6);
        assert_eq!(t.tokens.generated_source, Some(CountSource::Events));
    })
    .await;
}

#[tokio::test]
async fn a_non_streamed_response_has_counts_but_no_first_token() {
    let body = br#"{"id":"cmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#;
    let mut response = head(
        "200 OK",
        &[
            "content-type: application/json",
            &format!("content-length: {}", body.len()),
            "connection: close",
        ],
    )
    .to_vec();
    response.extend_from_slice(body);
    let head_len = response.len() - body.len();
    let script = vec![
        Step::Write(Bytes::copy_from_slice(&response[..head_len])),
        Step::At(ms(80)),
        Step::Write(Bytes::copy_from_slice(&response[head_len..])),
    ];
    measure(script, |t, w, p| {
        assert!(!t.streamed);
        assert_eq!(t.ttft(), None);
        p.near(t.e2e(), w[1]);
        nominal(t.e2e(), origin(t) + ms(80));
        assert_eq!(t.tokens.generated, 3);
        assert_eq!(t.tokens.input, Some(7));
        assert_eq!(t.tokens.generated_source, Some(CountSource::Usage));
    })
    .await;
}

#[tokio::test]
async fn a_new_connection_is_timed_and_a_pooled_one_costs_nothing() {
    let echo = common::upstream::Echo::start().await;
    let (proxy, mut timelines) = common::proxy_with_timelines(echo.addr, "").await;
    for _ in 0..2 {
        let request = Request::post("/v1/chat/completions")
            .body(Full::new(Bytes::from_static(b"{}")))
            .expect("request");
        collect(send(proxy.addr, request).await.expect("response"))
            .await
            .expect("body");
    }
    let first = next_timeline(&mut timelines).await;
    let second = next_timeline(&mut timelines).await;
    let connect = first.phases().get(Phase::UpstreamConnect).expect("timed");
    assert!(connect > Duration::ZERO && connect < ms(50), "{connect:?}");
    assert_eq!(
        second.phases().get(Phase::UpstreamConnect),
        Some(Duration::ZERO),
        "pooled"
    );
}

/// Streams `script` through the proxy to a client that starts reading the
/// response `pause` after its head, then reads it all; its timeline.
async fn read_after(script: Vec<Step>, pause: Duration) -> Timeline {
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let request = Request::post("/v1/chat/completions")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    tokio::time::sleep(pause).await;
    collect(response).await.expect("stream");
    next_timeline(&mut timelines).await
}

#[tokio::test]
async fn a_client_that_stops_reading_shows_as_delivery_stall() {
    let event = chunk(
        &[b"data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n".as_slice(); 2048].concat(),
    );
    let mut script = vec![Step::Write(sse_head())];
    script.extend(std::iter::repeat_n(Step::Write(event), 128));
    script.extend(done());
    let t = read_after(script, ms(500)).await;
    let stall = t.phases().get(Phase::DeliveryStall).expect("measured");
    assert!(
        stall >= ms(300),
        "the client did not read for 500 ms; stall {stall:?}"
    );
    assert!(stall <= t.e2e().unwrap_or_default());
}

#[tokio::test]
async fn a_client_that_keeps_up_shows_no_delivery_stall() {
    // Small events 2 ms apart, read as they come: the client's socket never
    // fills, so no time is the client's, however long the proxy itself
    // takes to write each frame.
    let mut script = vec![Step::Write(sse_head())];
    for i in 1..=32 {
        script.push(Step::At(ms(2 * i)));
        script.push(Step::Write(chat_chunk("{\"content\":\"x\"}")));
    }
    script.extend(done());
    let t = read_after(script, Duration::ZERO).await;
    assert_eq!(t.events, 33, "every event was read, [DONE] too");
    assert_eq!(t.phases().get(Phase::DeliveryStall), Some(Duration::ZERO));
}

#[tokio::test]
async fn an_event_split_across_frames_takes_the_instant_of_its_last_byte() {
    // The first token's event arrives in three TCP writes 60 ms apart: its
    // data line, the rest of its JSON, then the blank line that ends it. A
    // client's SSE parser dispatches it on the blank line, and so does the
    // clock: TTFT is the third write, not the first.
    let event = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
    let (head, rest) = event.split_at(20);
    let (middle, end) = rest.split_at(rest.len() - 1);
    let mut script = vec![
        Step::Write(sse_head()),
        Step::At(ms(100)),
        Step::Write(chunk(head)),
        Step::At(ms(160)),
        Step::Write(chunk(middle)),
        Step::At(ms(220)),
        Step::Write(chunk(end)),
        Step::At(ms(250)),
        Step::Write(chat_chunk("{\"content\":\" there\"}")),
    ];
    script.extend(done());
    measure(script, |t, w, p| {
        // Writes: head, three parts (w[1]..=w[3]), the second token, [DONE], end.
        p.near(t.ttft(), w[3]);
        p.near(t.ttst(), w[4]);
        assert!(
            t.ttft().expect("ttft") >= w[2] + ms(30),
            "not the instant of an earlier part"
        );
    })
    .await;
}
