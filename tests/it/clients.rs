//! The clients tokenclock's users run, through tokenclock: the OpenAI and
//! Anthropic Python SDKs, aiohttp, requests and httpx (PyPI, pinned in
//! `target/venv-clients` by tests/clients/venv.sh; these tests fail
//! without it), Node's own fetch, and curl. Each reads the simulator once
//! directly and once through the proxy; what it made of the answers (text,
//! usage, event kinds, statuses) must be the same, every request must be
//! measured, and the proxy's token counts must be what the clients read.
//!
//! The rest of the suite drives the proxy with hyper's client and raw
//! sockets; these are the parsers (llhttp in aiohttp and undici, h11 in
//! httpx, http.client in requests, curl's) that would choke on a framing
//! mistake that hyper's client forgives.

use std::{collections::BTreeMap, net::SocketAddr, path::PathBuf, process::Output};

use serde_json::Value;
use tokio::process::Command;

use crate::common::{
    self, client, sim,
    upstream::{bytes, chunk, chunked_head, Scripted, Step},
};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A client's command, with no proxy of the environment's in the way:
/// requests, httpx and curl would send even 127.0.0.1 through one.
fn client_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    for var in ["http_proxy", "https_proxy", "all_proxy"] {
        command.env_remove(var).env_remove(var.to_ascii_uppercase());
    }
    command
        .env("NO_PROXY", "127.0.0.1")
        .env("no_proxy", "127.0.0.1");
    command
}

/// Runs `command`, which prints one JSON object, and parses it.
async fn json_of(mut command: Command, what: &str) -> Value {
    let output = command
        .output()
        .await
        .unwrap_or_else(|e| panic!("run {what}: {e}"));
    assert!(
        output.status.success(),
        "{what} failed: {}",
        stderr(&output)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{what} printed no JSON ({e}): {}", stderr(&output)))
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// tests/clients/clients.py against `addr`.
async fn python(addr: SocketAddr, only: Option<&str>) -> Value {
    let python = root().join("target/venv-clients/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run tests/clients/venv.sh (tests/run.sh does)",
        python.display()
    );
    let mut command = client_command(python);
    command
        .arg(root().join("tests/clients/clients.py"))
        .arg(format!("http://{addr}"));
    if let Some(only) = only {
        command.args(["--only", only]);
    }
    json_of(command, "clients.py").await
}

/// tests/clients/fetch.mjs (Node's fetch) against `addr`.
async fn node(addr: SocketAddr) -> Value {
    let mut command = client_command("node");
    command
        .arg(root().join("tests/clients/fetch.mjs"))
        .arg(format!("http://{addr}"));
    json_of(command, "node fetch.mjs").await
}

/// Asserts that no scenario failed and that each reads the same through
/// the proxy as directly; the scenarios by name.
fn same(direct: &Value, proxied: &Value, client: &str) -> BTreeMap<String, Value> {
    let scenarios = direct.as_object().expect("an object of scenarios");
    assert!(scenarios.len() > 1, "{client}: no scenario ran: {direct}");
    for (name, result) in scenarios {
        for (run, value) in [("directly", result), ("through tokenclock", &proxied[name])] {
            assert!(
                value.get("error").is_none(),
                "{client} {name} failed {run}: {value}"
            );
        }
        assert_eq!(
            &proxied[name], result,
            "{client} {name}: through tokenclock (left) and directly (right) differ"
        );
    }
    scenarios.clone().into_iter().collect()
}

/// The words of a text the simulator made (one per token).
fn words(text: &Value) -> u64 {
    text.as_str().expect("a text").split_whitespace().count() as u64
}

/// Every `tokenclock_requests_total` series that counted something, with
/// its value.
async fn requests_counted(metrics: SocketAddr) -> Vec<(String, f64)> {
    let text = String::from_utf8_lossy(&client::get(metrics, "/metrics").await.body()).into_owned();
    text.lines()
        .filter(|l| l.starts_with("tokenclock_requests_total{"))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.to_owned(), value.parse().ok()?))
        })
        .filter(|(_, value)| *value > 0.0)
        .collect()
}

