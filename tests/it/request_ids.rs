//! Requests you can find again: the caller's request id, its W3C trace
//! context and the id the server gave its response reach the records and
//! the access log, `tokenclock report --request-id / --trace-id` finds one
//! request among many (across rotated files) and prints its timeline, and
//! tokenclock adds or changes no header on the way.

use std::{path::Path, process::Command};

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use serde_json::Value;

use crate::{
    common::{
        self,
        client::{collect, send},
        process,
        sim::{self, fast, payloads, post},
        upstream::Echo,
    },
    records::temp_dir,
};

const TRACE_CHAT: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACE_MSG: &str = "0af7651916cd43dd8448eb211c80319c";
const PARENT: &str = "00f067aa0ba902b7";

fn traceparent(trace: &str) -> String {
    format!("00-{trace}-{PARENT}-01")
}

/// One request sent through the proxy: what it carried and the response
/// id the simulator gave it, read from what the client received.
struct Sent {
    request_id: &'static str,
    trace: Option<&'static str>,
    response_id: Option<String>,
}

async fn send_one(
    addr: std::net::SocketAddr,
    path: &str,
    body: &str,
    request_id: &'static str,
    trace: Option<&'static str>,
    id_of: fn(&[u8]) -> Option<String>,
) -> Sent {
    let tp = trace.map(traceparent);
    let mut headers = vec![("x-request-id", request_id)];
    if let Some(tp) = &tp {
        headers.push(("traceparent", tp.as_str()));
    }
    let response = post(addr, path, body, &headers).await.expect("whole body");
    assert_eq!(response.status, 200, "{path}");
    Sent {
        request_id,
        trace,
        response_id: id_of(&response.body()),
    }
}

fn stream_id(body: &[u8]) -> Option<String> {
    payloads(body)[0]["id"].as_str().map(str::to_owned)
}

fn message_id(body: &[u8]) -> Option<String> {
    payloads(body)[0]["message"]["id"]
        .as_str()
        .map(str::to_owned)
}

fn response_id(body: &[u8]) -> Option<String> {
    payloads(body)[0]["response"]["id"]
        .as_str()
        .map(str::to_owned)
}

fn body_id(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).expect("a JSON body");
    v["id"].as_str().map(str::to_owned)
}

fn no_id(_: &[u8]) -> Option<String> {
    None
}

fn report(files: &[String], args: &[&str]) -> std::process::Output {
    Command::new(process::BIN)
        .arg("report")
        .args(files)
        .args(args)
        .output()
        .expect("tokenclock report runs")
}

