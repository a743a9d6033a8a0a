//! Hostile request bodies are forwarded unchanged, byte for byte: not JSON,
//! `model` a number or 10 MB long, `stream` a string, duplicate keys,
//! 100,000-deep nesting. tokenclock reads a capped copy of the body on the
//! side; whatever that copy holds, the upstream gets the client's bytes, the
//! proxy neither overflows its stack nor holds more than
//! `request_capture_bytes` of the body, and it keeps serving.

use crate::common::{
    self,
    client::{collect, send},
    next_timeline,
    upstream::Echo,
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;

const MB: usize = 1_000_000;

/// `{"model":"m","x":[[[…]]]}` nested `depth` deep.
fn deep(depth: usize) -> Vec<u8> {
    let mut body = b"{\"model\":\"m\",\"stream\":true,\"x\":".to_vec();
    body.extend(std::iter::repeat_n(b'[', depth));
    body.extend(std::iter::repeat_n(b']', depth));
    body.push(b'}');
    body
}

/// `{"stream":true,"a":{"a":{…}}}` nested `depth` deep.
fn deep_objects(depth: usize) -> Vec<u8> {
    let mut body = b"{\"stream\":true,\"a\":".to_vec();
    for _ in 0..depth {
        body.extend_from_slice(b"{\"a\":");
    }
    body.extend_from_slice(b"null");
    body.extend(std::iter::repeat_n(b'}', depth + 1));
    body
}

/// A streamed chat request whose `model` is `len` bytes long.
fn long_model(len: usize) -> Vec<u8> {
    let mut body = b"{\"stream\":true,\"model\":\"".to_vec();
    body.extend(std::iter::repeat_n(b'm', len));
    body.extend_from_slice(b"\"}");
    body
}

/// Bodies that `usage_mode = "inject"` must leave alone too: none of them
/// is a JSON object that asks to stream, within `request_capture_bytes`.
fn hostile() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("not json", b"model=m&stream=true\xff\xfe{{".to_vec()),
        ("truncated json", b"{\"model\":\"m\",\"stream\":tr".to_vec()),
        (
            "model a number",
            b"{\"model\":42,\"stream\":false}".to_vec(),
        ),
        (
            "stream a string",
            b"{\"model\":\"m\",\"stream\":\"true\"}".to_vec(),
        ),
        (
            "duplicate keys",
            b"{\"model\":\"a\",\"stream\":true,\"model\":\"b\",\"stream\":false}".to_vec(),
        ),
        ("array nesting 100k", deep(100_000)),
        ("object nesting 100k", deep_objects(100_000)),
        ("model 10 MB", long_model(10 * MB)),
        ("empty", Vec::new()),
    ]
}

/// Sends `body` to the echo upstream through `proxy` and returns what came
/// back: the bytes the upstream received.
async fn echoed(proxy: std::net::SocketAddr, body: &[u8]) -> Vec<u8> {
    let json = [("content-type", "application/json")];
    echoed_at(proxy, "/v1/chat/completions", &json, body).await
}

/// Sends `body` with `headers` to `path` on the echo upstream through
/// `proxy`: the bytes the upstream received.
async fn echoed_at(
    proxy: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut request = Request::post(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::copy_from_slice(body)))
        .expect("request");
    let response = send(proxy, request).await.expect("response head");
    assert_eq!(response.status(), 200);
    collect(response).await.expect("the whole echo").body()
}

