//! The simulator in this process, and requests to it (directly or through
//! the proxy).

use std::net::SocketAddr;

use bytes::Bytes;
use http::Request;
use http_body_util::Full;
use tokenclock::tools::sim::{self, SimConfig};
use tokio::sync::oneshot;

use super::client::{collect, send, Collected};

/// A simulator running in this process; stops when dropped.
pub struct Sim {
    pub addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// Starts a simulator on `127.0.0.1:0`.
pub async fn start(config: SimConfig) -> Sim {
    let bound = sim::bind("127.0.0.1:0".parse().expect("addr"), config)
        .await
        .expect("bind the simulator");
    let addr = bound.local_addr().expect("sim addr");
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    Sim { addr, _stop: stop }
}

/// A fast simulator: 2 ms per decode step, no batch penalty.
pub fn fast() -> SimConfig {
    SimConfig {
        decode_ms_per_token: 2.0,
        batch_penalty_ms: 0.0,
        ..SimConfig::default()
    }
}

/// POSTs `body` to `path` on `addr` with extra headers; `Err` if the body
/// was cut.
pub async fn post(
    addr: SocketAddr,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Result<Collected, hyper::Error> {
    let mut request = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let request = request
        .body(Full::new(Bytes::from(body.to_owned())))
        .expect("request");
    collect(send(addr, request).await.expect("response head")).await
}

/// POSTs `fields` and then an audio file of `audio` bytes as a
/// `multipart/form-data` form, as the OpenAI SDKs send speech to text.
pub async fn post_form(
    addr: SocketAddr,
    path: &str,
    fields: &[(&str, &str)],
    audio: usize,
) -> Result<Collected, hyper::Error> {
    let boundary = "sim-form-5f2c";
    let audio: Vec<u8> = (0..audio).map(|i| (i % 251) as u8).collect();
    let mut parts: Vec<(&str, Option<&str>, &[u8])> = fields
        .iter()
        .map(|(name, value)| (*name, None, value.as_bytes()))
        .collect();
    parts.push(("file", Some("speech.wav"), &audio));
    let body = super::form(boundary, &parts);
    let request = Request::post(path)
        .header("host", addr.to_string())
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(Full::new(Bytes::from(body)))
        .expect("request");
    collect(send(addr, request).await.expect("response head")).await
}

/// The JSON payloads of an SSE or NDJSON body, `[DONE]` left out.
pub fn payloads(body: &[u8]) -> Vec<serde_json::Value> {
    let text = std::str::from_utf8(body).expect("utf-8 body");
    text.lines()
        .map(|line| line.strip_prefix("data: ").unwrap_or(line))
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).expect("a JSON event"))
        .collect()
}
