//! Measurement: the bytes passing by become one [`timeline::Timeline`] per
//! request.
//!
//! Everything here is plain computation on bytes and instants handed in by
//! the proxy: no sockets, no files, no clocks read behind the caller's back
//! beyond the instants it is given, and no knowledge of the proxy, the config
//! file or the exporters (`tests/it/layers.rs` fails on an import from
//! them). In the order data flows:
//!
//! - [`observe`]: the observing body wrapper, the only seam between
//!   forwarding and measurement; it hands each frame, as sent, to an observer.
//! - [`after_write`]: the hook that lets it hand them over after the
//!   connection has written them.
//! - [`exchange`]: the observer of one request/response: it reads a copy of
//!   both bodies, feeds the stages below, writes the access-log event and
//!   hands the finished timeline to a sink.
//! - [`coding`]: a compressed (gzip, deflate, brotli, zstd) response's copy, decoded
//!   before it is framed.
//! - [`read`]: how requests are read ([`read::ReadSettings`]): event size
//!   limit, request capture, dialect overrides, label and SLO headers.
//! - [`frame`]: incremental framing of the response stream into events
//!   (SSE, NDJSON), and of a form request body into its small fields
//!   (speech to text's `multipart/form-data`).
//! - [`dialect`]: one file per API family, turning events into tokens, usage,
//!   finish reasons and server timings.
//! - [`timeline`]: one plain struct per request: instants, token counts,
//!   phases and outcome.
//! - [`slo`]: the objectives a timeline is judged against, and the judgement.

pub mod after_write;
pub mod coding;
pub mod dialect;
pub mod exchange;
pub mod frame;
pub mod observe;
pub mod read;
pub mod slo;
pub mod timeline;
