//! The floor of tokio's task model for `overhead.sh`: a TCP relay on one
//! current-thread runtime, with I/O and nothing else (no timers, no HTTP),
//! one task per client connection and its own upstream connection, bytes
//! copied both ways by `tokio::io::copy_bidirectional` through 8 KiB
//! buffers.
//!
//! What it is for: `PROXY_BIN=target/release/examples/floor_tcp bash
//! tests/perf/overhead.sh --only a --trace` measures its in-proxy delay ((t))
//! against nginx's in the same run. The way from a readiness event to the
//! read of the ready socket is then tokio's alone (its I/O driver, its
//! scheduler, one task poll and a copy's poll), which tells how much of
//! tokenclock's own way there (tests/perf/RESULTS.md, "The floor of the
//! runtime") is the runtime's and how much the layers above it. It does not
//! parse HTTP: a client connection's requests go to one upstream connection
//! as they come, which keep-alive HTTP/1.1 and the simulator allow.

#[path = "common.rs"]
mod common;

use std::process::ExitCode;

use tokio::net::TcpStream;

fn main() -> ExitCode {
    common::serve(relay)
}

/// One client connection, relayed to a new upstream connection until either
/// side closes.
async fn relay(mut client: TcpStream, upstream: String) {
    let Ok(mut server) = TcpStream::connect(&upstream).await else {
        return;
    };
    if client.set_nodelay(true).is_err() || server.set_nodelay(true).is_err() {
        return;
    }
    // Either side's close or error ends the relay; there is nothing to report.
    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
}
