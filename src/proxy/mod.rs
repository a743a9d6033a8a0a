//! The data path: what a request goes through from the client's socket to
//! the upstream's and back.
//!
//! - [`server`]: listeners, HTTP/1.1 + h2c connections with deadlines and
//!   caps, graceful shutdown; the metrics listener beside the proxy one.
//! - [`forward`]: forwarding one request: rewriting it for the upstream,
//!   header rules, timeouts, and the one place errors become responses.
//! - [`reload`]: SIGHUP re-reads the config file; what may change live is
//!   swapped in for requests that start afterwards.
//! - [`wire`]: HTTP/1.1 as bytes, both sides, with no I/O: request and
//!   response heads parsed and encoded, bodies decoded, as hyper does.
//! - [`health`]: readiness, which is green only when traffic would flow,
//!   and the optional HTTP probe of the upstream it follows.
//! - [`upgrade`]: WebSocket upgrades, tunnelled through both connections
//!   as the exchange's two bodies.
//! - `woken`: a poll that nothing can have changed returns at once, for
//!   the body, its idle timer and the connection loop above.
//! - `keepalive`: TCP keep-alive on client and upstream sockets, which
//!   finds a peer gone without a word and never cuts a slow one.

pub mod forward;
pub mod health;
mod keepalive;
pub mod reload;
pub(crate) mod server;
pub(crate) mod upgrade;
pub mod wire;
mod woken;
