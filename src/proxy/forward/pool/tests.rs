//! What a held request costs: no read buffer while it waits, for its
//! head or for its next bytes.

use std::{
    sync::Weak,
    task::{Context, Poll, Waker},
    time::Duration,
};

use bytes::BytesMut;
use http::Method;
use hyper_util::rt::TokioIo;
use tokio::{
    io::AsyncWriteExt,
    net::{TcpListener, TcpStream},
};

use super::{poll_head, Conn, Lease, READ, READ_SIZE};
use crate::proxy::forward::connect::Stream;
use crate::proxy::wire::chunked::{Decoder, Framing};

/// A connection to a peer on 127.0.0.1, as the pool holds it, holding no
/// buffer; and the peer's end.
async fn connected() -> (Conn, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (peer, _) = listener.accept().await.expect("accept");
    let io = Stream::from(hyper_rustls::MaybeHttpsStream::Http(TokioIo::new(tcp)));
    let conn = Conn {
        io: TokioIo::new(io),
        buf: BytesMut::new(),
        _open: super::Counted::new(
            &crate::export::metrics::UpstreamPoolMetrics::unexported().connections,
        ),
    };
    (conn, peer)
}

/// Polls `poll` until it is ready (the peer's bytes take a moment to
/// arrive on the loopback), for at most 2 s.
async fn ready<T>(mut poll: impl FnMut(&mut Context<'_>) -> Poll<T>) -> T {
    let wait = std::future::poll_fn(|cx| poll(cx));
    tokio::time::timeout(Duration::from_secs(2), wait)
        .await
        .expect("ready within 2 s")
}

/// The next frame `lease` yields, which must be data.
async fn next_data(lease: &mut Lease) -> bytes::Bytes {
    let frame = ready(|cx| lease.poll_next(cx)).await;
    let frame = frame.expect("a frame").expect("no error");
    frame.into_data().expect("data")
}

/// A request whose answer is not generated yet (a whole response waits
/// for its last token) holds no read buffer while it waits; once the head
/// comes, the body bytes that came with it are the connection's, and the
/// thread keeps its buffer for the next read.
#[tokio::test]
async fn a_request_waiting_for_its_head_holds_no_read_buffer() {
    let (mut conn, mut peer) = connected().await;
    let mut cx = Context::from_waker(Waker::noop());
    let (mut upload, mut spent, mut failed) = (None, None, None);
    for _ in 0..3 {
        let sending = (&mut upload, &mut spent);
        let poll = poll_head(&mut conn, sending, &mut failed, &Method::POST, &mut cx);
        assert!(poll.is_pending());
        assert_eq!(conn.buf.capacity(), 0, "a waiting request holds a buffer");
    }
    peer.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhel")
        .await
        .expect("write");
    let head = ready(|cx| {
        let sending = (&mut upload, &mut spent);
        poll_head(&mut conn, sending, &mut failed, &Method::POST, cx)
    })
    .await
    .expect("a head");
    assert_eq!(head.response.status(), 200);
    assert_eq!(head.framing, Framing::Length(5));
    assert_eq!(&conn.buf[..], b"hel");
    assert!(
        conn.buf.capacity() < READ_SIZE,
        "the connection kept the thread's buffer"
    );
    READ.with_borrow(|read| assert!(read.capacity() >= READ_SIZE / 4));
}

/// A response waiting for its next bytes holds no read buffer, whether
/// it just began or its last event was read whole; a part of an event is
/// kept in a buffer of its own, sized to it.
#[tokio::test]
async fn a_response_waiting_for_its_next_bytes_holds_no_read_buffer() {
    let (conn, mut peer) = connected().await;
    let mut lease = Lease {
        conn: Some(conn),
        upload: None,
        decoder: Decoder::new(Framing::Chunked),
        keep_alive: true,
        drained: false,
        next: None,
        read_end: None,
        pool: Weak::new(),
    };
    let mut cx = Context::from_waker(Waker::noop());
    let held = |lease: &Lease| lease.conn.as_ref().map(|c| c.buf.capacity());
    assert!(lease.poll_next(&mut cx).is_pending());
    assert_eq!(held(&lease), Some(0));

    peer.write_all(b"5\r\nhello\r\n").await.expect("write");
    let data = next_data(&mut lease).await;
    assert_eq!(&data[..], b"hello");
    assert!(lease.poll_next(&mut cx).is_pending());
    assert_eq!(held(&lease), Some(0), "a waiting stream holds a buffer");

    peer.write_all(b"5\r").await.expect("write");
    ready(|cx| match lease.poll_next(cx) {
        Poll::Pending if lease.conn.as_ref().is_some_and(|c| !c.buf.is_empty()) => Poll::Ready(()),
        Poll::Pending => Poll::Pending,
        Poll::Ready(other) => panic!("no frame yet, got {:?}", other.map(|f| f.is_ok())),
    })
    .await;
    let conn = lease.conn.as_ref().expect("open");
    assert_eq!(&conn.buf[..], b"5\r");
    assert!(
        conn.buf.capacity() < READ_SIZE,
        "a part of an event kept the thread's buffer"
    );

    // The rest of that event, read into the connection's own buffer: once
    // it is decoded and the stream waits again, that buffer goes too.
    peer.write_all(b"\nworld\r\n").await.expect("write");
    let data = next_data(&mut lease).await;
    assert_eq!(&data[..], b"world");
    assert!(lease.poll_next(&mut cx).is_pending());
    assert_eq!(
        held(&lease),
        Some(0),
        "a waiting stream kept its own buffer"
    );
}

/// A pool whose `stale` idle connections went idle 5 s ago and `fresh`
/// ones just now (timeout 4 s, room for `max_idle`), and the peers' ends.
async fn pool_of(stale: usize, fresh: usize, max_idle: usize) -> (super::Shared, Vec<TcpStream>) {
    let config = crate::config::File::parse("upstream = \"http://127.0.0.1:1\"\n", "t.toml")
        .and_then(crate::config::File::validate)
        .expect("config");
    let now = tokio::time::Instant::now();
    let long_ago = now
        .checked_sub(Duration::from_secs(5))
        .expect("an instant 5 s ago");
    let (mut idle, mut peers) = (Vec::new(), Vec::new());
    for i in 0..stale + fresh {
        let (conn, peer) = connected().await;
        let since = if i < stale { long_ago } else { now };
        idle.push(super::Idle { conn, since });
        peers.push(peer);
    }
    let shared = super::Shared {
        connector: crate::proxy::forward::client::connector(&config).expect("connector"),
        target: http::Uri::from_static("http://127.0.0.1:1/"),
        idle: std::sync::Mutex::new(idle),
        max_idle,
        idle_timeout: Duration::from_secs(4),
        metrics: crate::export::metrics::UpstreamPoolMetrics::unexported(),
        warned: std::sync::Mutex::new(None),
    };
    (shared, peers)
}

fn held(shared: &super::Shared) -> usize {
    shared.idle.lock().map(|i| i.len()).unwrap_or(0)
}

/// Whether the peer's end saw its connection closed (within 5 s).
async fn closed(peer: &mut TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), peer.read(&mut byte)).await;
    matches!(read, Ok(Ok(0)))
}

