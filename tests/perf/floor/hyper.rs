//! The floor of hyper's HTTP/1.1 server for `overhead.sh`: the server side
//! of tokenclock's client connection (hyper's, through hyper-util's
//! `TokioIo`, on one current-thread runtime with I/O only), with a response
//! body that reads the upstream's socket and nothing else. Each request goes
//! to a new upstream connection as HTTP/1.0, so the upstream answers with a
//! close-delimited body: each read of it is one data frame, as it came, with
//! no chunked decoding, no measurement, no timers and no pool.
//!
//! What it is for: with `floor_tcp` (the runtime alone) and tokenclock, a
//! ladder of in-proxy delays ((t), `PROXY_BIN=target/release/examples/floor_hyper
//! bash tests/perf/overhead.sh --only a --trace`) that tells how much of
//! tokenclock's way from a readiness event to the read is hyper's server and
//! how much the layers tokenclock adds (tests/perf/RESULTS.md, "The floor of
//! the runtime").

#[path = "common.rs"]
mod common;

use std::convert::Infallible;
use std::pin::Pin;
use std::process::ExitCode;
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest upstream response head read, in bytes.
const MAX_HEAD: usize = 64 * 1024;

fn main() -> ExitCode {
    common::serve(|client, upstream| async move {
        if client.set_nodelay(true).is_err() {
            return;
        }
        let service = hyper::service::service_fn(move |request| {
            let upstream = upstream.clone();
            async move { Ok::<_, Infallible>(forward(&upstream, request).await) }
        });
        // A connection's error ends it; there is nothing to report.
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(client), service)
            .await;
    })
}

type Reply = Response<Either<Upstream, Full<Bytes>>>;

/// One request, sent to a new upstream connection; a failure before the
/// upstream's head is a bare 502.
async fn forward(upstream: &str, request: Request<Incoming>) -> Reply {
    match exchange(upstream, request).await {
        Some(response) => response,
        None => {
            let mut response = Response::new(Either::Right(Full::new(Bytes::new())));
            *response.status_mut() = StatusCode::BAD_GATEWAY;
            response
        }
    }
}

async fn exchange(upstream: &str, request: Request<Incoming>) -> Option<Reply> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    let mut socket = TcpStream::connect(upstream).await.ok()?;
    socket.set_nodelay(true).ok()?;
    let mut head = Vec::with_capacity(512);
    head.extend_from_slice(parts.method.as_str().as_bytes());
    head.push(b' ');
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    head.extend_from_slice(target.as_bytes());
    head.extend_from_slice(b" HTTP/1.0\r\nhost: ");
    head.extend_from_slice(upstream.as_bytes());
    head.extend_from_slice(format!("\r\ncontent-length: {}\r\n", body.len()).as_bytes());
    for (name, value) in &parts.headers {
        if is_framing(name.as_str()) || name == "host" {
            continue;
        }
        head.extend_from_slice(name.as_str().as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(value.as_bytes());
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(b"\r\n");
    socket.write_all(&head).await.ok()?;
    socket.write_all(&body).await.ok()?;

    let mut read = BytesMut::with_capacity(8 * 1024);
    loop {
        if socket.read_buf(&mut read).await.ok()? == 0 || read.len() > MAX_HEAD {
            return None;
        }
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let mut parsed = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(len) = parsed.parse(&read).ok()? else {
            continue;
        };
        let mut response = Response::builder().status(parsed.code?);
        for header in parsed.headers.iter() {
            if !is_framing(&header.name.to_ascii_lowercase()) {
                response = response.header(header.name, header.value);
            }
        }
        let rest = read.split_off(len);
        let body = Upstream {
            socket,
            read: rest,
            done: false,
        };
        return response.body(Either::Left(body)).ok();
    }
}

/// The headers of one hop's framing, which each side writes for itself.
fn is_framing(name: &str) -> bool {
    matches!(
        name,
        "connection" | "keep-alive" | "content-length" | "transfer-encoding"
    )
}

/// A close-delimited upstream body: each read is one frame.
struct Upstream {
    socket: TcpStream,
    /// What was read and not yet handed on (the bytes after the head).
    read: BytesMut,
    done: bool,
}

impl Body for Upstream {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if this.read.is_empty() {
            this.read.reserve(8 * 1024);
            let n = ready!(tokio_util::io::poll_read_buf(
                Pin::new(&mut this.socket),
                cx,
                &mut this.read
            ))?;
            if n == 0 {
                this.done = true;
                return Poll::Ready(None);
            }
        }
        Poll::Ready(Some(Ok(Frame::data(this.read.split().freeze()))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
