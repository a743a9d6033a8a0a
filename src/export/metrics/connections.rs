//! Client connection families: how many are open, refused at the cap, and
//! closed by tokenclock's own deadlines, per listener (`proxy` or `metrics`);
//! and the requests refused at the proxy's cap on requests in flight.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

/// The connection families, registered once.
#[derive(Clone)]
pub(super) struct ConnectionFamilies {
    open: IntGaugeVec,
    refused: IntCounterVec,
    closed: IntCounterVec,
    requests_refused: IntCounter,
    scrapes_refused: IntCounter,
}

impl ConnectionFamilies {
    pub(super) fn register(registry: &Registry) -> Result<Self, prometheus::Error> {
        let open = IntGaugeVec::new(
            Opts::new(
                "tokenclock_connections_open",
                "Client connections open now, by listener.",
            ),
            &["listener"],
        )?;
        let refused = IntCounterVec::new(
            Opts::new(
                "tokenclock_connections_refused_total",
                "Client connections closed at accept because the listener was at its cap (max_connections or metrics_max_connections) and none could be closed for it: each had a request in flight, was idle under 10 ms after one, or had its last answer unread.",
            ),
            &["listener"],
        )?;
        let closed = IntCounterVec::new(
            Opts::new(
                "tokenclock_connections_closed_total",
                "Client connections tokenclock closed on its own: head_timeout (no whole first request head within header_read_timeout), idle_timeout (no request in flight for client_idle_timeout), shutdown (idle or head-less at shutdown), bad_head (a request head refused, malformed or past the head limits, answered 400, 414 or 431 as hyper answers it: no request was forwarded or counted), evicted (at the listener's cap, closed for a new connection to take its place: of the connections with no request in flight, idle or still owing a first head, it had waited longest), answer_timeout (metrics listener only: a request still in flight 30 s after it began, its client not reading the answer), send_timeout (an answer its client took no byte of for client_send_timeout on the proxy listener, 10 s on the metrics listener: the socket stayed full).",
            ),
            &["listener", "reason"],
        )?;
        let requests_refused = IntCounter::with_opts(Opts::new(
            "tokenclock_requests_refused_total",
            "Requests tokenclock answered 503 itself because max_connections requests were in flight (each HTTP/2 stream is one).",
        ))?;
        registry.register(Box::new(open.clone()))?;
        registry.register(Box::new(refused.clone()))?;
        registry.register(Box::new(closed.clone()))?;
        let scrapes_refused = IntCounter::with_opts(Opts::new(
            "tokenclock_scrapes_refused_total",
            "GET /metrics answered 503 because 4 expositions were still being sent: each is a copy of every series, held until its client has read it, and a client that does not read would otherwise hold one each.",
        ))?;
        registry.register(Box::new(requests_refused.clone()))?;
        registry.register(Box::new(scrapes_refused.clone()))?;
        Ok(Self {
            open,
            refused,
            closed,
            requests_refused,
            scrapes_refused,
        })
    }

    /// Scrapes refused while the most expositions were being sent.
    pub(super) fn scrapes_refused(&self) -> IntCounter {
        self.scrapes_refused.clone()
    }

    /// Requests refused at the cap on requests in flight (proxy listener).
    pub(super) fn requests_refused(&self) -> IntCounter {
        self.requests_refused.clone()
    }

    /// The series of one listener, resolved once.
    pub(super) fn listener(&self, listener: &str) -> ConnectionMetrics {
        let closed = |reason: &str| self.closed.with_label_values(&[listener, reason]);
        ConnectionMetrics {
            open: self.open.with_label_values(&[listener]),
            refused: self.refused.with_label_values(&[listener]),
            head_timeout: closed("head_timeout"),
            idle_timeout: closed("idle_timeout"),
            shutdown: closed("shutdown"),
            bad_head: closed("bad_head"),
            evicted: closed("evicted"),
            answer_timeout: closed("answer_timeout"),
            send_timeout: closed("send_timeout"),
        }
    }
}

/// One listener's connection series; cheap to clone.
#[derive(Clone)]
pub(crate) struct ConnectionMetrics {
    /// Connections open now.
    pub open: IntGauge,
    /// Connections closed at accept because the listener was full.
    pub refused: IntCounter,
    /// Closed: no whole first request head within `header_read_timeout`.
    pub head_timeout: IntCounter,
    /// Closed: no request in flight for `client_idle_timeout`.
    pub idle_timeout: IntCounter,
    /// Closed at shutdown with no request in flight.
    pub shutdown: IntCounter,
    /// Closed after a request head it refused (`400`, `414`, `431`).
    pub bad_head: IntCounter,
    /// Closed at the listener's cap for a new connection to take its
    /// place: it had waited longest with no request in flight.
    pub evicted: IntCounter,
    /// Closed with a request in flight past its listener's limit (the
    /// metrics listener's 30 s: a client that asked and did not read).
    pub answer_timeout: IntCounter,
    /// Closed with an answer its client took no byte of for the listener's
    /// send limit (`client_send_timeout`; the metrics listener's 10 s).
    pub send_timeout: IntCounter,
}

impl ConnectionMetrics {
    /// Series on a registry of their own, for servers whose connections are
    /// not exported (the simulator).
    pub(crate) fn unexported() -> Result<Self, prometheus::Error> {
        ConnectionFamilies::register(&Registry::new()).map(|f| f.listener("unexported"))
    }
}