/// Connections idle past the timeout are not closed by a request looking
/// for one (it connects anew at once), but by the reaper, and closed: the
/// upstream sees each end; a fresh one stays.
#[tokio::test]
async fn stale_connections_are_closed_by_the_reaper_not_on_a_requests_path() {
    let (shared, mut peers) = pool_of(3, 0, 8).await;
    assert!(shared.take().is_none(), "none fresh");
    assert_eq!(held(&shared), 3, "left for the reaper");
    shared.evict();
    assert_eq!(held(&shared), 0);
    for peer in &mut peers {
        assert!(closed(peer).await);
    }
    let (shared, mut peers) = pool_of(2, 1, 8).await;
    shared.evict();
    assert_eq!(held(&shared), 1, "the fresh one stays");
    assert!(closed(&mut peers[0]).await && closed(&mut peers[1]).await);
    assert!(shared.take().is_some());
}

/// A pool full of stale connections (a burst filled it, traffic paused)
/// makes room for a connection given back, by closing them, instead of
/// closing the live one until the reaper's next turn.
#[tokio::test]
async fn a_pool_full_of_stale_connections_keeps_the_one_given_back() {
    let (shared, mut peers) = pool_of(3, 0, 3).await;
    let (conn, _peer) = connected().await;
    shared.put(conn);
    assert_eq!(held(&shared), 1);
    assert!(shared.take().is_some(), "the one given back");
    for peer in &mut peers {
        assert!(closed(peer).await);
    }
}
