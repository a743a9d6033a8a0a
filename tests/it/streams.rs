//! Every recorded server stream through the real proxy: the client reads the
//! fixture byte for byte, and the timeline has the tokens, their source and
//! the first-token instants the stream implies.

use std::time::Duration;

use crate::common::{
    self,
    client::{collect, send},
    next_timeline,
    upstream::{bytes, chunk, chunked_head, head as upstream_head, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokenclock::{
    measure::dialect::Dialect,
    measure::timeline::{CountSource, Outcome, Timeline},
};

struct Case {
    fixture: &'static str,
    path: &'static str,
    content_type: &'static str,
    dialect: Dialect,
    generated: u64,
    source: CountSource,
    reasons: bool,
}

const SSE: &str = "text/event-stream";
const NDJSON: &str = "application/x-ndjson";

fn cases() -> Vec<Case> {
    use CountSource::{PerEvent, Usage};
    use Dialect::*;
    let case = |fixture, path, content_type, dialect, generated, source, reasons| Case {
        fixture,
        path,
        content_type,
        dialect,
        generated,
        source,
        reasons,
    };
    vec![
        case(
            "vllm_chat_reasoning.sse",
            "/v1/chat/completions",
            SSE,
            OpenAiChat,
            22,
            Usage,
            true,
        ),
        case(
            "vllm_chat_continuous_usage.sse",
            "/v1/chat/completions",
            SSE,
            OpenAiChat,
            7,
            Usage,
            false,
        ),
        case(
            "vllm_chat_logprobs.sse",
            "/v1/chat/completions",
            SSE,
            OpenAiChat,
            0,
            PerEvent,
            false,
        ),
        case(
            "sglang_chat.sse",
            "/v1/chat/completions",
            SSE,
            OpenAiChat,
            8,
            Usage,
            true,
        ),
        case(
            "openai_chat_tools.sse",
            "/v1/chat/completions",
            SSE,
            OpenAiChat,
            15,
            Usage,
            false,
        ),
        case(
            "openai_completions.sse",
            "/v1/completions",
            SSE,
            OpenAiCompletions,
            4,
            Usage,
            false,
        ),
        case(
            "vllm_tokens_generate.sse",
            "/inference/v1/generate",
            SSE,
            OpenAiCompletions,
            7,
            Usage,
            false,
        ),
        case(
            "openai_responses.sse",
            "/v1/responses",
            SSE,
            OpenAiResponses,
            85,
            Usage,
            true,
        ),
        case(
            "anthropic_thinking.sse",
            "/v1/messages",
            SSE,
            Anthropic,
            96,
            Usage,
            true,
        ),
        case(
            "tgi_generate_stream.sse",
            "/generate_stream",
            SSE,
            Tgi,
            7,
            Usage,
            false,
        ),
        case(
            "ollama_chat.ndjson",
            "/api/chat",
            NDJSON,
            Ollama,
            42,
            Usage,
            true,
        ),
        case(
            "ollama_generate.ndjson",
            "/api/generate",
            NDJSON,
            Ollama,
            5,
            Usage,
            false,
        ),
        case(
            "llamacpp_completion.sse",
            "/completion",
            SSE,
            LlamaCpp,
            4,
            Usage,
            false,
        ),
        case(
            "llamacpp_chat.sse",
            "/v1/chat/completions",
            SSE,
            OpenAiChat,
            7,
            Usage,
            true,
        ),
    ]
}

fn fixture(name: &str) -> Vec<u8> {
    let path = format!(
        "{}/tests/fixtures/dialects/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The stream in three writes, 30 ms apart, cut at arbitrary points.
fn script(body: &[u8], content_type: &str) -> Vec<Step> {
    let mut script = vec![Step::Write(chunked_head(content_type))];
    let cuts = [0, body.len() / 3, body.len() * 2 / 3 + 1, body.len()];
    for pair in cuts.windows(2) {
        script.push(Step::Pause(Duration::from_millis(30)));
        script.push(Step::Write(chunk(&body[pair[0]..pair[1]])));
    }
    script.push(Step::Write(bytes("0\r\n\r\n")));
    script
}

#[tokio::test]
async fn every_recorded_stream_is_forwarded_and_measured() {
    for case in cases() {
        let body = fixture(case.fixture);
        let upstream = Scripted::start(script(&body, case.content_type)).await;
        let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
        let request = Request::post(case.path)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(
                b"{\"model\":\"requested\",\"stream\":true,\"prompt\":\"hello world\"}",
            )))
            .expect("request");
        let response = send(proxy.addr, request).await.expect("response");
        let got = collect(response).await.expect("whole stream").body();
        let name = case.fixture;
        assert!(got == body, "{name}: the client got other bytes");

        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.dialect, case.dialect, "{name}");
        assert_eq!(t.outcome, Outcome::Ok, "{name}");
        assert!(t.streamed, "{name}");
        assert!(t.parse_errors.is_empty(), "{name}: {:?}", t.parse_errors);
        assert_eq!(t.tokens.generated_source, Some(case.source), "{name}");
        if case.source == CountSource::Usage {
            assert_eq!(t.tokens.generated, case.generated, "{name}");
        }
        assert!(t.ttft().is_some(), "{name}: no first token");
        assert!(t.ttfo().is_some(), "{name}: no first output token");
        assert_eq!(
            t.ttfo() > t.ttft(),
            case.reasons,
            "{name}: reasoning before output"
        );
        assert_eq!(
            t.tokens.reasoning > 0,
            case.reasons,
            "{name}: reasoning tokens"
        );
        assert!(t.e2e() >= t.to_last_token(), "{name}");
        assert_eq!(t.request.model.as_deref(), Some("requested"), "{name}");
        proxy.shutdown().await;
    }
}

fn usage_stream() -> (Vec<Step>, &'static str, &'static str) {
    const WITH: &str = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":17}}\n\n",
        "data: [DONE]\n\n"
    );
    const WITHOUT: &str = concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n",
        "data: [DONE]\n\n"
    );
    (script(WITH.as_bytes(), SSE), WITH, WITHOUT)
}

