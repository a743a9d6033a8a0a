//! TCP keep-alive on every socket tokenclock holds, its clients' and its
//! upstream's: a peer gone without a word (a host powered off, a NAT or a
//! firewall that forgot the flow, a laptop asleep) is found by the kernel,
//! while one that is merely slow (a model server deep in a long
//! generation, a client waiting for its answer) answers the probes and is
//! never cut. Nothing else would find it: no limit bounds the wait for an
//! upstream's answer by default (`response_header_timeout`), and a client
//! waiting for a whole answer sends nothing. Found, the socket fails
//! (`ETIMEDOUT`): an upstream's as an upstream error, a client's as the
//! client gone, whose upstream request is dropped, so the model server
//! stops generating for no one.
//!
//! Probes go only on a connection with nothing unacknowledged; one whose
//! writes go unacknowledged is the kernel's retransmission limit's.

use std::{io, time::Duration};

use socket2::{SockRef, TcpKeepalive};
use tokio::net::TcpStream;

/// The first probe after this long without a segment either way.
pub(crate) const IDLE: Duration = Duration::from_secs(30);
/// Between unanswered probes.
pub(crate) const INTERVAL: Duration = Duration::from_secs(10);
/// Unanswered probes after which the socket fails: a peer gone is found
/// about 60 s after it last spoke.
pub(crate) const PROBES: u32 = 3;

/// Turns keep-alive on for `stream` (a client's; the upstream's get it
/// from their connector).
pub(crate) fn set(stream: &TcpStream) -> io::Result<()> {
    let params = TcpKeepalive::new()
        .with_time(IDLE)
        .with_interval(INTERVAL)
        .with_retries(PROBES);
    SockRef::from(stream).set_tcp_keepalive(&params)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Asserts `stream` probes as [`set`] has it.
    pub(crate) fn assert_probes(stream: &TcpStream) {
        let socket = SockRef::from(stream);
        assert!(socket.keepalive().expect("SO_KEEPALIVE"), "keep-alive on");
        assert_eq!(socket.tcp_keepalive_time().expect("idle"), IDLE);
        assert_eq!(socket.tcp_keepalive_interval().expect("interval"), INTERVAL);
        assert_eq!(socket.tcp_keepalive_retries().expect("probes"), PROBES);
    }

    #[tokio::test]
    async fn set_turns_keepalive_on_with_its_times() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (_client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (stream, _) = accepted.expect("accepted");
        assert!(!SockRef::from(&stream).keepalive().expect("SO_KEEPALIVE"));
        set(&stream).expect("set");
        assert_probes(&stream);
    }
}