/// Waits (up to 10 s) until the proxy has counted `expected` requests: a
/// request is counted when its response ends, which the client may see
/// first. Returns the series.
async fn counted(metrics: SocketAddr, expected: f64) -> Vec<(String, f64)> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let series = requests_counted(metrics).await;
        let total: f64 = series.iter().map(|(_, v)| v).sum();
        if total >= expected || tokio::time::Instant::now() > deadline {
            return series;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Asserts that the proxy counted exactly `expected` requests, each with
/// outcome `ok`.
async fn all_measured_ok(metrics: SocketAddr, expected: &Value) {
    let expected = expected.as_f64().expect("a request count");
    let series = counted(metrics, expected).await;
    let total: f64 = series.iter().map(|(_, v)| v).sum();
    assert_eq!(total, expected, "requests counted: {series:?}");
    for (name, _) in &series {
        assert!(name.contains("outcome=\"ok\""), "not ok: {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_clients_read_through_tokenclock_what_they_read_directly() {
    let sim = sim::start(sim::fast()).await;
    let proxy = common::proxy(sim.addr, "").await;
    let direct = python(sim.addr, None).await;
    let proxied = python(proxy.addr, None).await;
    let requests = proxied["requests"].clone();
    assert_eq!(requests, direct["requests"]);
    let scenarios = same(&direct, &proxied, "clients.py");
    assert_eq!(scenarios.len(), 16, "every scenario ran: {proxied}");

    // Connections kept alive: each session's requests took one connection.
    for name in ["aiohttp_keep_alive", "httpx_chunked_upload_and_keep_alive"] {
        assert_eq!(
            scenarios[name]["connections"], 1,
            "{name}: {}",
            scenarios[name]
        );
    }
    // The SDKs' own usage, read from the streams the proxy forwarded.
    assert_eq!(scenarios["openai_chat_stream"]["usage_chunks"], 0);
    assert_eq!(scenarios["openai_chat_stream_usage"]["usage"][1], 10);
    assert_eq!(scenarios["anthropic_stream"]["stop"], "max_tokens");
    // A whole answer came in gzip, as OpenAI's does: its tokens are
    // counted below only if the proxy read its copy inflated.
    assert_eq!(scenarios["openai_chat_whole"]["encoding"], "gzip");
    // llama.cpp's `/infill`: seven token events and the stop event.
    let infill = &scenarios["requests_llamacpp_infill"];
    assert_eq!(
        (&infill["events"], &infill["tokens"]),
        (&Value::from(8), &serde_json::json!([7, true]))
    );
    // vLLM's `/inference/v1/generate`: six ids for a prompt of four.
    let ids = &scenarios["httpx_vllm_token_ids"];
    assert_eq!(ids["usage"], serde_json::json!([4, 6]), "{ids}");
    let id_count = ids["ids"].as_array().map_or(0, Vec::len) as u64;
    assert_eq!(id_count, 6, "{ids}");

    // Every request measured, none as a failure.
    all_measured_ok(proxy.metrics_addr, &requests).await;
    // The proxy's output tokens are the tokens the clients read.
    let texts = |name: &str, key: &str| -> u64 {
        scenarios[name][key]
            .as_array()
            .expect("answers")
            .iter()
            .filter_map(|a| a.as_array()?.last().filter(|t| t.is_string()).map(words))
            .sum()
    };
    let chat = words(&scenarios["openai_chat_stream"]["text"])
        + words(&scenarios["openai_chat_stream_usage"]["text"])
        + words(&scenarios["openai_chat_whole"]["text"])
        + texts("aiohttp_keep_alive", "answers")
        + texts("httpx_chunked_upload_and_keep_alive", "answers");
    let expected = [
        ("openai_chat", chat),
        (
            "openai_completions",
            // Each id read is a token, as tokenclock counts it.
            words(&scenarios["openai_completions_stream"]["text"]) + id_count,
        ),
        (
            "openai_responses",
            words(&scenarios["openai_responses_stream"]["text"]),
        ),
        (
            "anthropic",
            words(&scenarios["anthropic_stream"]["text"])
                + words(&scenarios["anthropic_whole"]["text"]),
        ),
        (
            "ollama",
            words(&scenarios["requests_ollama_ndjson"]["text"]),
        ),
        (
            "llamacpp",
            words(&scenarios["requests_llamacpp_infill"]["text"])
                + words(&scenarios["requests_llamacpp_infill"]["whole"][0]),
        ),
    ];
    // huggingface_hub's InferenceClient on TGI's `POST /`, and SGLang's
    // `/generate` read with requests: their requests name no model.
    let unnamed = [
        (
            "tgi",
            words(&scenarios["hf_text_generation_stream"]["text"])
                + words(&scenarios["hf_text_generation_whole"]["text"]),
        ),
        (
            "sglang",
            words(&scenarios["requests_sglang_generate"]["text"]),
        ),
    ];
    let named = expected.into_iter().map(|(e, t)| (e, t, "m"));
    for (endpoint, tokens, model) in named.chain(unnamed.map(|(e, t)| (e, t, "unknown"))) {
        let series = format!(
            "tokenclock_output_tokens_total{{endpoint=\"{endpoint}\",kind=\"output\",model=\"{model}\"}}"
        );
        assert!(tokens > 0, "{endpoint}: the clients read no text");
        assert_eq!(
            client::metric(proxy.metrics_addr, &series).await,
            tokens as f64,
            "{series}"
        );
    }
    proxy.shutdown().await;
}

/// With `usage_mode = "inject"` the proxy asks the server for usage the
/// client did not ask for and removes it again: the OpenAI SDK sees the
/// chunks it sees directly, none with usage, and the proxy counts tokens
/// from the usage it removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_sees_no_injected_usage() {
    let sim = sim::start(sim::fast()).await;
    let proxy = common::proxy(sim.addr, "usage_mode = \"inject\"").await;
    let only = Some("openai_chat_stream,openai_completions_stream");
    let direct = python(sim.addr, only).await;
    let proxied = python(proxy.addr, only).await;
    for name in ["openai_chat_stream", "openai_completions_stream"] {
        let (d, p) = (&direct[name], &proxied[name]);
        assert!(
            p.get("error").is_none() && d.get("error").is_none(),
            "{name}: {d} / {p}"
        );
        // The simulator's words are keyed by the request body, which the
        // proxy changed; their number and every chunk's shape are not.
        assert_eq!(p["chunks"], d["chunks"], "{name}: {d} / {p}");
        assert_eq!(words(&p["text"]), words(&d["text"]), "{name}: {d} / {p}");
    }
    assert_eq!(proxied["openai_chat_stream"]["usage_chunks"], 0);
    assert_eq!(
        proxied["openai_chat_stream"]["finish"],
        direct["openai_chat_stream"]["finish"]
    );
    all_measured_ok(proxy.metrics_addr, &proxied["requests"]).await;
    // Both streams' tokens counted from the usage the proxy removed.
    let from_usage = "tokenclock_token_count_source_total{source=\"usage\"}";
    assert_eq!(
        client::metric(proxy.metrics_addr, from_usage).await,
        2.0,
        "{from_usage}"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_fetch_reads_through_tokenclock_what_it_reads_directly() {
    let sim = sim::start(sim::fast()).await;
    let proxy = common::proxy(sim.addr, "").await;
    let direct = node(sim.addr).await;
    let proxied = node(proxy.addr).await;
    let scenarios = same(&direct, &proxied, "fetch.mjs");
    assert_eq!(scenarios.len(), 6, "every scenario ran: {proxied}");
    assert_eq!(scenarios["chat_stream"]["type"], "text/event-stream");
    assert_eq!(words(&scenarios["chat_stream"]["text"]), 12);
    assert_eq!(scenarios["ollama_generate"]["done"], true);
    all_measured_ok(proxy.metrics_addr, &proxied["requests"]).await;
    proxy.shutdown().await;
}

/// curl with `args` and `body` (a file) to `path` on `addr`: its stdout
/// and its verbose stderr.
async fn curl(
    addr: SocketAddr,
    path: &str,
    args: &[&str],
    body: &std::path::Path,
) -> (String, String) {
    let output = client_command("curl")
        .args(["-sS", "-v", "-N", "-H", "content-type: application/json"])
        .args(args)
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .arg(format!("http://{addr}{path}"))
        .output()
        .await
        .expect("run curl");
    assert!(
        output.status.success(),
        "curl {args:?} failed: {}",
        stderr(&output)
    );
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr(&output),
    )
}

/// The text of the OpenAI chat chunks in an SSE body.
fn sse_text(body: &str) -> String {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// curl as an HTTP/1.0 client (the answer is close-delimited, not
/// chunked), with a 1.5 MB body, for which curl sends `Expect:
/// 100-continue` and waits for the `100 Continue` before the body, and
/// over h2c.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_http10_expect_continue_and_h2c_through_tokenclock() {
    let sim = sim::start(sim::fast()).await;
    let proxy = common::proxy(sim.addr, "").await;
    let dir = std::env::temp_dir().join(format!("tokenclock-clients-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let small = dir.join("small.json");
    let chat = |content: &str, tokens: u32| {
        serde_json::json!({"model": "m", "stream": true, "max_tokens": tokens,
            "messages": [{"role": "user", "content": content}]})
        .to_string()
    };
    std::fs::write(&small, chat("Say something about clocks.", 9)).expect("write");
    let large = dir.join("large.json");
    std::fs::write(&large, chat(&"clock ".repeat(250_000), 5)).expect("write");
    // A fixed schedule: the simulator's prefill of 1.5 MB would take a minute.
    let fixed = ["-H", "x-sim-schedule: ttft_ms=1,gap_ms=1,tokens=5"];

    let http10 = ["--http1.0"];
    let (direct, _) = curl(sim.addr, "/v1/chat/completions", &http10, &small).await;
    let (proxied, verbose) = curl(proxy.addr, "/v1/chat/completions", &http10, &small).await;
    assert!(verbose.contains("< HTTP/1.0 200"), "{verbose}");
    assert!(
        !verbose.to_ascii_lowercase().contains("transfer-encoding"),
        "{verbose}"
    );
    assert_eq!(sse_text(&proxied), sse_text(&direct));
    assert_eq!(
        sse_text(&proxied).split_whitespace().count(),
        9,
        "{proxied}"
    );

    let (direct, _) = curl(sim.addr, "/v1/chat/completions", &fixed, &large).await;
    let (proxied, verbose) = curl(proxy.addr, "/v1/chat/completions", &fixed, &large).await;
    assert!(verbose.contains("> Expect: 100-continue"), "{verbose}");
    assert!(verbose.contains("< HTTP/1.1 100 Continue"), "{verbose}");
    assert!(verbose.contains("< HTTP/1.1 200"), "{verbose}");
    assert_eq!(sse_text(&proxied), sse_text(&direct));
    assert_eq!(
        sse_text(&proxied).split_whitespace().count(),
        5,
        "{proxied}"
    );

    // h2c with prior knowledge (nghttp2), the same stream.
    let h2c = ["--http2-prior-knowledge"];
    let (direct, _) = curl(sim.addr, "/v1/chat/completions", &h2c, &small).await;
    let (proxied, verbose) = curl(proxy.addr, "/v1/chat/completions", &h2c, &small).await;
    assert!(verbose.contains("< HTTP/2 200"), "{verbose}");
    assert_eq!(sse_text(&proxied), sse_text(&direct));
    assert_eq!(
        sse_text(&proxied).split_whitespace().count(),
        9,
        "{proxied}"
    );

    all_measured_ok(proxy.metrics_addr, &Value::from(3)).await;
    let _ = std::fs::remove_dir_all(&dir);
    proxy.shutdown().await;
}

/// The OpenAI SDK closing a stream early (a user who pressed stop): it
/// reads the same chunks through the proxy, and the proxy counts the
/// request as cancelled by the client, not as a failure of the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_stream_closed_early_is_counted_as_cancelled() {
    let sim = sim::start(sim::fast()).await;
    let proxy = common::proxy(sim.addr, "").await;
    let only = Some("openai_chat_stream_closed_early");
    let direct = python(sim.addr, only).await;
    let proxied = python(proxy.addr, only).await;
    let scenarios = same(&direct, &proxied, "clients.py");
    assert_eq!(scenarios["openai_chat_stream_closed_early"]["chunks"], 3);
    let series = counted(proxy.metrics_addr, 1.0).await;
    assert_eq!(series.len(), 1, "{series:?}");
    assert!(
        series[0].0.contains("outcome=\"client_cancelled\""),
        "{series:?}"
    );
    proxy.shutdown().await;
}

/// An upstream in Python (`tests/clients/SCRIPT ARG`), on a port of its
/// own, which it prints; killed when dropped: compressing_upstream.py,
/// which answers in `br` or `zstd` whoever accepts it, or realtime.py's
/// WebSocket server.
struct PythonUpstream {
    addr: SocketAddr,
    _child: tokio::process::Child,
}

impl PythonUpstream {
    async fn start(script: &str, arg: &str) -> Self {
        use tokio::io::AsyncBufReadExt;
        let python = root().join("target/venv-clients/bin/python");
        let mut child = Command::new(python)
            .arg(root().join("tests/clients").join(script))
            .arg(arg)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run the upstream (tests/clients/venv.sh makes its venv)");
        let stdout = child.stdout.take().expect("its stdout");
        let mut port = String::new();
        tokio::io::BufReader::new(stdout)
            .read_line(&mut port)
            .await
            .expect("its port");
        let port: u16 = port.trim().parse().expect("a port");
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            _child: child,
        }
    }

    /// How many answers went out compressed.
    async fn compressed_answers(&self) -> Value {
        let body = client::get(self.addr, "/stats").await.body();
        serde_json::from_slice::<Value>(&body).expect("stats")["compressed"].clone()
    }
}

/// The client half of a two-ended script (`tests/clients/SCRIPT client
/// URL`) against `addr`: what it read, per scenario.
async fn script_client(script: &str, addr: SocketAddr) -> Value {
    let mut command = client_command(root().join("target/venv-clients/bin/python"));
    command
        .arg(root().join("tests/clients").join(script))
        .arg("client")
        .arg(format!("http://{addr}"));
    json_of(command, script).await
}

/// The words of every text in `scenarios`' results: a scenario's `text`,
/// and the text each of its `answers` ends with.
fn all_words(scenarios: &BTreeMap<String, Value>) -> u64 {
    let answers = |result: &Value| -> u64 {
        result["answers"].as_array().map_or(0, |answers| {
            answers
                .iter()
                .filter_map(|a| a.as_array()?.last().filter(|t| t.is_string()).map(words))
                .sum()
        })
    };
    scenarios
        .values()
        .map(|result| result.get("text").map_or(0, words) + answers(result))
        .sum()
}

/// An upstream that compresses with brotli, as OpenAI and its CDN do for
/// clients that accept `br`, or with zstd, as other providers do (httpx,
/// the OpenAI SDK's client and aiohttp ask for `br`, httpx and aiohttp for
/// `zstd` too, once the `brotli` and `zstandard` packages are installed):
/// each client reads the same streamed and whole chats through the proxy
/// as directly, and the proxy reads its copies decoded, so it counts the
/// tokens the clients read and no unreadable payload. Google's and
/// Facebook's encoders, flushed per event, on the wire; their decoders in
/// the clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brotli_and_zstd_answers_are_read_as_the_clients_read_them() {
    let clients = "aiohttp_keep_alive,httpx_chunked_upload_and_keep_alive";
    let openai = "openai_chat_stream_usage,openai_chat_whole";
    // The OpenAI SDK's client does not accept zstd: 8 and 6 answers each way.
    for (coding, only, compressed) in [
        ("br", format!("{openai},{clients}"), 16),
        ("zstd", clients.to_owned(), 12),
    ] {
        let upstream = PythonUpstream::start("compressing_upstream.py", coding).await;
        let proxy = common::proxy(upstream.addr, "").await;
        let direct = python(upstream.addr, Some(&only)).await;
        let proxied = python(proxy.addr, Some(&only)).await;
        let scenarios = same(&direct, &proxied, "clients.py");
        if coding == "br" {
            assert_eq!(scenarios["openai_chat_whole"]["encoding"], coding);
        }
        assert_eq!(
            upstream.compressed_answers().await,
            compressed,
            "the clients did not ask for {coding} every time"
        );
        all_measured_ok(proxy.metrics_addr, &proxied["requests"]).await;
        let tokens = all_words(&scenarios);
        assert!(tokens > 20, "{coding}: {tokens} words read");
        let series =
            "tokenclock_output_tokens_total{endpoint=\"openai_chat\",kind=\"output\",model=\"m\"}";
        assert_eq!(
            client::metric(proxy.metrics_addr, series).await,
            tokens as f64,
            "{coding}"
        );
        let metrics =
            String::from_utf8_lossy(&client::get(proxy.metrics_addr, "/metrics").await.body())
                .into_owned();
        assert!(
            !metrics
                .lines()
                .any(|l| l.starts_with("tokenclock_parse_errors_total{")),
            "{coding}: {metrics}"
        );
        proxy.shutdown().await;
    }
}

/// The OpenAI SDK stops reading a stream at `[DONE]` and closes it (its
/// `Stream` breaks there, then closes the response). A server that ends
/// its body in a write of its own after `[DONE]` (uvicorn sends a Starlette
/// `StreamingResponse`'s last chunk so) leaves the proxy a response that
/// has not ended when the client goes. The client had the whole answer:
/// `ok`, not `client_cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sdk_that_closes_at_done_before_the_body_ends_is_counted_ok() {
    let event = |data: String| Step::Write(chunk(format!("data: {data}\n\n").as_bytes()));
    let delta = |content: &str, finish: &str| {
        format!(
            r#"{{"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{"content":"{content}"}},"finish_reason":{finish}}}]}}"#
        )
    };
    let mut script = vec![Step::Write(chunked_head("text/event-stream"))];
    for word in [" one", " two", " three"] {
        script.push(event(delta(word, "null")));
    }
    script.push(event(delta("", "\"stop\"")));
    script.push(event("[DONE]".into()));
    script.push(Step::Pause(std::time::Duration::from_millis(500)));
    script.push(Step::Write(bytes("0\r\n\r\n")));
    let upstream = Scripted::start(script).await;
    let proxy = common::proxy(upstream.addr, "").await;
    let only = Some("openai_chat_stream");
    let direct = python(upstream.addr, only).await;
    let proxied = python(proxy.addr, only).await;
    let scenarios = same(&direct, &proxied, "clients.py");
    assert_eq!(scenarios["openai_chat_stream"]["text"], " one two three");
    all_measured_ok(proxy.metrics_addr, &Value::from(1)).await;
    proxy.shutdown().await;
}

/// A Realtime API session over WebSocket (`ws://…/v1/realtime`, as vLLM
/// serves it) through tokenclock: the OpenAI Python SDK's realtime client
/// and the `websockets` library read the same events through the proxy as
/// directly (tests/clients/realtime.py, whose server speaks the events of
/// vLLM's streaming transcription), and each session is one request,
/// counted `ok` under code 101.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_sessions_over_websocket_go_through_as_they_do_directly() {
    let upstream = PythonUpstream::start("realtime.py", "serve").await;
    let proxy = common::proxy(upstream.addr, "").await;
    let direct = script_client("realtime.py", upstream.addr).await;
    let proxied = script_client("realtime.py", proxy.addr).await;
    if std::env::var("TOKENCLOCK_IT_HTTP1_SERVER").as_deref() == Ok("hyper") {
        // hyper's server does not switch: the upstream refuses the handshake.
        for scenario in ["openai_realtime", "websockets"] {
            assert!(proxied[scenario].get("error").is_some(), "{proxied}");
        }
        return;
    }
    let scenarios = same(&direct, &proxied, "realtime.py");
    assert_eq!(scenarios["websockets"]["close_code"], 1000);
    assert_eq!(
        scenarios["openai_realtime"]["usage"]["completion_tokens"],
        6
    );
    let metrics =
        String::from_utf8_lossy(&client::get(proxy.metrics_addr, "/metrics").await.body())
            .into_owned();
    let sessions: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("tokenclock_requests_total{") && l.contains("code=\"101\""))
        .collect();
    assert_eq!(sessions.len(), 1, "{metrics}");
    // Two sessions each way; these are the proxied ones.
    assert!(sessions[0].ends_with(" 2"), "{}", sessions[0]);
    assert!(sessions[0].contains("outcome=\"ok\""), "{}", sessions[0]);
    proxy.shutdown().await;
}

