//! HTTP/1.1 on a client's connection in tokenclock's own codec.

mod body;
mod connection;

pub(crate) use self::body::{Body, BodyError};
pub(super) use self::connection::{Connection, RefusedHead};
#[cfg(test)]
mod tests;
