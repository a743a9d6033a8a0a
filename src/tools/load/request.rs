//! One request, measured from the client's side: status, TTFT, events, bytes, E2E and per-event delays.

use std::{
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Full};
use hyper_util::{
    client::legacy::{connect::HttpConnector, Client},
    rt::TokioExecutor,
};
use tokio::{sync::watch, time::Instant};

use super::{
    events::{Event, Events},
    results::{ClientOutcome, Measured},
};

/// The pooled client every request goes through.
pub(super) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// Requests in flight per HTTP/2 connection, at most: below the streams a
/// server lets one connection open at once (nginx's default 128, hyper's
/// 200), so that no server holds some of them back and each one sees the
/// same load.
const STREAMS_PER_CONNECTION: usize = 100;

/// The clients requests go through, taken in turn: one HTTP/1.1 pool, or
/// with `http2` one h2c connection per [`STREAMS_PER_CONNECTION`] of
/// `concurrency` (each client keeps one connection to the host).
pub(super) fn clients(concurrency: usize, http2: bool) -> Vec<HttpClient> {
    let n = if http2 {
        concurrency.div_ceil(STREAMS_PER_CONNECTION).max(1)
    } else {
        1
    };
    (0..n).map(|_| client(concurrency, http2)).collect()
}

/// A keep-alive client with `TCP_NODELAY`, so small events are not held back
/// by Nagle's algorithm: HTTP/1.1 keeping up to `idle` connections per host,
/// or with `http2`, HTTP/2 with prior knowledge (h2c), every request a
/// stream of one connection.
fn client(idle: usize, http2: bool) -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(idle)
        .http2_only(http2)
        .build(connector)
}

/// Counters read every second for the progress line.
#[derive(Default, Debug)]
pub(super) struct Live {
    /// Requests sent and not finished.
    pub in_flight: AtomicU64,
    /// Requests finished, any outcome.
    pub done: AtomicU64,
    /// Requests failed.
    pub errors: AtomicU64,
    /// Events received.
    pub events: AtomicU64,
}

/// Sends `request` and reads the response to its end, unless `stop` turns
/// true first (then the body is dropped, which closes the connection, or
/// over HTTP/2 resets the stream) or
/// `timeout` passes.
pub(super) async fn measure(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
    workload: usize,
    (live, timeout): (&Live, Duration),
    stop: &mut watch::Receiver<bool>,
) -> Measured {
    let start = Instant::now();
    let mut m = Measured::new(workload, ClientOutcome::Ok);
    live.in_flight.fetch_add(1, Relaxed);
    let outcome = tokio::select! {
        biased;
        () = stopped(stop) => ClientOutcome::Cancelled,
        done = tokio::time::timeout(timeout, exchange(client, request, start, &mut m, live)) => {
            done.unwrap_or_else(|_| ClientOutcome::Error("timeout".to_owned()))
        }
    };
    m.e2e = start.elapsed();
    m.outcome = outcome;
    live.in_flight.fetch_sub(1, Relaxed);
    live.done.fetch_add(1, Relaxed);
    if matches!(m.outcome, ClientOutcome::Error(_)) {
        live.errors.fetch_add(1, Relaxed);
    }
    m
}

/// Resolves once `stop` is true; never if its sender is gone without it.
pub(super) async fn stopped(stop: &mut watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

async fn exchange(
    client: &HttpClient,
    request: Request<Full<Bytes>>,
    start: Instant,
    m: &mut Measured,
    live: &Live,
) -> ClientOutcome {
    let mut events = Events::for_path(request.uri().path());
    let response = match client.request(request).await {
        Ok(response) => response,
        Err(e) if e.is_connect() => return ClientOutcome::Error("connect".to_owned()),
        Err(_) => return ClientOutcome::Error("request".to_owned()),
    };
    let status = response.status();
    m.status = Some(status.as_u16());
    events.framed_by(response.headers());
    let mut body = response.into_body();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else {
            return ClientOutcome::Error("body".to_owned());
        };
        if let Ok(data) = frame.into_data() {
            let before = m.events;
            m.bytes += data.len() as u64;
            events.feed(&data, &mut account(start, m));
            live.events.fetch_add(m.events - before, Relaxed);
        }
    }
    let before = m.events;
    events.finish(&mut account(start, m));
    live.events.fetch_add(m.events - before, Relaxed);
    if status.is_success() {
        ClientOutcome::Ok
    } else {
        ClientOutcome::Error(format!("http_{}", status.as_u16()))
    }
}

/// Accounts for the events of one data frame (or of the body's end), all
/// of it received now.
fn account(start: Instant, m: &mut Measured) -> impl FnMut(Event) + '_ {
    let at = Instant::now();
    let wall_ns = unix_ns();
    move |event| {
        m.events += 1;
        if event.first_token {
            m.ttft = Some(at - start);
        }
        if let Some(sent) = event.sent_unix_ns {
            let us = wall_ns.saturating_sub(u128::from(sent)) / 1_000;
            m.delays_us.push(u32::try_from(us).unwrap_or(u32::MAX));
        }
    }
}

/// Wall-clock ns since the Unix epoch (0 if the clock is before it).
fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http2_takes_a_connection_per_100_requests_in_flight() {
        let connections = |concurrency, http2| clients(concurrency, http2).len();
        assert_eq!(connections(500, false), 1, "one HTTP/1.1 pool");
        assert_eq!(connections(1, true), 1);
        assert_eq!(connections(100, true), 1);
        assert_eq!(connections(101, true), 2);
        assert_eq!(connections(256, true), 3);
    }
}