/// Speech to text through tokenclock (tests/clients/transcriptions.py,
/// both ends): the OpenAI SDK's transcriptions and translations, streamed
/// in OpenAI's events and in vLLM's chunks, and whole, and httpx streaming
/// a translation as vLLM's example does, read the same through the proxy
/// as directly. Each request is read as `openai_audio`, under the model its
/// form named (OpenAI's events name none), its streamed answers timed from
/// their first word, its output counted as the client read it (from the
/// usage, else one word per chunk, else estimated from a whole text that
/// came with seconds of audio for usage), and its input from the usage
/// only: audio bytes tell no token count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speech_to_text_reads_the_same_through_tokenclock_and_is_measured() {
    let upstream = PythonUpstream::start("transcriptions.py", "serve").await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let direct = script_client("transcriptions.py", upstream.addr).await;
    let proxied = script_client("transcriptions.py", proxy.addr).await;
    let scenarios = same(&direct, &proxied, "transcriptions.py");
    assert_eq!(scenarios["openai_stream"]["deltas"][0][1], 1, "{direct}");
    assert_eq!(
        scenarios["vllm_stream"]["usage"]["completion_tokens"], 12,
        "{direct}"
    );
    // Scenario, model, streamed, where the output count came from, and
    // whether the usage gave the input.
    let want = [
        (
            "openai_stream",
            "gpt-4o-mini-transcribe",
            true,
            "usage",
            true,
        ),
        (
            "vllm_stream",
            "openai/whisper-large-v3",
            true,
            "usage",
            true,
        ),
        (
            "httpx_translation_stream",
            "openai/whisper-large-v3",
            true,
            "events",
            false,
        ),
        ("openai_whole", "gpt-4o-transcribe", false, "usage", true),
        ("whisper_whole", "whisper-1", false, "estimated", false),
    ];
    let mut seen = Vec::new();
    for _ in &want {
        seen.push(common::next_timeline(&mut timelines).await);
    }
    // In the order the client sent them (each ends as the next begins).
    seen.sort_by_key(|t| t.start);
    for ((name, model, streamed, source, input), t) in want.into_iter().zip(seen) {
        assert_eq!(t.dialect.as_str(), "openai_audio", "{name}");
        assert_eq!(t.model.as_deref(), Some(model), "{name}");
        assert_eq!(t.outcome.as_str(), "ok", "{name}");
        assert_eq!(t.first_token.is_some(), streamed, "{name}: TTFT");
        let counted = t.tokens.generated_source.map(|s| s.as_str());
        assert_eq!(counted, Some(source), "{name}");
        if source != "estimated" {
            assert_eq!(t.tokens.generated, 12, "{name}: one token a word");
        }
        let from_usage = (t.tokens.input == Some(120)).then_some("usage");
        let expected = input.then_some("usage");
        assert_eq!(from_usage, expected, "{name}: input {:?}", t.tokens.input);
        if !input {
            assert_eq!(t.tokens.input, None, "{name}: no input estimate from audio");
        }
    }
    proxy.shutdown().await;
}

