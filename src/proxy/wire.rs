//! HTTP/1.1 as bytes, both sides of the proxy, with no I/O: what the
//! connections read and write is parsed and encoded here, and the
//! connections (`server::h1` on the client's side, `forward::pool` on the
//! upstream's) only move the bytes.
//!
//! - [`server`]: a client's request heads, as hyper 1.12's server reads
//!   them, and the response heads written back.
//! - [`client`]: the request head sent upstream and the upstream's
//!   response head, as hyper's client does both.
//! - [`chunked`]: a message body on the wire (length, chunked or until
//!   close), both ways.
//!
//! Every rule is hyper's, held to it by differential tests that run hyper
//! beside these on the same bytes. The module is public for the fuzz
//! targets of `tests/fuzz/`, which drive the parsers as a connection does.

use http::{HeaderMap, HeaderName};

pub mod chunked;
pub(crate) mod client;
pub mod server;

/// The header names a list-valued header (`Connection`, `Trailer`) holds,
/// over all its lines; what is not a valid name is left out.
pub(crate) fn listed(headers: &HeaderMap, list: &HeaderName) -> Vec<HeaderName> {
    headers
        .get_all(list)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect()
}