/// Every record file of `dir`, the live one and the rotated ones.
fn record_files(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .expect("records dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path().display().to_string())
        .filter(|p| p.contains("records.jsonl"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn ids_reach_records_the_access_log_and_report_finds_each_request() {
    let sim = sim::start(fast()).await;
    let dir = temp_dir("ids");
    let config = dir.join("tokenclock.toml");
    let records = dir.join("records.jsonl");
    // Small files, so the records of these requests span rotated ones.
    let text = format!(
        "[records]\npath = \"{}\"\nmax_bytes = 3000\nkeep = 20\n",
        records.display()
    );
    std::fs::write(&config, text).expect("config");
    let served = process::serve(
        sim.addr,
        &[
            "--config",
            config.to_str().expect("utf-8"),
            "--log-format",
            "json",
        ],
        &[],
    );
    let chat = r#"{"model":"sim-think","stream":true,"max_tokens":24,"messages":[{"role":"user","content":"hi"}]}"#;
    let msg = r#"{"model":"sim-llama","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
    let resp = r#"{"model":"sim-llama","stream":true,"max_output_tokens":8,"input":"hi"}"#;
    let whole = r#"{"model":"sim-llama","stream":false,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]}"#;
    let ollama = r#"{"model":"sim-llama","stream":true,"messages":[{"role":"user","content":"hi"}],"options":{"num_predict":8}}"#;
    let addr = served.addr;
    let chat_path = "/v1/chat/completions";
    let sent = [
        send_one(
            addr,
            chat_path,
            chat,
            "req-chat",
            Some(TRACE_CHAT),
            stream_id,
        )
        .await,
        send_one(
            addr,
            "/v1/messages",
            msg,
            "req-msg",
            Some(TRACE_MSG),
            message_id,
        )
        .await,
        send_one(addr, "/v1/responses", resp, "req-resp", None, response_id).await,
        send_one(addr, chat_path, whole, "req-body", None, body_id).await,
        send_one(addr, "/api/chat", ollama, "req-ollama", None, no_id).await,
    ];
    // The simulator's ids, as the clients received them.
    let prefixes = [
        Some("chatcmpl-"),
        Some("msg_"),
        Some("resp_"),
        Some("chatcmpl-"),
        None,
    ];
    for (s, prefix) in sent.iter().zip(prefixes) {
        let id = s.response_id.as_deref();
        let ok = match prefix {
            Some(prefix) => id.is_some_and(|id| id.starts_with(prefix)),
            None => id.is_none(),
        };
        assert!(ok, "{}: {id:?}", s.request_id);
    }
    served.sigterm();
    let (status, log) = served.wait().await;
    assert_eq!(status.code(), Some(0));

    let files = record_files(&dir);
    assert!(files.len() > 1, "the records span rotated files: {files:?}");
    let records: Vec<Value> = files
        .iter()
        .map(|f| std::fs::read_to_string(f).expect("records"))
        .collect::<String>()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a record per line"))
        .collect();
    assert_eq!(records.len(), sent.len(), "{records:#?}");
    let access: Vec<Value> = log
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["target"] == "tokenclock::access")
        .collect();
    for s in &sent {
        let record = records
            .iter()
            .find(|r| r["request_id"] == s.request_id)
            .unwrap_or_else(|| panic!("a record of {}", s.request_id));
        let line = access
            .iter()
            .find(|l| l["request_id"] == s.request_id)
            .unwrap_or_else(|| panic!("an access log line of {}: {log:#?}", s.request_id));
        let want_trace = s.trace.map(str::to_owned);
        let want_parent = s.trace.map(|_| PARENT.to_owned());
        for (what, fields) in [("record", record), ("log line", line)] {
            let field = |key: &str| fields[key].as_str().map(str::to_owned);
            assert_eq!(field("trace_id"), want_trace, "{what} of {}", s.request_id);
            assert_eq!(
                field("parent_span_id"),
                want_parent,
                "{what} of {}",
                s.request_id
            );
            assert_eq!(
                field("response_id"),
                s.response_id,
                "{what} of {}",
                s.request_id
            );
        }
        // Absent ids are null in a record, never missing or empty.
        for key in ["trace_id", "parent_span_id", "response_id"] {
            assert!(
                record[key].is_string() || record[key].is_null(),
                "{key}: {record}"
            );
        }
    }

    // report --trace-id: that request's timeline, and no other's.
    let chat_record = records
        .iter()
        .find(|r| r["request_id"] == "req-chat")
        .expect("chat record");
    let out = report(&files, &["--trace-id", TRACE_CHAT]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let chat_id = sent[0].response_id.as_deref().expect("id");
    let ttft = chat_record["ttft_ms"].as_f64().expect("ttft");
    let decode = chat_record["phases_ms"]["decode"].as_f64().expect("decode");
    for want in [
        "== request 1 of 1 ==".to_owned(),
        "request_id    req-chat".to_owned(),
        format!("trace_id      {TRACE_CHAT} (parent span {PARENT})"),
        format!("response_id   {chat_id}"),
        format!("TTFT {ttft:.2}"),
        format!("decode {decode:.2}"),
        "headers→first token".to_owned(),
        "reasoning".to_owned(),
        "output 24 (".to_owned(),
        "arrivals      |".to_owned(),
        "token-bearing events".to_owned(),
    ] {
        assert!(stdout.contains(&want), "{want:?} in\n{stdout}");
    }
    for other in ["req-msg", "req-resp", "req-body", "req-ollama"] {
        assert!(!stdout.contains(other), "{other} in\n{stdout}");
    }

    // report --request-id: another request, found the same way.
    let out = report(&files, &["--request-id", "req-msg"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let msg_id = sent[1].response_id.as_deref().expect("id");
    assert!(
        stdout.contains(&format!("response_id   {msg_id}")),
        "{stdout}"
    );
    assert!(stdout.contains("request       anthropic ·"), "{stdout}");
    assert!(
        !stdout.contains("req-chat") && !stdout.contains(chat_id),
        "{stdout}"
    );

    // No match: one line on stderr, exit 1, nothing on stdout.
    let out = report(&files, &["--request-id", "nope"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("no record with request_id `nope` in 5 records"),
        "{stderr}"
    );
}

/// The ids are read, never written: the upstream receives the caller's
/// id and trace headers as sent (no new ones), and the client receives
/// none the upstream did not send.
#[tokio::test]
async fn tokenclock_adds_or_changes_no_id_or_trace_header() {
    let mut echo = Echo::start().await;
    let proxy = common::proxy(echo.addr, "").await;
    let sent = [
        ("x-request-id", "req-7"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
        ("tracestate", "vendor=opaque"),
        ("x-correlation-id", "corr-1"),
    ];
    let mut request =
        Request::post("/v1/chat/completions").header("content-type", "application/json");
    for (name, value) in sent {
        request = request.header(name, value);
    }
    let body = Full::new(Bytes::from_static(b"{\"stream\":true}"));
    let response = send(proxy.addr, request.body(body).expect("request"))
        .await
        .expect("response");
    let seen = echo.next().await;
    for (name, value) in sent {
        let values: Vec<&[u8]> = seen
            .headers
            .get_all(name)
            .iter()
            .map(|v| v.as_bytes())
            .collect();
        assert_eq!(values, [value.as_bytes()], "{name}");
    }
    let mut names: Vec<&str> = seen.headers.keys().map(|n| n.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "content-length",
            "content-type",
            "host",
            "traceparent",
            "tracestate",
            "x-correlation-id",
            "x-request-id"
        ],
        "the upstream saw exactly the client's headers"
    );
    let collected = collect(response).await.expect("body");
    for name in [
        "x-request-id",
        "traceparent",
        "tracestate",
        "x-correlation-id",
    ] {
        assert!(
            collected.headers.get(name).is_none(),
            "{name} added to the response"
        );
    }
}
