//! The binary as an operator runs it: signals, exit codes, help.

use std::{process::Command, time::Duration};

use crate::common::{
    client::{send, send_h2},
    process::{self, BIN},
    upstream::{bytes, chunk, head, Scripted, Step},
};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};

#[tokio::test]
async fn sigterm_lets_the_stream_finish_then_exits_0() {
    let events: Vec<Bytes> = (0..12)
        .map(|i| chunk(format!("data: {{\"i\":{i}}}\n\n").as_bytes()))
        .collect();
    let mut script = vec![Step::Write(head(
        "200 OK",
        &[
            "content-type: text/event-stream",
            "transfer-encoding: chunked",
            "connection: close",
        ],
    ))];
    for event in &events {
        script.push(Step::Write(event.clone()));
        script.push(Step::Pause(Duration::from_millis(100)));
    }
    script.push(Step::Write(bytes("0\r\n\r\n")));
    let upstream = Scripted::start(script).await;
    let served = process::serve(upstream.addr, &[], &[]);
    let addr = served.addr;

    let request = Request::get("/v1/chat/completions")
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send(addr, request).await.expect("head");
    let mut body = response.into_body();
    let first = body
        .frame()
        .await
        .expect("frame")
        .expect("data")
        .into_data()
        .expect("data");
    served.sigterm();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "new connections are refused once draining"
    );
    let rest = body
        .collect()
        .await
        .expect("the stream completes after SIGTERM")
        .to_bytes();
    let got = [first, rest].concat();
    let want: Vec<u8> = (0..12)
        .flat_map(|i| format!("data: {{\"i\":{i}}}\n\n").into_bytes())
        .collect();
    assert_eq!(got, want);
    let (status, _) = served.wait().await;
    assert_eq!(status.code(), Some(0));
}

