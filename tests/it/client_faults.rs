//! A client's faults are the client's: a malformed request body is a `400`,
//! a client that leaves mid-upload is `client_cancelled`, a stalled upload
//! is a `408` after `request_body_timeout`; never an upstream failure.

use std::time::Duration;

use crate::common::{
    self,
    client::read_head,
    next_timeline,
    upstream::{bytes, head, Event, Scripted, Step},
};
use tokenclock::measure::timeline::Outcome;
use tokio::{io::AsyncWriteExt, net::TcpStream};

/// The head of a chunked chat-completions upload.
const CHUNKED_HEAD: &[u8] =
    b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n";

/// An upstream that takes the request and never answers.
async fn silent_upstream() -> Scripted {
    Scripted::start(vec![Step::Pause(Duration::from_secs(30))]).await
}

/// Opens a connection to `proxy` and sends the head and first chunk.
async fn start_upload(proxy: &common::Proxy) -> TcpStream {
    let mut client = TcpStream::connect(proxy.addr).await.expect("connect");
    client.write_all(CHUNKED_HEAD).await.expect("head");
    client.write_all(b"5\r\n{\"mod\r\n").await.expect("chunk");
    client
}

async fn metrics(proxy: &common::Proxy) -> String {
    let response = common::client::get(proxy.metrics_addr, "/metrics").await;
    String::from_utf8(response.body()).expect("UTF-8 exposition")
}

#[tokio::test]
async fn a_malformed_chunked_body_is_a_400_not_a_502() {
    let mut upstream = silent_upstream().await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let mut client = start_upload(&proxy).await;
    upstream.next_request().await;
    client.write_all(b"ZZ\r\n").await.expect("bad chunk size");
    let (status, head) = read_head(&mut client).await;
    assert_eq!(status, 400, "{head}");
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::HttpError);
    assert_eq!(t.status.map(|s| s.as_u16()), Some(400));
    let text = metrics(&proxy).await;
    assert!(text.contains("code=\"400\""), "{text}");
    assert!(!text.contains("outcome=\"upstream_error\""), "{text}");
}

#[tokio::test]
async fn a_client_gone_mid_upload_is_cancelled_not_an_upstream_error() {
    let mut upstream = silent_upstream().await;
    let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, "").await;
    let client = start_upload(&proxy).await;
    upstream.next_request().await;
    drop(client);
    let t = next_timeline(&mut timelines).await;
    assert_eq!(t.outcome, Outcome::ClientCancelled);
    let text = metrics(&proxy).await;
    assert!(text.contains("outcome=\"client_cancelled\""), "{text}");
    assert!(!text.contains("outcome=\"upstream_error\""), "{text}");
}

#[tokio::test]
async fn a_stalled_upload_is_a_408_and_frees_the_upstream() {
    // Streamed, and read whole first for `usage_mode = "inject"`.
    for mode in ["passive", "inject"] {
        let mut upstream = silent_upstream().await;
        let config = format!(
            "request_body_timeout = \"300ms\"\nresponse_header_timeout = \"20s\"\n\
             usage_mode = \"{mode}\""
        );
        let (proxy, mut timelines) = common::proxy_with_timelines(upstream.addr, &config).await;
        let mut client = start_upload(&proxy).await;
        if mode == "passive" {
            upstream.next_request().await;
        }
        let (status, head) = read_head(&mut client).await;
        assert_eq!(status, 408, "{mode}: {head}");
        let t = next_timeline(&mut timelines).await;
        assert_eq!(t.outcome, Outcome::ClientTimeout, "{mode}");
        let text = metrics(&proxy).await;
        assert!(
            text.contains("outcome=\"client_timeout\""),
            "{mode}: {text}"
        );
        if mode == "passive" {
            // The upstream request was dropped, not left to its own timeout.
            let closed = upstream.next_event(Duration::from_secs(5)).await;
            assert!(matches!(closed, Some(Event::PeerClosed(_))), "{mode}");
        }
    }
}

/// Reads what `client` is sent until the proxy closes the connection (up
/// to 10 s): the text, and whether it closed.
async fn read_to_close(client: &mut TcpStream) -> (String, bool) {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut answer));
    let closed = matches!(read.await, Ok(Ok(_)));
    (String::from_utf8_lossy(&answer).into_owned(), closed)
}

/// An upstream that answers `413` (with its own `Connection: close`,
/// hop-by-hop) as soon as a request's head comes, before its body ends.
async fn too_large_at_once() -> Scripted {
    let too_large = head(
        "413 Payload Too Large",
        &["content-length: 2", "connection: close"],
    );
    Scripted::start(vec![Step::Write(too_large), Step::Write(bytes("no"))]).await
}

/// A client that sends its whole body before it reads (httpx, most
/// SDKs) still gets an answer that came before its upload ended: the
/// proxy's `502` when the upstream closes mid-upload, an upstream's early
/// `413`. The proxy reads and drops what it still sends before it closes
/// (a lingering close, as nginx's); until 2026-12-07 the socket closed at
/// once, the client's next bytes drew a reset, and its next write failed
/// (`EPIPE`, `ECONNRESET`): such a client gives up with a write error and
/// never reads the answer waiting for it. The own codec's: hyper's server
/// (`http1_server = "hyper"`) closes at once.
#[tokio::test]
async fn an_early_answer_reaches_a_client_that_goes_on_uploading() {
    let cases = [
        ("502", Scripted::start(vec![]).await),
        ("413", too_large_at_once().await),
    ];
    for (want, upstream) in cases {
        let proxy = common::proxy(upstream.addr, "http1_server = \"tokenclock\"").await;
        let mut client = start_upload(&proxy).await;
        // The answer (and the proxy's FIN) come meanwhile.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let chunk = format!("4000\r\n{}\r\n", "x".repeat(0x4000));
        for i in 0..4 {
            let wrote = client.write_all(chunk.as_bytes()).await;
            assert!(wrote.is_ok(), "{want}: write {i}: {wrote:?}");
            // Time for a reset to come back.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        client
            .write_all(b"0\r\n\r\n")
            .await
            .expect("the body's end");
        let (answer, closed) = read_to_close(&mut client).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {want} ")),
            "{want}: {answer:?}"
        );
        assert!(closed, "{want}: closed after the answer");
    }
}

/// An answer to a request whose body is left unread closes the connection
/// after it, and says so (`connection: close`, RFC 9112 §9.6): the proxy's
/// own `408` for a stalled upload, its `502` when the upstream closes
/// mid-upload, and an upstream's early answer (a `413` whose own
/// `Connection: close`, hop-by-hop, does not pass) before the upload ended.
/// Until 2026-12-07 each said nothing of it and the connection closed.
#[tokio::test]
async fn an_answer_that_leaves_the_upload_unread_says_connection_close() {
    let cases = [
        ("408", silent_upstream().await),
        ("502", Scripted::start(vec![]).await),
        ("413", too_large_at_once().await),
    ];
    for (want, upstream) in cases {
        let config = "request_body_timeout = \"300ms\"";
        let proxy = common::proxy(upstream.addr, config).await;
        let mut client = start_upload(&proxy).await;
        let (answer, closed) = read_to_close(&mut client).await;
        assert!(answer.starts_with(&format!("HTTP/1.1 {want} ")), "{answer}");
        let head = answer.to_ascii_lowercase();
        assert!(
            head.contains("\r\nconnection: close\r\n"),
            "{want}: {answer}"
        );
        assert!(closed, "{want}: closed after the answer");
    }
}
