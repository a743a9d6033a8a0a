//! Clients for the tests: one connection per request, HTTP/1.1 or h2c
//! (prior knowledge), built on hyper's connection API.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

/// A response read to its end.
#[derive(Debug)]
pub struct Collected {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// Each data frame as the client received it.
    pub frames: Vec<Bytes>,
}

impl Collected {
    /// The whole body.
    pub fn body(&self) -> Vec<u8> {
        self.frames.concat()
    }

    /// The end-to-end headers: hop-by-hop ones and `date` left out.
    pub fn end_to_end_headers(&self) -> Vec<(String, Vec<u8>)> {
        let hop = [
            "connection",
            "keep-alive",
            "transfer-encoding",
            "te",
            "upgrade",
            "date",
        ];
        let mut out: Vec<_> = self
            .headers
            .iter()
            .filter(|(k, _)| !hop.contains(&k.as_str()))
            .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
            .collect();
        out.sort();
        out
    }
}

/// Sends `request` over a new HTTP/1.1 connection.
pub async fn send<B>(addr: SocketAddr, request: Request<B>) -> hyper::Result<Response<Incoming>>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    sender.send_request(request).await
}

/// Sends `request` over a new h2c (prior knowledge) connection.
pub async fn send_h2<B>(addr: SocketAddr, request: Request<B>) -> hyper::Result<Response<Incoming>>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream)).await?;
    tokio::spawn(connection);
    sender.send_request(request).await
}

/// Reads a response to its end, frame by frame; `Err` if the body was cut.
pub async fn collect(response: Response<Incoming>) -> Result<Collected, hyper::Error> {
    let (parts, mut body) = response.into_parts();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            frames.push(data);
        }
    }
    Ok(Collected {
        status: parts.status,
        headers: parts.headers,
        frames,
    })
}

/// GETs `path` over HTTP/1.1 and reads the whole response.
pub async fn get(addr: SocketAddr, path: &str) -> Collected {
    let request = Request::get(path)
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))
        .expect("request");
    let response = send(addr, request).await.expect("response head");
    collect(response).await.expect("whole body")
}