/// Serves `upstream` with a 1 s `shutdown_grace` and its records in
/// `records.jsonl` of a fresh directory of its own (`name` tells the
/// tests' apart), returned with the process.
fn serve_recording(
    upstream: std::net::SocketAddr,
    name: &str,
) -> (process::Served, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("tokenclock-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let records = dir.join("records.jsonl");
    let _ = std::fs::remove_file(&records);
    let config = dir.join("config.toml");
    let text = format!(
        "shutdown_grace = \"1s\"\n[records]\npath = {:?}\n",
        records.display().to_string()
    );
    std::fs::write(&config, text).expect("config");
    let config = config.display().to_string();
    let served = process::serve(upstream, &["--config", &config], &[]);
    (served, dir)
}

/// Streams still in flight when `shutdown_grace` runs out are cut while
/// the sinks are open: each ends `shutdown` (neither the client's doing
/// nor the upstream's), with its access-log line and its record, over
/// HTTP/1.1 and HTTP/2 alike, and a request still waiting for its
/// response head too. Dropped with the runtime, they had neither.
#[tokio::test]
async fn requests_in_flight_when_the_grace_ends_are_cut_logged_and_recorded_as_shutdown() {
    let sse = "content-type: text/event-stream";
    let script = vec![
        Step::AtHeader("x-hold-ms"),
        Step::Write(head("200 OK", &[sse, "transfer-encoding: chunked"])),
        Step::Write(chunk(b"data: {\"i\":0}\n\n")),
        Step::Pause(Duration::from_secs(60)),
    ];
    let upstream = Scripted::start(script).await;
    let (served, dir) = serve_recording(upstream.addr, "cut");
    let records = dir.join("records.jsonl");
    let addr = served.addr;
    let get = |hold: &str| {
        Request::get("/v1/chat/completions")
            .header("host", "a")
            .header("x-hold-ms", hold)
            .body(Full::new(Bytes::new()))
            .expect("request")
    };
    let mut http1 = send(addr, get("0")).await.expect("head").into_body();
    let mut h2 = send_h2(addr, get("0")).await.expect("head").into_body();
    for body in [&mut http1, &mut h2] {
        let first = body.frame().await.expect("frame").expect("data");
        assert!(first.is_data());
    }
    let waiting = tokio::spawn(send(addr, get("60000")));
    tokio::time::sleep(Duration::from_millis(300)).await;
    served.sigterm();
    let waited = tokio::time::timeout(Duration::from_secs(15), served.wait()).await;
    let (status, log) = waited.expect("exits soon after the grace");
    assert_eq!(status.code(), Some(0));
    // The clients see their streams cut, never ended cleanly.
    assert!(
        http1.collect().await.is_err(),
        "HTTP/1.1 stream ended cleanly"
    );
    assert!(h2.collect().await.is_err(), "HTTP/2 stream ended cleanly");
    assert!(waiting.await.expect("join").is_err(), "answered");
    let logged = log
        .iter()
        .filter(|l| l.contains("outcome=\"shutdown\"") || l.contains("\"outcome\":\"shutdown\""))
        .count();
    assert_eq!(logged, 3, "{log:#?}");
    let written = std::fs::read_to_string(&records).expect("records");
    let outcomes: Vec<String> = written
        .lines()
        .map(|l| {
            let record: serde_json::Value = serde_json::from_str(l).expect("a JSON record");
            record["outcome"].as_str().unwrap_or_default().to_owned()
        })
        .collect();
    assert_eq!(outcomes, ["shutdown"; 3], "{written}");
}

/// A WebSocket session still open when `shutdown_grace` runs out is cut
/// like a stream: its client's connection closed, and the session ends
/// `shutdown`, with its access-log line and its record (`code` 101), before
/// the record log closes.
#[tokio::test]
async fn a_websocket_session_open_when_the_grace_ends_is_cut_logged_and_recorded() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let switch = head(
        "101 Switching Protocols",
        &[
            "upgrade: websocket",
            "connection: Upgrade",
            "sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=",
        ],
    );
    // The server greets, then listens for a minute.
    let greeting = Bytes::from_static(b"\x81\x02hi");
    let script = vec![
        Step::Write(switch),
        Step::Write(greeting),
        Step::Pause(Duration::from_secs(60)),
    ];
    let upstream = Scripted::start(script).await;
    let (served, dir) = serve_recording(upstream.addr, "ws-cut");
    let records = dir.join("records.jsonl");
    let mut client = tokio::net::TcpStream::connect(served.addr)
        .await
        .expect("connect");
    client
        .write_all(
            b"GET /v1/realtime HTTP/1.1\r\nhost: a\r\nconnection: Upgrade\r\n\
              upgrade: websocket\r\nsec-websocket-version: 13\r\n\
              sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        )
        .await
        .expect("handshake");
    let mut seen = Vec::new();
    while !seen.ends_with(b"\x81\x02hi") {
        let mut buf = [0u8; 1024];
        let read = tokio::time::timeout(Duration::from_secs(10), client.read(&mut buf));
        let n = read.await.expect("the greeting in time").expect("read");
        assert!(n > 0, "closed before the greeting: {seen:?}");
        seen.extend_from_slice(&buf[..n]);
    }
    assert!(seen.starts_with(b"HTTP/1.1 101 "), "{seen:?}");

    served.sigterm();
    let waited = tokio::time::timeout(Duration::from_secs(15), served.wait()).await;
    let (status, log) = waited.expect("exits soon after the grace");
    assert_eq!(status.code(), Some(0));
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    assert!(rest.is_empty(), "nothing after the cut: {rest:?}");
    let logged: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("Request finished."))
        .collect();
    assert_eq!(logged.len(), 1, "{log:#?}");
    assert!(logged[0].contains("outcome=\"shutdown\""), "{logged:?}");
    let written = std::fs::read_to_string(&records).expect("records");
    let record: serde_json::Value =
        serde_json::from_str(written.trim_end()).expect("one JSON record");
    assert_eq!(record["outcome"], "shutdown", "{written}");
    assert_eq!(record["status"], 101, "{written}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--worker-threads 1` runs everything on the process's one runtime
/// thread (tokio's current-thread scheduler, not the multi-thread one):
/// a stream is forwarded and measured, a scrape answers while it flows
/// (the exposition renders on the blocking pool), and SIGTERM drains it.
#[tokio::test]
async fn one_worker_thread_forwards_measures_scrapes_and_drains() {
    let event = |i: usize| {
        format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"t{i}\"}},\"finish_reason\":null}}]}}\n\n"
        )
    };
    let mut script = vec![Step::Write(head(
        "200 OK",
        &[
            "content-type: text/event-stream",
            "transfer-encoding: chunked",
            "connection: close",
        ],
    ))];
    for i in 0..6 {
        script.push(Step::Write(chunk(event(i).as_bytes())));
        script.push(Step::Pause(Duration::from_millis(100)));
    }
    script.push(Step::Write(chunk(b"data: [DONE]\n\n")));
    script.push(Step::Write(bytes("0\r\n\r\n")));
    let upstream = Scripted::start(script).await;
    let served = process::serve(upstream.addr, &["--worker-threads", "1"], &[]);

    let request = Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"model":"m","stream":true,"messages":[]}"#,
        )))
        .expect("request");
    let response = send(served.addr, request).await.expect("head");
    let mut body = response.into_body();
    let first = body.frame().await.expect("frame").expect("data");
    let first = first.into_data().expect("data");

    let scraped = crate::common::client::get(served.metrics_addr, "/metrics").await;
    let text = String::from_utf8(scraped.body()).expect("UTF-8 exposition");
    let in_flight = "tokenclock_requests_in_flight{endpoint=\"openai_chat\"}";
    assert_eq!(process::sample(&text, in_flight), Some(1.0), "{text}");

    served.sigterm();
    let rest = body
        .collect()
        .await
        .expect("the stream completes")
        .to_bytes();
    let mut want: String = (0..6).map(event).collect();
    want.push_str("data: [DONE]\n\n");
    assert_eq!([first, rest].concat(), want.as_bytes());
    let line = served.log_line(0, "Request finished.").await;
    for field in [
        "outcome=\"ok\"",
        "dialect=\"openai_chat\"",
        "output_tokens=6",
    ] {
        assert!(line.contains(field), "{field} in {line}");
    }
    let (status, _) = served.wait().await;
    assert_eq!(status.code(), Some(0));
}

