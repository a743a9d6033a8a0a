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

/// `value` through [`write_f64`](super::write_f64).
fn written(value: f64) -> String {
    let mut text = String::new();
    super::write_f64(
        &mut tracing_subscriber::fmt::format::Writer::new(&mut text),
        value,
    )
    .expect("written");
    text
}

#[test]
fn significant_digits_leave_out_the_zeros_around_them() {
    for (text, n) in [
        ("0.0", 0),
        ("-0.0", 0),
        ("0.000123", 3),
        ("1000000000000000.0", 1),
        ("12.340", 4),
        ("-1105302734487234.2", 17),
    ] {
        assert_eq!(super::significant_digits(text), n, "{text}");
    }
}

/// Where `Debug` changes notation, and values whose shortest digits are
/// many or few: written as `Debug` writes them.
#[test]
fn floats_at_the_edges_of_decimal_notation_are_written_as_debug_writes_them() {
    let edges = [
        0.0,
        -0.0,
        1e-4,
        1e-4f64.next_down(),
        1e-4f64.next_up(),
        1e-5,
        5e-5,
        1e16,
        1e16f64.next_down(),
        1e15,
        0.1 + 0.2,
        1.0,
        123.0,
        1234.5678,
        2f64.powi(53),
        f64::MIN_POSITIVE,
        f64::MAX,
        f64::EPSILON,
        // 16 and 17 digits, where zmij's last one differs from `Debug`'s.
        766343804728487.3,
        1105302734487234.3,
        0.1 + 0.7,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for value in edges.iter().flat_map(|&v| [v, -v]) {
        assert_eq!(written(value), format!("{value:?}"), "{value:e}");
    }
}

proptest! {
    /// Any float, and many in and near decimal notation's range and as the
    /// access log's durations are (about a quarter of those need 16 or 17
    /// digits and go to `Debug`).
    #[test]
    fn any_float_is_written_as_debug_writes_it(
        value in prop_oneof![
            any::<f64>(),
            1e-4f64..1e16,
            -1e16f64..-1e-4,
            0.0f64..10_000.0,
            1e-6f64..1e-3,
            1e15f64..1e17,
            // The access log's milliseconds, as `Exchange::log` makes them.
            (0u64..3_600_000_000_000)
                .prop_map(|n| std::time::Duration::from_nanos(n).as_secs_f64() * 1e3),
        ],
    ) {
        prop_assert_eq!(written(value), format!("{value:?}"));
    }
}
