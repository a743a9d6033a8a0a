//! The fuzz targets of tokenclock; see `targets.rs`.

#![forbid(unsafe_code)]

mod targets;

pub use targets::{coding, dialect, h1, ndjson, request, sse};