#[tokio::test]
async fn sigterm_when_idle_exits_0_at_once() {
    let upstream = Scripted::start(vec![]).await;
    let served = process::serve(upstream.addr, &[], &[]);
    let response = send(
        served.addr,
        Request::get("/")
            .body(Full::new(Bytes::new()))
            .expect("request"),
    )
    .await;
    // The scripted upstream closes without answering: a 502, not a hang.
    assert_eq!(
        response.map(|r| r.status()).ok(),
        Some(http::StatusCode::BAD_GATEWAY)
    );
    served.sigterm();
    let (status, _) = served.wait().await;
    assert_eq!(status.code(), Some(0));
}

pub(crate) fn check_config(text: &str) -> (Option<i32>, String, String) {
    let dir = std::env::temp_dir().join(format!("tokenclock-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("c{n}.toml"));
    std::fs::write(&path, text).expect("write config");
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(&path)
        .env_remove("TOKENCLOCK_LISTEN")
        .output()
        .expect("run");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bad_config_exits_2_with_one_line_naming_the_key() {
    for (text, key) in [
        (
            "upstream = \"http://127.0.0.1:8000\"\nlisten_addr = \"127.0.0.1:1\"\n",
            "listen_addr",
        ),
        ("upstream = \"tcp://127.0.0.1:8000\"\n", "upstream"),
        (
            "upstream = \"http://127.0.0.1:8000\"\nidle_timeout = \"soon\"\n",
            "idle_timeout",
        ),
        (
            "upstream = \"http://127.0.0.1:8000\"\npool_max_idle_per_host = -1\n",
            "pool_max_idle_per_host",
        ),
        ("listen = \"127.0.0.1:8080\"\n", "upstream"),
        (
            "upstream = \"http://127.0.0.1:8000\"\nupstream_health_path = \"health\"\n",
            "upstream_health_path",
        ),
        (
            "upstream = \"http://127.0.0.1:8000\"\nupstream_health_path = \"/he alth\"\n",
            "upstream_health_path",
        ),
        (
            "upstream = \"http://127.0.0.1:8000\"\nupstream_health_timeout = \"0s\"\n",
            "upstream_health_timeout",
        ),
        (
            "upstream = \"http://127.0.0.1:8000\"\nupstream_health_timeout = \"11s\"\n",
            "upstream_health_timeout",
        ),
        (
            "upstream = \"http://127.0.0.1:8000\"\n[metrics]\ndisable = [\"phase_seconds:nope\"]\n",
            "metrics.disable",
        ),
        // Not ports: the `http` crate reads no port from them, and the
        // requests went to port 80.
        ("upstream = \"http://127.0.0.1:108856\"\n", "upstream"),
        ("upstream = \"http://127.0.0.1:8O00\"\n", "upstream"),
        ("upstream = \"http://127.0.0.1:0\"\n", "upstream"),
        // Paths that name no file (a missing directory is this
        // machine's, not the config's: the start says so).
        (
            "upstream = \"http://127.0.0.1:8000\"\n[records]\npath = \"\"\n",
            "records.path",
        ),
        (
            "upstream = \"http://127.0.0.1:8000\"\n[records]\npath = \"/var/log/tokenclock/\"\n",
            "records.path",
        ),
        (
            "upstream = \"http://127.0.0.1:8000\"\n[otel]\nendpoint = \"http://127.0.0.1:notaport\"\n",
            "otel.endpoint",
        ),
    ] {
        let (code, stdout, stderr) = check_config(text);
        assert_eq!(code, Some(2), "{key}: {stderr}");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(
            stderr.contains(&format!("{key}: ")),
            "names `{key}`: {stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Error {"),
            "{stderr}"
        );
    }
}

/// A key in a refused URL's query, or a password in its user info, stays
/// out of the error line, which goes to the log.
#[test]
fn a_refused_url_is_shown_without_its_secrets() {
    for text in [
        "upstream = \"https://127.0.0.1:8000/?key=SECRET\"\n",
        "upstream = \"https://127.0.0.1:8000?key=SECRET\"\n",
        "upstream = \"http://user:SECRET@127.0.0.1:99999\"\n",
        "upstream = \"http:// user:SECRET@h\"\n",
        "upstream = \"http://127.0.0.1:1\"\n[otel]\nendpoint = \"http://c:4318 ?key=SECRET\"\n",
    ] {
        let (code, _, stderr) = check_config(text);
        assert_eq!(code, Some(2), "{text}: {stderr}");
        assert!(!stderr.contains("SECRET"), "{stderr}");
    }
}

#[test]
fn check_config_prints_the_effective_settings() {
    let (code, stdout, stderr) =
        check_config("upstream = \"http://127.0.0.1:8000\"\nidle_timeout = \"90s\"\n");
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("idle_timeout = \"1m 30s\""), "{stdout}");
    assert!(
        stdout.contains("pool_idle_timeout = \"4s\""),
        "defaults shown: {stdout}"
    );
    let shipped = concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokenclock.toml");
    let out = Command::new(BIN)
        .args(["check-config", shipped])
        .output()
        .expect("run");
    assert!(out.status.success(), "the shipped example is valid");
}

#[test]
fn a_port_in_use_exits_2_naming_the_key() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("addr");
    let out = Command::new(BIN)
        .args([
            "serve",
            "--upstream",
            "http://127.0.0.1:9",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--listen")
        .arg(addr.to_string())
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(last.contains("listen: cannot listen on"), "{stderr}");
}

#[test]
fn environment_is_used_and_flags_win_over_it() {
    let out = Command::new(BIN)
        .args([
            "check-config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokenclock.toml"),
        ])
        .env("TOKENCLOCK_UPSTREAM", "http://10.1.2.3:8000")
        .env("TOKENCLOCK_LISTEN", "127.0.0.1:7000")
        .args(["--listen", "127.0.0.1:7001"])
        .output()
        .expect("run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("upstream = \"http://10.1.2.3:8000\""),
        "{stdout}"
    );
    assert!(stdout.contains("listen = \"127.0.0.1:7001\""), "{stdout}");
    let out = Command::new(BIN)
        .args([
            "check-config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/tokenclock.toml"),
        ])
        .env("TOKENCLOCK_METRICS_LISTEN", "nowhere")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("metrics_listen: invalid value `nowhere`")
    );
}