const STREAMED_REQUEST: &[u8] =
    b"{\"model\":\"m\",\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";

/// [`STREAMED_REQUEST`] to `path` through the proxy at `addr`: the body
/// the client gets.
async fn streamed(addr: std::net::SocketAddr, path: &str) -> Vec<u8> {
    let request = Request::post(path)
        .header("content-type", "application/json")
        .header("content-length", STREAMED_REQUEST.len())
        .header("accept-encoding", "gzip, deflate, br")
        .body(Full::new(Bytes::from_static(STREAMED_REQUEST)))
        .expect("request");
    let response = send(addr, request).await.expect("response");
    collect(response).await.expect("stream").body()
}

#[tokio::test]
async fn usage_inject_asks_for_usage_and_hides_it_from_the_client() {
    let (script, _, without) = usage_stream();
    let mut upstream = Scripted::start(script).await;
    let (proxy, mut timelines) =
        common::proxy_with_timelines(upstream.addr, "usage_mode = \"inject\"").await;
    let got = streamed(proxy.addr, "/v1/chat/completions").await;
    assert_eq!(
        String::from_utf8_lossy(&got),
        without,
        "the usage chunk is removed"
    );

    let seen = upstream.next_request().await;
    let body: serde_json::Value = serde_json::from_slice(&seen.body).expect("JSON body upstream");
    assert_eq!(body["stream_options"]["include_usage"], true);
    assert_eq!(body["messages"][0]["content"], "hi");
    // The member is written in, and every other byte is the client's.
    let mut want = br#"{"stream_options":{"include_usage":true},"#.to_vec();
    want.extend_from_slice(&STREAMED_REQUEST[1..]);
    assert_eq!(
        String::from_utf8_lossy(&seen.body),
        String::from_utf8_lossy(&want)
    );
    // Asked for as it is, so that the usage chunk can be cut out (the
    // client asked for gzip, deflate and br).
    assert_eq!(seen.header("accept-encoding").as_deref(), Some("identity"));
    let length: usize = seen
        .header("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert_eq!(
        length,
        seen.body.len(),
        "Content-Length matches the new body"
    );

    let t = next_timeline(&mut timelines).await;
    assert!(t.usage_injected);
    assert_eq!(t.tokens.generated, 17);
    assert_eq!(t.tokens.generated_source, Some(CountSource::Usage));
    // The bytes the client sent, not the rewritten body's.
    assert_ne!(seen.body.len(), STREAMED_REQUEST.len());
    assert_eq!(t.bytes_in, STREAMED_REQUEST.len() as u64);
    // The bytes the upstream sent, the usage chunk included.
    assert!(t.bytes_out > got.len() as u64);
}