async fn forwarded_unchanged(extra: &str) {
    let upstream = Echo::start().await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, extra).await;
    for (name, body) in hostile() {
        let got = echoed(proxy.addr, &body).await;
        assert!(
            got == body,
            "{name}: the upstream got other bytes ({} vs {})",
            got.len(),
            body.len()
        );
        let timeline = next_timeline(&mut timelines).await;
        assert_eq!(timeline.bytes_in, body.len() as u64, "{name}: bytes in");
        // The echo answers each body as it came: a JSON answer that ends
        // inside a value is one cut on its way.
        let outcome = match name {
            "truncated json" => "upstream_error",
            _ => "ok",
        };
        assert_eq!(timeline.outcome.as_str(), outcome, "{name}: outcome");
        assert!(!timeline.usage_injected, "{name}: nothing injected");
        let model = timeline.request.model.as_deref();
        match name {
            // Over request_capture_bytes (8 MiB): the copy is dropped.
            "model 10 MB" => assert_eq!(model, None, "{name}: not captured"),
            "duplicate keys" => assert_eq!(model, Some("b"), "{name}: the last one"),
            "stream a string" => assert_eq!(timeline.request.stream, None, "{name}"),
            _ => {}
        }
    }
    // And an ordinary request still gets through.
    let ordinary = b"{\"model\":\"m\",\"stream\":false}";
    assert_eq!(echoed(proxy.addr, ordinary).await, ordinary);
    proxy.shutdown().await;
}

#[tokio::test]
async fn hostile_bodies_are_forwarded_unchanged() {
    forwarded_unchanged("").await;
}

#[tokio::test]
async fn hostile_bodies_are_forwarded_unchanged_when_injecting_usage() {
    forwarded_unchanged("usage_mode = \"inject\"").await;
}

/// `body` compressed with `coding` (`gzip`, `br` or `zstd`).
fn compressed(coding: &str, body: &[u8]) -> Vec<u8> {
    use std::io::Write;
    match coding {
        "gzip" => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            e.write_all(body).expect("compress");
            e.finish().expect("compress")
        }
        "br" => {
            let mut e = brotli::CompressorWriter::new(Vec::new(), 4096, 5, 22);
            e.write_all(body).expect("compress");
            e.into_inner()
        }
        _ => {
            let mut out = Vec::with_capacity(zstd_safe::compress_bound(body.len()));
            zstd_safe::compress(&mut out, body, 3).expect("compress");
            out
        }
    }
}

/// A compressed request body (OpenAI's Codex sends its large ones in
/// zstd) reaches the upstream byte for byte, and its copy is read decoded:
/// the request's model, stream flag and output cap are known. One that
/// decodes past `request_capture_bytes`, or does not decode, is not read.
#[tokio::test]
async fn compressed_request_bodies_are_read_decoded_and_forwarded_unchanged() {
    let upstream = Echo::start().await;
    let (proxy, mut timelines) =
        common::proxy_with_timelines(upstream.addr, "request_capture_bytes = 4096").await;
    let json = br#"{"model":"asked","stream":true,"max_tokens":7,"messages":[]}"#;
    let padded = long_model(8192);
    for coding in ["gzip", "br", "zstd"] {
        let cases = [
            ("read", compressed(coding, json), Some("asked")),
            // 8 KiB of model name, compressed to a few dozen bytes: past
            // the capture cap once decoded.
            ("over the cap decoded", compressed(coding, &padded), None),
            ("not what it says", b"{\"model\":\"plain\"}".to_vec(), None),
        ];
        for (case, body, model) in cases {
            let headers = [
                ("content-type", "application/json"),
                ("content-encoding", coding),
            ];
            let got = echoed_at(proxy.addr, "/v1/chat/completions", &headers, &body).await;
            assert!(got == body, "{coding} {case}: the upstream got other bytes");
            let timeline = next_timeline(&mut timelines).await;
            assert_eq!(timeline.request.model.as_deref(), model, "{coding} {case}");
            if model.is_some() {
                assert_eq!(timeline.request.stream, Some(true), "{coding} {case}");
                assert_eq!(timeline.request.max_tokens, Some(7), "{coding} {case}");
            }
        }
    }
    proxy.shutdown().await;
}

