use std::{
    io,
    sync::{Arc, Mutex},
};

use proptest::prelude::*;
use tracing_subscriber::{fmt, fmt::MakeWriter, layer::SubscriberExt};

use super::TextFields;

/// An output that keeps what the layer writes.
#[derive(Clone, Default)]
struct Kept(Arc<Mutex<Vec<u8>>>);

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
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().expect("kept").clone()).expect("utf-8")
    }
}

/// What the default fields and [`TextFields`] write for the same events,
/// side by side (no timestamps, which would differ).
fn both(ansi: bool, emit: impl FnOnce()) -> (String, String) {
    let (default, ours) = (Kept::default(), Kept::default());
    let subscriber = tracing_subscriber::registry()
        .with(
            fmt::layer()
                .with_writer(default.clone())
                .with_ansi(ansi)
                .without_time(),
        )
        .with(
            fmt::layer()
                .fmt_fields(TextFields)
                .with_writer(ours.clone())
                .with_ansi(ansi)
                .without_time(),
        );
    tracing::subscriber::with_default(subscriber, emit);
    (default.text(), ours.text())
}

/// The access log's line, as `Exchange::log` writes it: every kind of
/// field it has, present and absent.
#[test]
fn the_access_line_is_written_as_the_default_writes_it() {
    for ansi in [false, true] {
        let (default, ours) = both(ansi, || {
            tracing::info!(
                target: "tokenclock::access",
                method = %"POST",
                path = %"/v1/chat/completions",
                version = ?http::Version::HTTP_11,
                status = 200u16,
                outcome = "ok",
                model = Some("llama \"3\" 8b\\x"),
                token_source = None::<&str>,
                duration_ms = Some(1234.5678f64),
                ttft_ms = Some(1e-7f64),
                ttfo_ms = None::<f64>,
                output_tokens = 42u64,
                offset = -3i64,
                cut = true,
                request_id = "req-1",
                "Request finished."
            );
            tracing::info!("log.target" = "x", status = 200u16, "Logged.");
        });
        assert_eq!(ours, default);
        assert!(ansi || default.contains(" output_tokens=42 "), "{default}");
    }
}

proptest! {
    /// Any strings (quotes, backslashes, control characters, ANSI
    /// escapes, unicode), floats, integers and bools, in an event's
    /// fields, its message and a span's fields, with and without ANSI
    /// styles: the same text as the default.
    #[test]
    fn any_fields_are_written_as_the_default_writes_them(
        s in any::<String>(),
        plain in "[ -~]{0,12}",
        f in any::<f64>(),
        i in any::<i64>(),
        u in any::<u64>(),
        b in any::<bool>(),
        ansi in any::<bool>(),
    ) {
        let (default, ours) = both(ansi, || {
            let span = tracing::info_span!("request", id = s.as_str(), n = u);
            let _entered = span.enter();
            tracing::warn!(s = s.as_str(), plain = plain.as_str(), f, i, u, b, r#type = "x", "said {}", s);
            tracing::info!(s = s.as_str(), message = plain.as_str());
            tracing::error!(error = &io::Error::other(s.clone()) as &(dyn std::error::Error + 'static), f);
        });
        prop_assert_eq!(ours, default);
    }
}