/// A stream whose upstream said its length, under `usage_mode =
/// "inject"`: the usage chunk cut out leaves it shorter, so it reaches the
/// client framed otherwise, without the upstream's `Content-Length` (until
/// 2026-12-07 the length was passed on, and the client waited for bytes
/// that never came).
#[tokio::test]
async fn usage_inject_drops_the_length_the_cut_makes_wrong() {
    let (_, with, without) = usage_stream();
    let length = format!("content-length: {}", with.len());
    let script = vec![
        Step::Write(upstream_head(
            "200 OK",
            &["content-type: text/event-stream", &length],
        )),
        Step::Write(bytes(with)),
    ];
    let upstream = Scripted::start(script).await;
    let proxy = common::proxy(upstream.addr, "usage_mode = \"inject\"").await;
    let request = Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(STREAMED_REQUEST)))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    assert!(response.headers().get("content-length").is_none());
    let got = collect(response).await.expect("the whole stream").body();
    assert_eq!(String::from_utf8_lossy(&got), without);
}

#[tokio::test]
async fn passive_mode_changes_nothing() {
    let (script, with, _) = usage_stream();
    let mut upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let request = Request::post("/v1/chat/completions")
        .header("content-length", STREAMED_REQUEST.len())
        .body(Full::new(Bytes::from_static(STREAMED_REQUEST)))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    let got = collect(response).await.expect("stream").body();
    assert_eq!(String::from_utf8_lossy(&got), with);
    assert_eq!(upstream.next_request().await.body, STREAMED_REQUEST);
    assert!(!next_timeline(&mut timelines).await.usage_injected);
}

/// llama.cpp's server answers `/api/chat` with OpenAI chat chunks, and
/// tokenclock reads them so once the answer tells. With `inject`, a
/// request there is still never rewritten, even once llama.cpp has been
/// seen answering it: its dialect is a guess until its own answer tells,
/// and a body is rewritten only for a server known to take it.
#[tokio::test]
async fn usage_inject_leaves_a_shared_path_alone() {
    let (_, _, without) = usage_stream();
    let mut upstream = Scripted::start(script(without.as_bytes(), SSE)).await;
    let (proxy, mut timelines) =
        common::proxy_with_timelines(upstream.addr, "usage_mode = \"inject\"").await;
    for round in ["first", "learnt"] {
        let got = streamed(proxy.addr, "/api/chat").await;
        assert_eq!(String::from_utf8_lossy(&got), without, "{round}");
        assert_eq!(
            upstream.next_request().await.body,
            STREAMED_REQUEST,
            "{round}"
        );
        let t = next_timeline(&mut timelines).await;
        assert!(!t.usage_injected, "{round}");
        assert_eq!(t.dialect, Dialect::OpenAiChat, "{round}");
        assert_eq!(t.tokens.token_events, 1, "{round}");
    }
}

/// Each event of a reasoning stream, `TEXT` its answer's text, and its end:
/// an OpenAI chat SSE stream and an Ollama NDJSON one.
const ANSWER_STREAMS: [(&str, &str, &str, &str); 2] = [
    (
        "/v1/chat/completions",
        SSE,
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"TEXT\"}}]}\n\n",
        "data: [DONE]\n\n",
    ),
    (
        "/api/chat",
        NDJSON,
        "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"TEXT\"},\"done\":false}\n",
        "{\"model\":\"m\",\"message\":{\"role\":\"assistant\",\"content\":\"\"},\"done\":true}\n",
    ),
];

/// The timeline of `texts` sent 20 ms apart as `ANSWER_STREAMS`' `case`
/// through a real proxy, which must forward them unchanged.
async fn answer_stream_timeline(case: (&str, &str, &str, &str), texts: &[&str]) -> Timeline {
    let (path, content_type, frame, last) = case;
    let mut body = String::new();
    let mut script = vec![Step::Write(chunked_head(content_type))];
    for (i, text) in texts.iter().enumerate() {
        let event = frame.replace("TEXT", text);
        body.push_str(&event);
        script.push(Step::At(Duration::from_millis(20 * (i as u64 + 1))));
        script.push(Step::Write(chunk(event.as_bytes())));
    }
    body.push_str(last);
    script.push(Step::Write(chunk(last.as_bytes())));
    script.push(Step::Write(bytes("0\r\n\r\n")));
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(STREAMED_REQUEST)))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    let got = collect(response).await.expect("stream").body();
    assert_eq!(String::from_utf8_lossy(&got), body, "{path}: unchanged");
    let t = next_timeline(&mut timelines).await;
    assert!(
        t.parse_errors.is_empty(),
        "{path} {texts:?}: {:?}",
        t.parse_errors
    );
    proxy.shutdown().await;
    t
}

