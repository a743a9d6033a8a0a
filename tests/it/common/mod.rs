//! Shared fixtures for the integration tests: the proxy started in-process
//! on `127.0.0.1:0`, scripted and echoing upstreams on real sockets, and
//! plain HTTP/1.1 and h2c clients built on hyper's connection API.

pub mod client;
pub mod h2;
pub mod oracle;
pub mod otel;
pub mod process;
pub mod prom;
pub mod replay;
pub mod sim;
pub mod tls;
pub mod upstream;

use std::{net::SocketAddr, sync::Arc};

use tokenclock::{
    config,
    measure::timeline::{Timeline, TimelineSink},
    Bound, StartError,
};
use tokio::{sync::oneshot, task::JoinHandle};

/// A `multipart/form-data` body of `parts` (name, file name for a file
/// part, content), as the clients of speech to text write one.
pub fn form(boundary: &str, parts: &[(&str, Option<&str>, &[u8])]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, file, content) in parts {
        let disposition = match file {
            Some(file) => format!(
                "form-data; name=\"{name}\"; filename=\"{file}\"\r\nContent-Type: audio/wav"
            ),
            None => format!("form-data; name=\"{name}\""),
        };
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n").as_bytes(),
        );
        body.extend_from_slice(content);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    body
}

/// A proxy running in this process.
pub struct Proxy {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), StartError>>,
}

/// Starts a proxy in front of `upstream`, with `extra` TOML lines appended
/// to its config.
pub async fn proxy(upstream: SocketAddr, extra: &str) -> Proxy {
    proxy_url(&format!("http://{upstream}"), extra).await
}

/// Starts a proxy in front of the upstream at `url`.
pub async fn proxy_url(url: &str, extra: &str) -> Proxy {
    start(url, extra, None).await
}

/// Finished timelines, as the proxy hands them over.
pub type Timelines = tokio::sync::mpsc::UnboundedReceiver<Timeline>;

struct ChannelSink(tokio::sync::mpsc::UnboundedSender<Timeline>);

impl TimelineSink for ChannelSink {
    fn finished(&self, timeline: &Timeline) {
        let _ = self.0.send(timeline.clone());
    }
}

/// Starts a proxy in front of `upstream` whose finished timelines arrive
/// on the returned channel.
pub async fn proxy_with_timelines(upstream: SocketAddr, extra: &str) -> (Proxy, Timelines) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let sink: Arc<dyn TimelineSink> = Arc::new(ChannelSink(tx));
    let proxy = start(&format!("http://{upstream}"), extra, Some(sink)).await;
    (proxy, rx)
}

/// The next finished timeline, waiting up to 10 s.
pub async fn next_timeline(timelines: &mut Timelines) -> Timeline {
    tokio::time::timeout(std::time::Duration::from_secs(10), timelines.recv())
        .await
        .ok()
        .flatten()
        .expect("a finished timeline")
}

/// The HTTP/1.1 server every test proxy uses unless its config names one:
/// `TOKENCLOCK_IT_HTTP1_SERVER` (`hyper` or `tokenclock`), so the whole
/// suite runs against either (`tests/run.sh` runs it against both).
fn http1_server(extra: &str) -> String {
    match std::env::var("TOKENCLOCK_IT_HTTP1_SERVER") {
        Ok(server) if !extra.contains("http1_server") => format!("http1_server = \"{server}\"\n"),
        _ => String::new(),
    }
}

async fn start(url: &str, extra: &str, sink: Option<Arc<dyn TimelineSink>>) -> Proxy {
    let server = http1_server(extra);
    let text = format!(
        "listen = \"127.0.0.1:0\"\nmetrics_listen = \"127.0.0.1:0\"\n\
         upstream = \"{url}\"\n{server}{extra}\n"
    );
    let config = config::File::parse(&text, "test.toml")
        .and_then(config::File::validate)
        .expect("test config is valid");
    let mut bound = Bound::bind(config).await.expect("bind 127.0.0.1:0");
    if let Some(sink) = sink {
        bound = bound.with_sink(sink);
    }
    let addr = bound.proxy_addr().expect("proxy addr");
    let metrics_addr = bound.metrics_addr().expect("metrics addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(bound.run(async move {
        let _ = stopped.await;
    }));
    Proxy {
        addr,
        metrics_addr,
        stop: Some(stop),
        task,
    }
}

impl Proxy {
    /// Signals shutdown and waits for the proxy to return.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let task = std::mem::replace(&mut self.task, tokio::spawn(async { Ok(()) }));
        task.await.expect("proxy task").expect("proxy ran");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// An address on which nothing listens (bound, then released).
pub async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    addr
}

/// Deterministic pseudo-random bytes (xorshift), so failures reproduce.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Waits up to 10 s for `check`; panics with `what` if it never holds.
pub async fn eventually(what: &str, check: impl Fn() -> bool) {
    for _ in 0..200 {
        if check() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{what}");
}

/// A listener on 127.0.0.1 whose accept queue is full, and the connections
/// that fill it: the kernel drops the SYN of any further connect, which
/// hangs until the queue is drained (then goes on at the SYN's retransmit,
/// about a second later) or its caller gives up.
pub async fn full_listener() -> (tokio::net::TcpListener, Vec<tokio::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let listener = socket.listen(1).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let mut fillers = Vec::new();
    loop {
        let connect = tokio::net::TcpStream::connect(addr);
        match tokio::time::timeout(std::time::Duration::from_millis(200), connect).await {
            Ok(filler) => fillers.push(filler.expect("connect")),
            Err(_) => return (listener, fillers),
        }
        assert!(fillers.len() < 64, "the accept queue never filled");
    }
}
