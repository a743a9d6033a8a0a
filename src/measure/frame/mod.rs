//! Incremental framing of a response stream into events: the stream arrives
//! cut anywhere, events come out whole, as [`bytes::Bytes`] slices of what
//! was forwarded, with the instant of the frame that completed them.
//!
//! - [`sse`]: Server-Sent Events (`text/event-stream`).
//! - [`ndjson`]: newline-delimited JSON (Ollama, TGI's native stream).
//!
//! And of one request body: [`form`], the small fields of a
//! `multipart/form-data` body (speech to text's); of one whole response
//! body too large to keep: [`ends`], its first and last bytes (an
//! embeddings batch's).

pub mod ends;
pub mod form;
pub mod ndjson;
pub mod sse;

/// The property tests' settings: `cases` inputs, and the seeds of past
/// failures kept beside the test file (not in a top-level folder).
#[cfg(test)]
pub(crate) fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    use proptest::test_runner::{Config, FileFailurePersistence};
    Config {
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::with_cases(cases)
    }
}
