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