/// A speech-to-text request is a form: an audio file and a few fields, in
/// any order (the OpenAI SDKs send the fields first, `curl -F` as given).
/// It reaches the upstream byte for byte, and its fields are read as it
/// passes, the file never copied: a 20 MB file, far past
/// `request_capture_bytes`, before or after the fields.
#[tokio::test]
async fn a_speech_to_text_form_is_read_as_it_passes_whatever_its_size() {
    let upstream = Echo::start().await;
    let (proxy, mut timelines) =
        common::proxy_with_timelines(upstream.addr, "request_capture_bytes = 4096").await;
    let boundary = "tokenclock-7d1e0b";
    // Every byte value, and every 4 KiB what begins the delimiter but
    // ends otherwise (a form's content never holds its boundary), which the
    // proxy's reads will cut anywhere.
    let near = format!("\r\n--{}x", &boundary[..boundary.len() - 1]);
    let audio: Vec<u8> = (0..20 * MB)
        .map(|i| match i % 4096 {
            at if at < near.len() => near.as_bytes()[at],
            _ => (i * 7 % 251) as u8,
        })
        .collect();
    let fields: [(&str, Option<&str>, &[u8]); 4] = [
        ("model", None, b"openai/whisper-large-v3"),
        ("stream", None, b"true"),
        ("stream_include_usage", None, b"True"),
        ("max_completion_tokens", None, b"448"),
    ];
    let file = ("file", Some("speech.wav"), audio.as_slice());
    let first: Vec<_> = fields.iter().copied().chain([file]).collect();
    let last: Vec<_> = [file].into_iter().chain(fields.iter().copied()).collect();
    for (case, parts) in [("fields first", first), ("file first", last)] {
        let body = common::form(boundary, &parts);
        let content_type = format!("multipart/form-data; boundary={boundary}");
        let headers = [("content-type", content_type.as_str())];
        let got = echoed_at(proxy.addr, "/v1/audio/transcriptions", &headers, &body).await;
        assert!(got == body, "{case}: the upstream got other bytes");
        let timeline = next_timeline(&mut timelines).await;
        assert_eq!(timeline.dialect.as_str(), "openai_audio", "{case}");
        assert_eq!(timeline.bytes_in, body.len() as u64, "{case}");
        let asked = &timeline.request;
        assert_eq!(
            asked.model.as_deref(),
            Some("openai/whisper-large-v3"),
            "{case}"
        );
        assert_eq!(asked.stream, Some(true), "{case}");
        assert_eq!(asked.include_usage, Some(true), "{case}");
        assert_eq!(asked.max_tokens, Some(448), "{case}");
        // Audio: no text to estimate input tokens from.
        assert_eq!(asked.prompt_bytes, 0, "{case}");
    }
    proxy.shutdown().await;
}

/// Kills the binary if the test fails before stopping it.
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// The peak resident memory of process `pid`, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in /proc/PID/status")
}

