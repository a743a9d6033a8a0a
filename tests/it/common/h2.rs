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

/// HTTP/2 on a raw socket, for an upstream that sends exactly the frames
/// a test needs where the `h2` library's server would not (a `GOAWAY`
/// naming an earlier stream than one it was sent, a stream's end in the
/// same write as its reset).
pub mod raw {
    use tokio::{io::AsyncReadExt, net::TcpStream};

    pub const DATA: u8 = 0;
    pub const HEADERS: u8 = 1;
    pub const SETTINGS: u8 = 4;
    pub const GOAWAY: u8 = 7;
    pub const END_STREAM: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    /// The client's preface, before its first frame.
    pub const PREFACE_LEN: usize = 24;

    /// A frame of `kind`, with `flags`, on stream `id`.
    pub fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
        let length = u32::try_from(payload.len()).expect("a small frame");
        let mut frame = length.to_be_bytes()[1..].to_vec();
        frame.extend_from_slice(&[kind, flags]);
        frame.extend_from_slice(&id.to_be_bytes());
        frame.extend_from_slice(payload);
        frame
    }

    /// The next frame's type, flags, stream and payload; `None` once the
    /// peer closed.
    pub async fn read(tcp: &mut TcpStream) -> Option<(u8, u8, u32, Vec<u8>)> {
        let mut head = [0u8; 9];
        tcp.read_exact(&mut head).await.ok()?;
        let length = u32::from_be_bytes([0, head[0], head[1], head[2]]);
        let mut payload = vec![0u8; usize::try_from(length).ok()?];
        tcp.read_exact(&mut payload).await.ok()?;
        let id = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        Some((head[3], head[4], id, payload))
    }
}
