//! What the logging tests share: an output that keeps what is written
//! to it, and an access line with every kind of field.

use std::{
    io,
    sync::{Arc, Mutex},
};

use tracing_subscriber::fmt::MakeWriter;

/// Keeps every byte written, in order; clones share the bytes.
#[derive(Clone, Default)]
pub(super) struct Kept(Arc<Mutex<Vec<u8>>>);

impl io::Write for Kept {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().expect("kept").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Kept {
    type Writer = Kept;

    fn make_writer(&'a self) -> Kept {
        self.clone()
    }
}

impl Kept {
    /// What was written.
    pub(super) fn bytes(&self) -> Vec<u8> {
        self.0.lock().expect("kept").clone()
    }

    /// What was written, as text.
    pub(super) fn text(&self) -> String {
        String::from_utf8(self.bytes()).expect("utf-8")
    }
}

/// An event shaped as `Exchange::log`'s access line, with every kind of
/// field it has, present and absent, and values that need escapes.
pub(super) fn access_line() {
    tracing::info!(
        target: "tokenclock::access",
        method = %"POST",
        path = %"/v1/chat/completions",
        version = ?http::Version::HTTP_11,
        status = 200u16,
        outcome = "ok",
        model = Some("llama \"3\" 8b\\x\u{1}\u{7f}é"),
        token_source = None::<&str>,
        duration_ms = Some(1234.5678f64),
        ttft_ms = Some(1e-7f64),
        ttfo_ms = Some(f64::NAN),
        ttlo_ms = None::<f64>,
        output_tokens = 42u64,
        offset = -3i64,
        big = u128::MAX,
        cut = true,
        request_id = "req-1",
        "Request finished."
    );
}