/// Embeddings through tokenclock (tests/clients/embeddings.py, both ends):
/// the OpenAI SDK's batches (base64, as it asks by default, and floats:
/// MiBs, past `max_event_bytes`, gzip-compressed as OpenAI answers), vLLM's
/// compact answers to text and to token ids, httpx on `/embeddings`, and
/// Ollama's own client on `/api/embed` and its former `/api/embeddings`,
/// and TEI's clients (huggingface_hub's InferenceClient on `POST /`, which
/// TGI answers too; httpx on `/embed`, `/rerank` and `/predict`), read the
/// same through the proxy as directly. Each request is read as
/// `openai_embeddings`, `ollama_embed` or `tei` under its model (TEI's
/// name none), with no first token, its input tokens the count its client
/// read (the former Ollama route reports none: estimated from the prompt;
/// TEI's head reports it), nothing generated, and no parse error: the
/// answers are read by their ends, whatever their size, TEI's by its head.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_read_the_same_through_tokenclock_and_are_measured() {
    let upstream = PythonUpstream::start("embeddings.py", "serve").await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let direct = script_client("embeddings.py", upstream.addr).await;
    let proxied = script_client("embeddings.py", proxy.addr).await;
    let scenarios = same(&direct, &proxied, "embeddings.py");
    let (openai, ollama, tei) = ("openai_embeddings", "ollama_embed", "tei");
    let names = [
        ("openai_batch_base64", openai),
        ("openai_batch_float", openai),
        ("vllm_batch_float", openai),
        ("vllm_token_ids", openai),
        ("httpx_one", openai),
        ("ollama_embed_batch", ollama),
        ("ollama_embeddings_former", ollama),
        ("hf_feature_extraction", tei),
        ("tei_embed_batch", tei),
        ("tei_rerank", tei),
        ("tei_predict", tei),
    ];
    assert_eq!(scenarios["openai_batch_float"]["vectors"], 96, "{direct}");
    assert_eq!(
        scenarios["openai_batch_float"]["encoding"], "gzip",
        "{direct}"
    );
    assert_eq!(
        scenarios["hf_feature_extraction"]["vectors"], 16,
        "{direct}"
    );
    assert_eq!(
        scenarios["tei_rerank"]["ranks"].as_array().map(Vec::len),
        Some(20)
    );
    let mut seen = Vec::new();
    for _ in names {
        seen.push(common::next_timeline(&mut timelines).await);
    }
    // In the order the client sent them (each ends as the next begins).
    seen.sort_by_key(|t| t.start);
    for ((name, endpoint), t) in names.into_iter().zip(seen) {
        let read = &scenarios[name];
        let model = read["model"].as_str();
        assert_eq!(t.dialect.as_str(), endpoint, "{name}");
        assert_eq!(t.response_model.as_deref(), model, "{name}");
        assert_eq!(t.outcome.as_str(), "ok", "{name}");
        assert_eq!(t.parse_errors, vec![], "{name}");
        assert_eq!(t.first_token, None, "{name}: no TTFT");
        assert_eq!(t.tokens.generated, 0, "{name}");
        let source = t.tokens.input_source.map(|s| s.as_str());
        match read["prompt_tokens"].as_u64() {
            Some(count) => {
                assert_eq!(t.model.as_deref(), model, "{name}");
                assert_eq!(t.tokens.input, Some(count), "{name}");
                assert_eq!(source, Some("usage"), "{name}");
            }
            None => {
                assert_eq!(t.model.as_deref(), Some("nomic-embed-text"), "{name}");
                // "where do limpets live": 21 bytes.
                assert_eq!(t.tokens.input, Some(6), "{name}");
                assert_eq!(source, Some("estimated"), "{name}");
            }
        }
    }
    proxy.shutdown().await;
}

