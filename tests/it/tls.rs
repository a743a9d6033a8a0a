//! `https://` upstreams: the certificate is verified, a private CA can be
//! trusted with `upstream_ca_file`, and HTTP/2 is negotiated by ALPN.

use std::time::Duration;

use crate::common::{
    self,
    client::{self, collect, send},
    tls::{fixtures, TlsEcho},
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;

fn ca_line() -> String {
    format!(
        "upstream_ca_file = \"{}\"",
        fixtures().join("ca.pem").display()
    )
}

async fn next(echo: &mut TlsEcho) -> http::request::Parts {
    tokio::time::timeout(Duration::from_secs(5), echo.seen.recv())
        .await
        .ok()
        .flatten()
        .expect("a request reached the TLS upstream")
}

#[tokio::test]
async fn https_upstream_with_a_trusted_ca() {
    let mut echo = TlsEcho::start().await;
    let url = format!("https://localhost:{}", echo.addr.port());
    let proxy = common::proxy_url(&url, &ca_line()).await;
    let body = Bytes::from(common::noise(50_000, 9));
    let request = Request::post("/v1/chat/completions")
        .body(Full::new(body.clone()))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response");
    assert_eq!(response.status(), 200);
    assert!(collect(response).await.expect("body").body() == body);
    let seen = next(&mut echo).await;
    assert_eq!(seen.version, http::Version::HTTP_11);
    let host = format!("localhost:{}", echo.addr.port());
    assert_eq!(
        seen.headers.get("host").map(|v| v.as_bytes()),
        Some(host.as_bytes())
    );
}

#[tokio::test]
async fn https_upstream_speaks_h2_by_alpn_when_configured() {
    let mut echo = TlsEcho::start().await;
    let url = format!("https://127.0.0.1:{}", echo.addr.port());
    let extra = format!("{}\nupstream_protocol = \"http2\"", ca_line());
    let proxy = common::proxy_url(&url, &extra).await;
    let response = client::get(proxy.addr, "/v1/models").await;
    assert_eq!(response.status, 200);
    assert_eq!(next(&mut echo).await.version, http::Version::HTTP_2);
}

#[tokio::test]
async fn an_untrusted_certificate_is_refused() {
    let echo = TlsEcho::start().await;
    let url = format!("https://localhost:{}", echo.addr.port());
    let proxy = common::proxy_url(&url, "").await;
    let response = client::get(proxy.addr, "/v1/models").await;
    assert_eq!(response.status, 502);
    let text = String::from_utf8_lossy(&response.body()).into_owned();
    assert!(text.contains("upstream_unavailable"), "{text}");
}

#[test]
fn a_bad_ca_file_is_a_config_error_naming_the_key() {
    let text = "upstream = \"https://localhost:1\"\nupstream_ca_file = \"/nonexistent/ca.pem\"\n";
    let error = tokenclock::config::File::parse(text, "t.toml")
        .and_then(tokenclock::config::File::validate)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        error.starts_with("upstream_ca_file: cannot read"),
        "{error}"
    );
    let not_pem = format!(
        "upstream = \"https://localhost:1\"\nupstream_ca_file = \"{}\"\n",
        file!()
    );
    let error = tokenclock::config::File::parse(&not_pem, "t.toml")
        .and_then(tokenclock::config::File::validate)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.starts_with("upstream_ca_file: "), "{error}");
}
