//! The floor of an HTTP/1.1 server of tokenclock's own for `overhead.sh`:
//! one async function per client connection on one current-thread runtime
//! with I/O only, which reads each request head (httparse) and its
//! `Content-Length` body, sends the request to a new upstream connection as
//! HTTP/1.0, writes the upstream's head with `transfer-encoding: chunked`,
//! then forwards each read of the upstream's close-delimited body as one
//! chunk (size line, data and CRLF in one `writev`), and waits for the
//! client's next request. No pipelining, no `Expect`, no chunked request
//! bodies, no timers: the least an HTTP/1.1 relay does per event.
//!
//! What it is for: the rung between `floor_tcp` (the runtime alone) and
//! `floor_hyper` (hyper's server) in the ladder of in-proxy delays ((t),
//! `PROXY_BIN=target/release/examples/floor_h1 bash tests/perf/overhead.sh
//! --only a --trace`): how close to the runtime's floor a server side of
//! tokenclock's own could bring the way from a readiness event to the read
//! (tests/perf/RESULTS.md, "The floor of the runtime").

#[path = "common.rs"]
mod common;

use std::io::{self, IoSlice};
use std::process::ExitCode;

use bytes::{Buf, BytesMut};
use tokenclock::proxy::wire::chunked::SizeLine;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest request or response head read, in bytes.
const MAX_HEAD: usize = 64 * 1024;

fn main() -> ExitCode {
    common::serve(|client, upstream| async move {
        // A connection's error ends it; there is nothing to report.
        let _ = serve(client, &upstream).await;
    })
}

/// One client connection: its requests one after the other, until it
/// closes or a request fails.
async fn serve(mut client: TcpStream, upstream: &str) -> io::Result<()> {
    client.set_nodelay(true)?;
    let mut read = BytesMut::with_capacity(8 * 1024);
    loop {
        let Some(request) = request(&mut client, &mut read).await? else {
            return Ok(());
        };
        exchange(&mut client, upstream, &request).await?;
    }
}

/// The next request, as HTTP/1.0 for the upstream; `None` when the client
/// closed between requests.
async fn request(client: &mut TcpStream, read: &mut BytesMut) -> io::Result<Option<Vec<u8>>> {
    loop {
        if !read.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; 100];
            let mut parsed = httparse::Request::new(&mut headers);
            if let httparse::Status::Complete(len) = parsed.parse(read).map_err(io::Error::other)? {
                let mut out = Vec::with_capacity(len + 64);
                let mut body = 0;
                out.extend_from_slice(parsed.method.unwrap_or("GET").as_bytes());
                out.push(b' ');
                out.extend_from_slice(parsed.path.unwrap_or("/").as_bytes());
                out.extend_from_slice(b" HTTP/1.0\r\n");
                for header in parsed.headers.iter() {
                    if header.name.eq_ignore_ascii_case("content-length") {
                        body = std::str::from_utf8(header.value)
                            .ok()
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .ok_or_else(|| io::Error::other("bad content-length"))?;
                    } else if is_framing(header.name) {
                        continue;
                    }
                    write_header(&mut out, header);
                }
                out.extend_from_slice(b"\r\n");
                read.advance(len);
                while read.len() < body {
                    if client.read_buf(read).await? == 0 {
                        return Err(io::ErrorKind::UnexpectedEof.into());
                    }
                }
                out.extend_from_slice(&read.split_to(body));
                return Ok(Some(out));
            }
            if read.len() > MAX_HEAD {
                return Err(io::Error::other("request head too large"));
            }
        }
        read.reserve(4 * 1024);
        if client.read_buf(read).await? == 0 {
            return if read.is_empty() {
                Ok(None)
            } else {
                Err(io::ErrorKind::UnexpectedEof.into())
            };
        }
    }
}

/// Sends `request` to a new upstream connection and forwards its response,
/// the body re-framed in chunks, one per read.
async fn exchange(client: &mut TcpStream, upstream: &str, request: &[u8]) -> io::Result<()> {
    let mut server = TcpStream::connect(upstream).await?;
    server.set_nodelay(true)?;
    server.write_all(request).await?;
    let mut read = BytesMut::with_capacity(8 * 1024);
    let mut head = Vec::with_capacity(512);
    loop {
        if server.read_buf(&mut read).await? == 0 || read.len() > MAX_HEAD {
            return Err(io::Error::other("no response head"));
        }
        let mut headers = [httparse::EMPTY_HEADER; 100];
        let mut parsed = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(len) = parsed.parse(&read).map_err(io::Error::other)? else {
            continue;
        };
        let code = parsed.code.unwrap_or(502);
        head.extend_from_slice(
            format!("HTTP/1.1 {code} {}\r\n", parsed.reason.unwrap_or("")).as_bytes(),
        );
        for header in parsed.headers.iter() {
            if !is_framing(header.name) {
                write_header(&mut head, header);
            }
        }
        head.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
        read.advance(len);
        break;
    }
    client.write_all(&head).await?;
    loop {
        if read.is_empty() {
            read.reserve(8 * 1024);
            if server.read_buf(&mut read).await? == 0 {
                return client.write_all(b"0\r\n\r\n").await;
            }
        }
        // tokenclock's own size line, on the stack: a floor allocates
        // nothing per event.
        let line = SizeLine::new(read.len());
        write_all_vectored(
            client,
            &mut [
                IoSlice::new(line.as_bytes()),
                IoSlice::new(&read),
                IoSlice::new(b"\r\n"),
            ],
        )
        .await?;
        read.clear();
    }
}

/// Writes every byte of `slices`, in as few `writev`s as the socket takes.
async fn write_all_vectored(
    socket: &mut TcpStream,
    mut slices: &mut [IoSlice<'_>],
) -> io::Result<()> {
    while !slices.is_empty() {
        let n = socket.write_vectored(slices).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        IoSlice::advance_slices(&mut slices, n);
    }
    Ok(())
}

/// Writes `header` as a line of a head.
fn write_header(out: &mut Vec<u8>, header: &httparse::Header<'_>) {
    out.extend_from_slice(header.name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(header.value);
    out.extend_from_slice(b"\r\n");
}

/// The headers of one hop's framing, which each side writes for itself.
fn is_framing(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "content-length",
        "transfer-encoding",
    ]
    .iter()
    .any(|framing| name.eq_ignore_ascii_case(framing))
}