/// An SSE stream whose head has no `content-type` (Starlette's
/// `StreamingResponse` without a `media_type`) is read as one, each event
/// at its time, and forwarded unchanged (before 2026-12-07 it was not
/// read, and nothing was counted).
#[tokio::test]
async fn an_sse_stream_without_a_content_type_is_read() {
    let event = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n";
    let head = upstream_head(
        "200 OK",
        &["transfer-encoding: chunked", "connection: close"],
    );
    let mut script = vec![Step::Write(head)];
    for i in 0..3u64 {
        script.push(Step::At(Duration::from_millis(30 * (i + 1))));
        script.push(Step::Write(chunk(event.as_bytes())));
    }
    script.push(Step::Write(chunk(b"data: [DONE]\n\n")));
    script.push(Step::Write(bytes("0\r\n\r\n")));
    let upstream = Scripted::start(script).await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let got = streamed(proxy.addr, "/v1/chat/completions").await;
    assert_eq!(
        got,
        format!("{event}{event}{event}data: [DONE]\n\n").as_bytes()
    );
    let t = next_timeline(&mut timelines).await;
    assert!(t.streamed);
    assert_eq!(t.tokens.token_events, 3);
    assert!(
        t.to_last_token().expect("last token")
            >= t.ttft().expect("ttft") + Duration::from_millis(50)
    );
    assert!(t.parse_errors.is_empty(), "{:?}", t.parse_errors);
    proxy.shutdown().await;
}

/// A model that writes whitespace before its `<think>` (a raw prompt that
/// ends without the newline its template has, a tokenizer that keeps the
/// space apart from the tag): the whitespace is the reasoning's, and TTFO
/// is the first answer after the close, on an SSE and an NDJSON stream.
/// Whitespace and then words is the answer from its first whitespace.
#[tokio::test]
async fn whitespace_before_think_is_reasoning() {
    let thinking = [" ", "\\n", "<think>", "Hmm", "</think>", "Hi"];
    let answering = ["\\n", " ", "Hi", "<think>"];
    for case in ANSWER_STREAMS {
        let path = case.0;
        for texts in [&thinking[..], &answering[..]] {
            let t = answer_stream_timeline(case, texts).await;
            let (ttft, ttfo) = (t.ttft().expect("ttft"), t.ttfo().expect("ttfo"));
            let reasoning = t.tokens.reasoning;
            if texts[0] == " " {
                // The five events before the answer, 20 ms apart.
                assert!(
                    ttfo >= ttft + Duration::from_millis(60),
                    "{path}: {ttft:?} {ttfo:?}"
                );
                assert_eq!((reasoning, t.tokens.generated), (5, 6), "{path}");
            } else {
                assert_eq!(ttfo, ttft, "{path}");
                assert_eq!((reasoning, t.tokens.generated), (0, 4), "{path}");
            }
        }
    }
}

/// A `<think>` or `</think>` cut between events (a tokenizer without one
/// token for it, a gateway that re-chunks text; Ollama escapes `<` and `>`)
/// is read as if whole: TTFO at the answer after the close, and the events
/// before it reasoning. Before 2026-12-07 a cut close was never seen, and
/// the whole answer was counted as reasoning, with no error.
#[tokio::test]
async fn a_think_tag_cut_between_events_is_read_whole() {
    let closed = ["<think>", "Hmm", "</", "think>", "Hi"];
    let escaped = [
        "\\u003cthink\\u003e",
        "Hmm",
        "\\u003c/",
        "think\\u003e",
        "Hi",
    ];
    let opened = ["<", "think>", "Hmm", "</think>", "Hi"];
    for case in ANSWER_STREAMS {
        for texts in [closed, escaped, opened] {
            let t = answer_stream_timeline(case, &texts).await;
            let (ttft, ttfo) = (t.ttft().expect("ttft"), t.ttfo().expect("ttfo"));
            // The four events before the answer, 20 ms apart.
            assert!(
                ttfo >= ttft + Duration::from_millis(60),
                "{} {texts:?}: {ttft:?} {ttfo:?}",
                case.0
            );
            assert_eq!(
                (t.tokens.reasoning, t.tokens.generated),
                (4, 5),
                "{} {texts:?}",
                case.0
            );
        }
    }
}