#[test]
fn version_and_help() {
    let out = Command::new(BIN).arg("--version").output().expect("run");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("tokenclock {}", env!("CARGO_PKG_VERSION"))
    );
    let out = Command::new(BIN)
        .args(["serve", "--help"])
        .output()
        .expect("run");
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--listen",
        "--upstream",
        "--metrics-listen",
        "--config",
        "--log-format",
    ] {
        assert!(help.contains(flag), "help lists {flag}");
    }
}

/// The binary's allocator returns freed pages to the kernel from a thread
/// of its own, 100 ms after they were freed (`.cargo/config.toml`): built
/// without that, a held idle stream keeps ~3 KiB of freed pages resident.
/// jemalloc prints, when asked to at exit, the options it was built with
/// (`config.malloc_conf`) and those in effect (`opt.*`; it has no line
/// for the thread count).
#[test]
fn the_allocator_returns_freed_pages_from_a_thread_of_its_own() {
    let out = Command::new(BIN)
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "stats_print:true")
        .output()
        .expect("run");
    assert!(out.status.success());
    let stats = String::from_utf8_lossy(&out.stderr);
    let built: Vec<&str> = stats
        .lines()
        .find_map(|line| line.trim().strip_prefix("config.malloc_conf: "))
        .expect("jemalloc's build options in its statistics")
        .trim_matches('"')
        .split(',')
        .collect();
    for option in [
        "background_thread:true",
        "max_background_threads:1",
        "dirty_decay_ms:100",
        "muzzy_decay_ms:0",
    ] {
        assert!(built.contains(&option), "{option} in {built:?}");
    }
    for in_effect in [
        "opt.background_thread: true ",
        "opt.dirty_decay_ms: 100 ",
        "opt.muzzy_decay_ms: 0 ",
    ] {
        assert!(stats.contains(in_effect), "{in_effect} in:\n{stats}");
    }
}
