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
    serve_on(listener, max_streams, answer)
}

/// [`serve`], on `listener`.
pub fn serve_on<F, A>(listener: TcpListener, max_streams: Option<u32>, answer: F) -> H2Upstream
where
    F: Fn(Request<RecvStream>, SendResponse<Bytes>) -> A + Clone + Send + 'static,
    A: Future<Output = ()> + Send + 'static,
{
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let ended = Arc::new(AtomicUsize::new(0));
    let (counted, gone) = (accepted.clone(), ended.clone());
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (answer, counted, gone) = (answer.clone(), counted.clone(), gone.clone());
            tokio::spawn(async move {
                let mut builder = h2::server::Builder::new();
                if let Some(max) = max_streams {
                    builder.max_concurrent_streams(max);
                }
                // The proxy's TCP probe of the upstream never says hello.
                let Ok(mut connection) = builder.handshake::<_, Bytes>(tcp).await else {
                    return;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                while let Some(Ok((request, respond))) = connection.accept().await {
                    tokio::spawn(answer(request, respond));
                }
                gone.fetch_add(1, Ordering::SeqCst);
            });
        }
    });
    H2Upstream {
        addr,
        accepted,
        ended,
    }
}
