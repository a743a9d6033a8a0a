//! An HTTP/2 upstream for the tests: the `h2` library's server, which sends
//! exactly the frames it is told to (a reset with `NO_ERROR`, `END_STREAM`
//! in a frame of its own) and lets a test set how many streams one
//! connection may have open at once.

use std::{
    future::Future,
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use bytes::Bytes;
use h2::{server::SendResponse, RecvStream};
use http::Request;
use tokio::net::TcpListener;

/// A running HTTP/2 upstream, and the connections it has seen.
pub struct H2Upstream {
    pub addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    ended: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl H2Upstream {
    /// Connections accepted so far (that began HTTP/2).
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Connections that have ended (the proxy closed them, or they failed).
    pub fn ended(&self) -> usize {
        self.ended.load(Ordering::SeqCst)
    }

    /// The most streams one connection had being answered at once.
    pub fn most_streams(&self) -> usize {
        self.most.load(Ordering::SeqCst)
    }
}

/// Serves each stream with `answer(request, respond)`, in a task of its
/// own while the connection is driven; a connection may have at most
/// `max_streams` streams open at once (`SETTINGS_MAX_CONCURRENT_STREAMS`;
/// `None`: the library's default, no limit).
pub async fn serve<F, A>(max_streams: Option<u32>, answer: F) -> H2Upstream
where
    F: Fn(Request<RecvStream>, SendResponse<Bytes>) -> A + Clone + Send + 'static,
    A: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    serve_on(listener, max_streams, Duration::ZERO, answer)
}

/// [`serve`], on `listener`; each connection's `SETTINGS` (its first
/// frame) sent `settings_after` its accept, as from an upstream that far
/// away.
pub fn serve_on<F, A>(
    listener: TcpListener,
    max_streams: Option<u32>,
    settings_after: Duration,
    answer: F,
) -> H2Upstream
where
    F: Fn(Request<RecvStream>, SendResponse<Bytes>) -> A + Clone + Send + 'static,
    A: Future<Output = ()> + Send + 'static,
{
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let (counted, gone, seen) = (accepted.clone(), ended.clone(), most.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (answer, counted, gone) = (answer.clone(), counted.clone(), gone.clone());
            let seen = seen.clone();
            tokio::spawn(async move {
                tokio::time::sleep(settings_after).await;
                let mut builder = h2::server::Builder::new();
                if let Some(max) = max_streams {
                    builder.max_concurrent_streams(max);
                }
                // The proxy's TCP probe of the upstream never says hello.
                let Ok(mut connection) = builder.handshake::<_, Bytes>(tcp).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let open = Arc::new(AtomicUsize::new(0));
                while let Some(Ok((request, respond))) = connection.accept().await {
                    let now = open.fetch_add(1, Ordering::SeqCst) + 1;
                    seen.fetch_max(now, Ordering::SeqCst);
                    let (answered, open) = (answer(request, respond), open.clone());
                    tokio::spawn(async move {
                        answered.await;
                        open.fetch_sub(1, Ordering::SeqCst);
                    });
                }
                gone.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    H2Upstream {
        addr,
        accepted,
        ended,
        most,
    }
}
