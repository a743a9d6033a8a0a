//! The hand-off of a request to hyper's connection task, as the
//! connection ends.

use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use http::Request;
use http_body_util::Empty;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::send_on;

/// Rounds of the race: with the handle held across the wait, 3 to 5 in
/// 20,000 left their request stranded (measured on 2 busy cores).
const ROUNDS: usize = 40_000;

/// Spins until both sides arrived, then `lag` turns more, so that the
/// rounds sweep the two sides past each other.
fn meet(met: &AtomicUsize, lag: usize) {
    met.fetch_add(1, Ordering::AcqRel);
    while met.load(Ordering::Acquire) < 2 {
        std::hint::spin_loop();
    }
    for _ in 0..lag {
        std::hint::spin_loop();
    }
}

/// A request handed to hyper as another thread drops the connection's
/// task (its end after a `GOAWAY`, a reset) may be left in the channel
/// between them, to come back only when the channel's last handle goes:
/// one held across the wait for the answer made it wait forever.
#[test]
fn a_request_handed_over_as_its_connection_ends_comes_back() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let stranded = runtime.block_on(async {
        let mut stranded = 0;
        for round in 0..ROUNDS {
            let (io, peer) = tokio::io::duplex(1 << 16);
            let (sender, connection) = http2::Builder::new(TokioExecutor::new())
                .handshake::<_, Empty<Bytes>>(TokioIo::new(io))
                .await
                .expect("an HTTP/2 client's handshake writes its preface and returns");
            let (met, other) = {
                let met = Arc::new(AtomicUsize::new(0));
                (met.clone(), met)
            };
            let lag = round / 2 % 64;
            let (lag, ender_lag) = if round % 2 == 0 { (lag, 0) } else { (0, lag) };
            let ender = std::thread::spawn(move || {
                meet(&other, ender_lag);
                drop(connection);
            });
            meet(&met, lag);
            let sending = send_on(sender, Request::new(Empty::new()));
            let answer = tokio::time::timeout(Duration::from_secs(1), sending).await;
            ender.join().expect("the connection's drop does not panic");
            match answer {
                Ok(Err(e)) => assert!(e.into_error().is_canceled(), "given back unsent"),
                Ok(Ok(_)) => panic!("nothing answered"),
                Err(_) => stranded += 1,
            }
            drop(peer);
        }
        stranded
    });
    assert_eq!(stranded, 0, "requests never given back");
}

/// Reads one frame from `io`: its type, flags and stream id.
async fn read_frame(io: &mut tokio::io::DuplexStream) -> (u8, u8, u32) {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 9];
    io.read_exact(&mut head).await.expect("a frame's head");
    let length = u32::from_be_bytes([0, head[0], head[1], head[2]]);
    let mut payload = vec![0u8; usize::try_from(length).expect("small")];
    io.read_exact(&mut payload).await.expect("its payload");
    let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    (head[3], head[4], id)
}

/// A frame of `kind`, with `flags`, on stream `id`.
fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("small").to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&id.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// What [`super::dispatch_gone`] reads hyper's words for: a request
/// hyper's task holds unopened (the upstream's limit of one stream
/// reached), dropped with the task when a `GOAWAY` ends it, its `HEADERS`
/// never sent. Such a request is sent again; this is how it is told.
#[tokio::test]
async fn a_request_held_unopened_when_a_goaway_ends_the_task_is_dispatch_gone() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (io, mut upstream) = tokio::io::duplex(1 << 16);
    let (mut sender, connection) = http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Empty<Bytes>>(TokioIo::new(io))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut preface = [0u8; 24];
    upstream.read_exact(&mut preface).await.expect("preface");
    // SETTINGS_MAX_CONCURRENT_STREAMS = 1.
    let settings = frame(4, 0, 0, &[0, 3, 0, 0, 0, 1]);
    upstream.write_all(&settings).await.expect("settings");
    // The client's SETTINGS, then its ack of these.
    while read_frame(&mut upstream).await != (4, 1, 0) {}
    let first = sender.send_request(Request::new(Empty::new()));
    let first = tokio::spawn(first);
    loop {
        let (kind, _, id) = read_frame(&mut upstream).await;
        if kind == 1 {
            assert_eq!(id, 1, "the first stream");
            break;
        }
    }
    let second = tokio::spawn(sender.try_send_request(Request::new(Empty::new())));
    // hyper's task takes it, and h2 holds it until a stream closes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut goaway = 1u32.to_be_bytes().to_vec();
    goaway.extend_from_slice(&0u32.to_be_bytes());
    upstream
        .write_all(&frame(7, 0, 0, &goaway))
        .await
        .expect("goaway");
    let second = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("answered")
        .expect("joined");
    let Err(e) = second else {
        panic!("the second request was answered")
    };
    assert!(e.message().is_none(), "not given back: hyper took it");
    let e = e.into_error();
    assert!(super::dispatch_gone(&e), "{e:?}");
    // Neither the first's error nor any other is read so.
    drop(upstream);
    let first = first.await.expect("joined");
    let e = first.expect_err("the upstream left");
    assert!(!super::dispatch_gone(&e), "{e:?}");
}
