//! The server's side of HTTP/1.1: a client's request heads read
//! ([`request`]) and the response heads written back ([`response`]),
//! exactly as hyper 1.12's server reads and writes them.

pub mod request;
pub(crate) mod response;
