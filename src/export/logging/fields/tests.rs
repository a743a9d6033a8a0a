use std::io;

use proptest::prelude::*;
use tracing_subscriber::{fmt, layer::SubscriberExt};

use super::super::testing::{access_line, Kept};
use super::TextFields;

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
            access_line();
            tracing::info!("log.target" = "x", status = 200u16, "Logged.");
        });
        assert_eq!(ours, default);
        assert!(ansi || default.contains(" output_tokens=42 "), "{default}");
    }
}

proptest! {
    /// Any strings (quotes, backslashes, control characters, ANSI
    /// escapes, unicode), as they are and as `Display` and `Debug`
    /// values, floats, integers and bools, in an event's
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
            tracing::warn!(s = s.as_str(), plain = plain.as_str(), f, i, u, b, d = %s, e = ?s, r#type = "x", "said {}", s);
            tracing::info!(s = s.as_str(), message = plain.as_str());
            tracing::error!(error = &io::Error::other(s.clone()) as &(dyn std::error::Error + 'static), f);
        });
        prop_assert_eq!(ours, default);
    }
}