/// Reranks through tokenclock (tests/clients/rerank.py, both ends):
/// Cohere's Python SDK, v2 and v1, against Cohere's own answer (no model,
/// no token count) and vLLM's (`/v2/rerank`, as vLLM's docs call it with
/// that SDK), httpx on Jina's `/v1/rerank` with every document echoed
/// (about 1.3 MB, past `max_event_bytes`), vLLM's `/rerank` and its pair
/// scoring `/score`, and SGLang's `/v1/rerank` (a bare array), read the
/// same through the proxy as directly. Each request is read as `rerank`,
/// under the model it named, with no first token, nothing generated, no
/// parse error, and its input tokens the answer's usage, or, where the
/// answer has none (Cohere's, SGLang's), estimated from the query and
/// documents sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reranks_read_the_same_through_tokenclock_and_are_measured() {
    let upstream = PythonUpstream::start("rerank.py", "serve").await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let direct = script_client("rerank.py", upstream.addr).await;
    let proxied = script_client("rerank.py", proxy.addr).await;
    let scenarios = same(&direct, &proxied, "rerank.py");
    let names = [
        ("cohere_v2", "rerank-v3.5"),
        ("cohere_v2_on_vllm", "BAAI/bge-reranker-v2-m3"),
        ("cohere_v1", "rerank-english-v3.0"),
        ("jina_all", "jina-reranker-v2-base-multilingual"),
        ("vllm_rerank", "BAAI/bge-reranker-v2-m3"),
        ("sglang_rerank", "Qwen/Qwen3-Reranker-0.6B"),
        ("vllm_score", "BAAI/bge-reranker-v2-m3"),
    ];
    assert_eq!(
        scenarios["jina_all"]["ranks"].as_array().map(Vec::len),
        Some(300),
        "{direct}"
    );
    let mut seen = Vec::new();
    for _ in names {
        seen.push(common::next_timeline(&mut timelines).await);
    }
    seen.sort_by_key(|t| t.start);
    for ((name, model), t) in names.into_iter().zip(seen) {
        let read = &scenarios[name];
        assert_eq!(t.dialect.as_str(), "rerank", "{name}");
        assert_eq!(t.model.as_deref(), Some(model), "{name}");
        assert_eq!(
            t.response_model.as_deref(),
            read["model"].as_str(),
            "{name}"
        );
        assert_eq!(t.outcome.as_str(), "ok", "{name}");
        assert_eq!(t.parse_errors, vec![], "{name}");
        assert_eq!(t.first_token, None, "{name}: no TTFT");
        assert_eq!(t.tokens.generated, 0, "{name}");
        let source = t.tokens.input_source.map(|s| s.as_str());
        match read["prompt_tokens"].as_u64() {
            Some(count) => {
                assert_eq!(t.tokens.input, Some(count), "{name}");
                assert_eq!(source, Some("usage"), "{name}");
            }
            None => {
                let bytes = read["text_bytes"].as_u64().expect("text_bytes");
                assert_eq!(t.tokens.input, Some(bytes.div_ceil(4)), "{name}");
                assert_eq!(source, Some("estimated"), "{name}");
            }
        }
    }
    proxy.shutdown().await;
}