/// The real binary, `request_capture_bytes` 1 MiB: 64 MB bodies (a model
/// name that long, and noise) pass through without the proxy's peak memory
/// growing by more than a fraction of one, and deep nesting does not
/// overflow its stack (the process would die).
#[tokio::test]
async fn huge_bodies_are_streamed_not_held() {
    let upstream = Echo::start().await;
    let dir = std::env::temp_dir().join(format!("tokenclock-bodies-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let config = dir.join("tokenclock.toml");
    std::fs::write(&config, "request_capture_bytes = 1048576\n").expect("config file");
    let config = config.to_str().expect("a UTF-8 temp path");
    let served = common::process::serve(upstream.addr, &["--config", config], &[]);
    let _kill = KillOnDrop(served.child.id());
    // Warm up: every buffer and the capture path used once.
    let warm = long_model(2 * MB);
    assert_eq!(echoed(served.addr, &warm).await, warm);
    let before = peak_rss_kib(served.child.id());
    for body in [
        long_model(64 * MB),
        common::noise(64 * MB, 9),
        deep(1_000_000),
    ] {
        assert!(
            echoed(served.addr, &body).await == body,
            "forwarded unchanged"
        );
    }
    let grown = peak_rss_kib(served.child.id()).saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "peak RSS grew by {grown} KiB for 64 MB bodies: the body was held"
    );
    served.sigterm();
    let (status, _) = served.wait().await;
    assert!(status.success(), "tokenclock exited with {status}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A streamed chat request whose one message is `len` bytes of `fill`.
fn chat_of(model: &str, fill: u8, len: usize) -> Vec<u8> {
    let mut body =
        format!(r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":""#)
            .into_bytes();
    body.extend(std::iter::repeat_n(fill, len));
    body.extend_from_slice(br#""}]}"#);
    body
}

/// The copies of the request bodies in flight share
/// `request_capture_total_bytes`: while one client's slow upload holds
/// most of it, another's large body is forwarded byte for byte, unread,
/// and counted (`request_over_budget`); in `inject` mode it is also not
/// rewritten. Once the slow upload ends, it is read, and so are the next
/// bodies, and the budget is all given back. Without the budget, each
/// would hold up to `request_capture_bytes`, and a burst of image uploads
/// the pod's memory.
/// `tokenclock_request_capture_bytes` and its limit, scraped.
async fn capture_gauges(proxy: &common::Proxy) -> [f64; 2] {
    let exposition = common::client::get(proxy.metrics_addr, "/metrics")
        .await
        .body();
    let text = String::from_utf8(exposition).expect("UTF-8 exposition");
    [
        "tokenclock_request_capture_bytes",
        "tokenclock_request_capture_limit_bytes",
    ]
    .map(|name| common::process::sample(&text, name).expect(name))
}

#[tokio::test]
async fn request_copies_in_flight_share_one_budget() {
    use tokenclock::measure::dialect::ParseError;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    for mode in ["passive", "inject"] {
        let upstream = Echo::start().await;
        let extra = format!(
            "usage_mode = \"{mode}\"\nrequest_capture_bytes = 1000000\n\
             request_capture_total_bytes = 1500000\n"
        );
        let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, &extra).await;
        // A slow upload: all but its last bytes sent, then a pause, once
        // the proxy holds what came (its copy, or `inject`'s read).
        let held = chat_of("held", b'a', 950_000);
        let (first, rest) = held.split_at(held.len() - 10);
        let mut slow = tokio::net::TcpStream::connect(proxy.addr)
            .await
            .expect("connect");
        let head = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            held.len()
        );
        slow.write_all(head.as_bytes()).await.expect("head");
        slow.write_all(first).await.expect("most of the body");
        // What the copies hold, as an operator sees it.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let [held, limit] = capture_gauges(&proxy).await;
            assert_eq!(limit, 1_500_000.0, "{mode}: the limit");
            if held >= first.len() as f64 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{mode}: {held} held"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // Larger than what is left beside it.
        let large = chat_of("large", b'b', 600_000);
        let got = echoed(proxy.addr, &large).await;
        assert!(got == large, "{mode}: forwarded unchanged");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.parse_errors, [ParseError::RequestOverBudget], "{mode}");
        assert!(!t.usage_injected, "{mode}: not rewritten");
        assert_eq!(t.outcome.as_str(), "ok", "{mode}");
        if mode == "passive" {
            assert_eq!(t.request.model, None, "{mode}: unread");
        }
        // The slow upload ends: whole upstream, and read.
        slow.write_all(rest).await.expect("the rest");
        let mut answer = Vec::new();
        slow.read_to_end(&mut answer).await.expect("the answer");
        assert!(answer.starts_with(b"HTTP/1.1 200"), "{mode}");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.request.model.as_deref(), Some("held"), "{mode}");
        assert_eq!(
            t.bytes_in,
            held.len() as u64,
            "{mode}: as the client sent it"
        );
        assert!(t.parse_errors.is_empty(), "{mode}: {:?}", t.parse_errors);
        assert_eq!(t.usage_injected, mode == "inject", "{mode}");
        // Given back: the next large body is read.
        echoed(proxy.addr, &large).await;
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.request.model.as_deref(), Some("large"), "{mode}");
        assert!(t.parse_errors.is_empty(), "{mode}: {:?}", t.parse_errors);
        assert_eq!(
            capture_gauges(&proxy).await[0],
            0.0,
            "{mode}: all given back"
        );
        proxy.shutdown().await;
    }
}
