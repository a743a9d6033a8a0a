//! SIGHUP reloads the config file: the binary as a process, real sockets.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::Duration,
};

use crate::common::{
    client::{collect, get, send},
    process::{self, Served, BIN},
};
use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::Notify,
};

/// The SSE events every response carries, in order.
fn events() -> Vec<String> {
    let mut events: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\" t{i}\"}}}}]}}\n\n"
            )
        })
        .collect();
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// What a DeepSeek-R1 served without a reasoning parser streams (a model
/// named `r1-…`): its template opened `<think>`, so its reasoning is in
/// `content`, and only the close shows.
fn reasoning_events() -> Vec<String> {
    let content = |text: &str| {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n")
    };
    let mut events: Vec<String> = ["Okay", "</think>", " t2", " t3"].map(content).to_vec();
    events.push("data: [DONE]\n\n".to_owned());
    events
}

/// An upstream that streams [`events`] ([`reasoning_events`] for a model
/// named `r1-…`); a request carrying `x-hold: 1`
/// gets the first event, then the rest once `release` is notified.
async fn upstream() -> (SocketAddr, Arc<Notify>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let release = Arc::new(Notify::new());
    let held = release.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream, held.clone()));
        }
    });
    (addr, release)
}

async fn answer(mut stream: TcpStream, release: Arc<Notify>) {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
        if stream.read(&mut byte).await.unwrap_or(0) == 0 {
            return;
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    if stream.read_exact(&mut body).await.is_err() {
        return;
    }
    let chunk = |e: &str| format!("{:x}\r\n{e}\r\n", e.len());
    let start = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                 transfer-encoding: chunked\r\nconnection: close\r\n\r\n";
    let events = match String::from_utf8_lossy(&body).contains("\"model\":\"r1-") {
        true => reasoning_events(),
        false => events(),
    };
    let first = format!("{start}{}", chunk(&events[0]));
    let _ = stream.write_all(first.as_bytes()).await;
    if head.contains("x-hold: 1") {
        release.notified().await;
    }
    let rest: String = events[1..].iter().map(|e| chunk(e)).collect();
    let _ = stream
        .write_all(format!("{rest}0\r\n\r\n").as_bytes())
        .await;
}

/// A streamed chat request for `model`, held by the upstream if `hold`.
fn chat(model: &str, hold: bool) -> Request<Full<Bytes>> {
    let body = format!(
        "{{\"model\":\"{model}\",\"stream\":true,\"messages\":[{{\"role\":\"user\",\"content\":\"hi\"}}]}}"
    );
    Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .header("x-hold", if hold { "1" } else { "0" })
        .body(Full::new(Bytes::from(body)))
        .expect("request")
}

/// Sends a chat request and checks the whole stream arrived unchanged.
async fn stream_ok(addr: SocketAddr, model: &str) {
    let response = send(addr, chat(model, false)).await.expect("response head");
    let got = collect(response).await.expect("whole body").body();
    assert_eq!(got, events().concat().into_bytes());
}

/// A config file in a fresh temp dir; `write` replaces its text.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str, text: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tokenclock-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = Self(dir.join(format!("{name}.toml")));
        file.write(text);
        file
    }

    fn write(&self, text: &str) {
        std::fs::write(&self.0, text).expect("write config");
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

/// A config listening on port 0 in front of `upstream`, plus `extra`.
fn config(upstream: SocketAddr, extra: &str) -> String {
    format!(
        "upstream = \"http://{upstream}\"\nlisten = \"127.0.0.1:0\"\n\
         metrics_listen = \"127.0.0.1:0\"\n{extra}"
    )
}

/// Sends SIGHUP and waits for the reload's outcome line (`needle`).
async fn sighup(served: &Served, needle: &str) -> String {
    let skip = served.log().len();
    served.signal("HUP");
    served.log_line(skip, needle).await
}

/// The sum of a family's samples whose labels include every one of `labels`.
async fn sample(served: &Served, name: &str, labels: &[&str]) -> f64 {
    let text = String::from_utf8(get(served.metrics_addr, "/metrics").await.body())
        .expect("utf-8 metrics");
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// SIGTERM; checks the exit code and returns the whole log.
async fn stop(served: Served) -> Vec<String> {
    served.sigterm();
    let (status, log) = served.wait().await;
    assert_eq!(status.code(), Some(0), "{log:#?}");
    log
}

const RELOADED: &str = "Configuration reloaded";

#[tokio::test]
async fn sighup_applies_new_slos_and_models_to_requests_that_start_after_it() {
    let (upstream, release) = upstream().await;
    let file = ConfigFile::new(
        "slo",
        &config(
            upstream,
            "models = [\"alpha\"]\n[[slo]]\nname = \"before\"\ne2e = \"60s\"\n",
        ),
    );
    let served = process::serve_config(file.path());
    let held = send(served.addr, chat("beta", true))
        .await
        .expect("response head");
    let mut held = held.into_body();
    let first = held.frame().await.expect("frame").expect("data");
    let first = first.into_data().expect("data");

    file.write(&config(
        upstream,
        "models = [\"alpha\", \"beta\"]\n[[slo]]\nname = \"after\"\ne2e = \"60s\"\n",
    ));
    sighup(&served, RELOADED).await;
    stream_ok(served.addr, "beta").await;
    release.notify_one();
    let rest = held.collect().await.expect("held stream completes");
    let got = [first, rest.to_bytes()].concat();
    assert_eq!(got, events().concat().into_bytes(), "byte for byte");

    let requests = "tokenclock_requests_total";
    let judged = "tokenclock_slo_requests_total";
    assert_eq!(
        sample(&served, requests, &[]).await,
        2.0,
        "each counted once"
    );
    // The held request keeps the config it started with, the next one the new.
    let old = ["slo=\"before\"", "model=\"other\"", "result=\"met\""];
    assert_eq!(sample(&served, judged, &old).await, 1.0);
    let new = ["slo=\"after\"", "model=\"beta\"", "result=\"met\""];
    assert_eq!(sample(&served, judged, &new).await, 1.0);
    assert_eq!(sample(&served, judged, &[]).await, 2.0);
    let reloads = "tokenclock_config_reloads_total";
    assert_eq!(sample(&served, reloads, &["result=\"ok\""]).await, 1.0);
    stop(served).await;
}

/// `template_opens_reasoning` reloads live, for requests that start after
/// the reload: one in flight keeps what it started with, whatever the new
/// file says when its close arrives.
#[tokio::test]
async fn sighup_applies_template_opens_reasoning_to_requests_that_start_after_it() {
    let (upstream, release) = upstream().await;
    let file = ConfigFile::new(
        "template",
        &config(upstream, "template_opens_reasoning = [\"r1-a\"]\n"),
    );
    let served = process::serve_config(file.path());
    let held = send(served.addr, chat("r1-b", true))
        .await
        .expect("response head");
    let mut held = held.into_body();
    held.frame().await.expect("frame").expect("the first event");

    file.write(&config(upstream, "template_opens_reasoning = [\"r1-b\"]\n"));
    sighup(&served, RELOADED).await;
    let after = send(served.addr, chat("r1-b", false))
        .await
        .expect("response head");
    collect(after).await.expect("whole body");
    release.notify_one();
    held.collect().await.expect("held stream completes");

    // The one that started after: its two events before the close are
    // reasoning. The held one started unnamed: none, and its close
    // counted as one nothing opened.
    let reasoning = ["kind=\"reasoning\""];
    assert_eq!(
        sample(&served, "tokenclock_output_tokens_total", &reasoning).await,
        2.0
    );
    let unopened = ["reason=\"think_unopened\""];
    assert_eq!(
        sample(&served, "tokenclock_parse_errors_total", &unopened).await,
        1.0
    );
    stop(served).await;
}

#[tokio::test]
async fn sighup_applies_a_new_log_filter() {
    let (upstream, _) = upstream().await;
    let quiet = "log_filter = \"info,tokenclock::access=off\"\n";
    let file = ConfigFile::new("filter", &config(upstream, quiet));
    let served = process::serve_config(file.path());
    stream_ok(served.addr, "alpha").await;
    file.write(&config(upstream, "log_filter = \"info\"\n"));
    sighup(&served, RELOADED).await;
    let skip = served.log().len();
    stream_ok(served.addr, "alpha").await;
    served.log_line(skip, "Request finished.").await;
    let log = stop(served).await;
    let logged = log
        .iter()
        .filter(|l| l.contains("Request finished."))
        .count();
    assert_eq!(logged, 1, "only the request after the reload: {log:#?}");
}

/// With `RUST_LOG` set at start, a reloaded `log_filter` changes nothing,
/// and the reload says so instead of listing it as applied (a black-box
/// pass: the systemd unit set `RUST_LOG`, and the runbook's advice to
/// raise `log_filter` silently did nothing).
#[tokio::test]
async fn a_log_filter_reload_under_rust_log_says_it_is_not_applied() {
    let (upstream, _) = upstream().await;
    let file = ConfigFile::new("rust-log", &config(upstream, "log_filter = \"info\"\n"));
    let served = process::serve_config_with(file.path(), &[("RUST_LOG", "info")]);
    let quiet = "log_filter = \"info,tokenclock::access=off\"\n";
    file.write(&config(upstream, quiet));
    let warned = sighup(&served, "RUST_LOG set the filter at start").await;
    assert!(warned.contains("unset RUST_LOG"), "{warned}");
    let reloaded = served.log_line(0, RELOADED).await;
    assert!(!reloaded.contains("log_filter"), "said applied: {reloaded}");
    let skip = served.log().len();
    stream_ok(served.addr, "alpha").await;
    served.log_line(skip, "Request finished.").await;
    stop(served).await;
}

#[tokio::test]
async fn sighup_with_an_invalid_file_keeps_the_running_config() {
    let (upstream, _) = upstream().await;
    let slo = |name: &str| format!("[[slo]]\nname = \"{name}\"\ne2e = \"60s\"\n");
    let file = ConfigFile::new("invalid", &config(upstream, &slo("before")));
    let served = process::serve_config(file.path());
    let bad = config(
        upstream,
        &format!("idle_timeout = \"soon\"\n{}", slo("after")),
    );
    file.write(&bad);
    let line = sighup(&served, "refused").await;

    // The same message `check-config` gives, on one line.
    let out = Command::new(BIN)
        .arg("check-config")
        .arg(file.path())
        .output()
        .expect("check-config");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let message = stderr
        .trim()
        .trim_start_matches("tokenclock: config error: ");
    assert!(message.starts_with("idle_timeout: "), "{stderr}");
    assert!(line.contains(message), "{line} lacks {message}");
    let refused = served
        .log()
        .iter()
        .filter(|l| l.contains("refused"))
        .count();
    assert_eq!(refused, 1, "{:#?}", served.log());

    stream_ok(served.addr, "alpha").await;
    let judged = "tokenclock_slo_requests_total";
    assert_eq!(sample(&served, judged, &["slo=\"before\""]).await, 1.0);
    assert_eq!(sample(&served, judged, &["slo=\"after\""]).await, 0.0);
    let reloads = "tokenclock_config_reloads_total";
    assert_eq!(sample(&served, reloads, &["result=\"error\""]).await, 1.0);
    assert_eq!(sample(&served, reloads, &["result=\"ok\""]).await, 0.0);
    stop(served).await;
}

#[tokio::test]
async fn sighup_with_a_new_listen_needs_a_restart_and_applies_the_rest() {
    let (upstream, _) = upstream().await;
    let slo = |name: &str| format!("[[slo]]\nname = \"{name}\"\ne2e = \"60s\"\n");
    let file = ConfigFile::new("listen", &config(upstream, &slo("before")));
    let served = process::serve_config(file.path());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let elsewhere = taken.local_addr().expect("addr");
    let moved = config(upstream, &slo("after")).replacen(
        "\nlisten = \"127.0.0.1:0\"",
        &format!("\nlisten = \"{elsewhere}\""),
        1,
    );
    file.write(&moved);
    sighup(&served, RELOADED).await;
    let restart: Vec<String> = (served.log().into_iter())
        .filter(|l| l.contains("needs restart"))
        .collect();
    assert_eq!(restart.len(), 1, "{restart:#?}");
    assert!(restart[0].contains("key=listen"), "{restart:#?}");

    stream_ok(served.addr, "alpha").await;
    let judged = "tokenclock_slo_requests_total";
    assert_eq!(sample(&served, judged, &["slo=\"after\""]).await, 1.0);
    stop(served).await;
}

#[tokio::test]
async fn sighup_without_a_config_file_is_logged_and_ignored() {
    let (upstream, _) = upstream().await;
    let served = process::serve(upstream, &[], &[]);
    sighup(&served, "nothing to reload").await;
    stream_ok(served.addr, "alpha").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop(served).await;
}

/// What a proxy learnt of the server behind `/generate` (an SGLang
/// stream's answer) outlives a reload: a request whose own answer never
/// tells (its client leaves before the head) is counted under SGLang, not
/// under TGI, the path's. The simulator answers `/generate` as SGLang does.
#[tokio::test]
async fn the_server_learnt_behind_generate_outlives_a_reload() {
    let sim = crate::common::sim::start(crate::common::sim::fast()).await;
    let file = ConfigFile::new("generate", &config(sim.addr, ""));
    let served = process::serve_config(file.path());
    let body = r#"{"text":"hi","sampling_params":{"max_new_tokens":4},"stream":true}"#;
    let answer = crate::common::sim::post(served.addr, "/generate", body, &[])
        .await
        .expect("an SGLang stream");
    assert_eq!(answer.status, 200);
    file.write(&config(sim.addr, "models = [\"alpha\"]\n"));
    sighup(&served, RELOADED).await;
    // A whole answer comes with its head, 2 s away: the client leaves
    // before it, so nothing in its answer tells.
    let whole = r#"{"text":"hi","sampling_params":{"max_new_tokens":4}}"#;
    let mut stream = TcpStream::connect(served.addr).await.expect("connect");
    let request = format!(
        "POST /generate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         x-sim-schedule: ttft_ms=2000,gap_ms=10,tokens=4\r\ncontent-length: {}\r\n\r\n{whole}",
        whole.len()
    );
    stream.write_all(request.as_bytes()).await.expect("send");
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(stream);
    let cancelled = ["endpoint=\"sglang\"", "outcome=\"client_cancelled\""];
    let requests = "tokenclock_requests_total";
    let mut counted = 0.0;
    for _ in 0..100 {
        counted = sample(&served, requests, &cancelled).await;
        if counted > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counted, 1.0, "the cancelled request under sglang");
    assert_eq!(sample(&served, requests, &["endpoint=\"tgi\""]).await, 0.0);
    assert_eq!(
        sample(&served, "tokenclock_requests_in_flight", &[]).await,
        0.0
    );
    stop(served).await;
}

/// Makes a FIFO at `path` (`mkfifo`).
fn mkfifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// A reload to files whose open would wait forever (a FIFO nobody opens,
/// as a hung mount does): the records path, then the config file itself.
/// Before, the open blocked a runtime thread, and with it every request,
/// `/healthz`, `/metrics` and SIGTERM; and a FIFO as the records path at
/// start bound the ports and served nothing. Now each is refused at once,
/// naming the file, and the running config stays.
#[tokio::test]
async fn a_reload_to_a_fifo_is_refused_and_stops_nothing() {
    let (upstream, _) = upstream().await;
    let dir = std::env::temp_dir().join(format!("tokenclock-fifo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (fifo, records) = (dir.join("records.fifo"), dir.join("records.jsonl"));
    mkfifo(&fifo);
    let records_at = |path: &Path| config(upstream, &format!("[records]\npath = {path:?}\n"));
    let file = ConfigFile::new("fifo", &records_at(&records));
    let served = process::serve_config(file.path());
    stream_ok(served.addr, "alpha").await;

    file.write(&records_at(&fifo));
    let line = sighup(&served, "refused").await;
    assert!(line.contains("records"), "{line}");
    stream_ok(served.addr, "alpha").await;
    let config_fifo = dir.join("config.fifo");
    mkfifo(&config_fifo);
    std::fs::rename(&config_fifo, file.path()).expect("the config file becomes a FIFO");
    let skip = served.log().len();
    served.signal("HUP");
    let line = served.log_line(skip, "refused").await;
    assert!(line.contains("regular file"), "{line}");
    stream_ok(served.addr, "alpha").await;
    let reloads = "tokenclock_config_reloads_total";
    assert_eq!(sample(&served, reloads, &["result=\"error\""]).await, 2.0);
    let log = stop(served).await;
    let written = std::fs::read_to_string(&records).expect("records");
    assert_eq!(written.lines().count(), 3, "{log:#?}");

    // At start: exit 2, naming the key, before serving.
    std::fs::remove_file(file.path()).expect("the FIFO goes");
    file.write(&records_at(&fifo));
    let serving = tokio::process::Command::new(BIN)
        .arg("serve")
        .arg("--config")
        .arg(file.path())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), serving)
        .await
        .expect("it exits, not blocks on the FIFO")
        .expect("serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("records.path"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A records path that is a FIFO whose reader stopped reading (a log
/// shipper stuck): the records that do not fit are lost and counted, and
/// SIGTERM still exits at once. Before, a write blocked the writer, and
/// the exit waited for it forever.
#[tokio::test]
async fn a_records_fifo_nobody_reads_loses_records_and_never_holds_the_exit() {
    use std::os::unix::fs::OpenOptionsExt;
    let (upstream, _) = upstream().await;
    let dir = std::env::temp_dir().join(format!("tokenclock-stuck-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let fifo = dir.join("records.fifo");
    mkfifo(&fifo);
    // The reader: open, and never read.
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(&fifo)
        .expect("open the FIFO's reading end");
    let file = ConfigFile::new(
        "stuck",
        &config(upstream, &format!("[records]\npath = {fifo:?}\n")),
    );
    let served = process::serve_config(file.path());
    let dropped = "tokenclock_records_dropped_total";
    for _ in 0..50 {
        for _ in 0..20 {
            stream_ok(served.addr, "alpha").await;
        }
        if sample(&served, dropped, &[]).await > 0.0 {
            break;
        }
    }
    assert!(
        sample(&served, dropped, &[]).await > 0.0,
        "{:#?}",
        served.log()
    );
    served.sigterm();
    let waited = tokio::time::timeout(std::time::Duration::from_secs(30), served.wait()).await;
    let (status, log) = waited.expect("tokenclock exits, not waits on the FIFO");
    assert_eq!(status.code(), Some(0), "{log:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
