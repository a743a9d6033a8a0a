//! Incremental framing of a response stream into events: the stream arrives
//! cut anywhere, events come out whole, as [`bytes::Bytes`] slices of what
//! was forwarded, with the instant of the frame that completed them.
//!
//! - [`sse`]: Server-Sent Events (`text/event-stream`).
//! - [`ndjson`]: newline-delimited JSON (Ollama, TGI's native stream).

pub mod ndjson;
pub mod sse;
