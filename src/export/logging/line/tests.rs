use std::{
    fmt, io,
    time::{Duration, UNIX_EPOCH},
};

use proptest::prelude::*;
use tracing_subscriber::{
    fmt::{format::Writer, time::FormatTime},
    layer::SubscriberExt,
};

use super::super::{
    fields::TextFields,
    testing::{access_line, Kept},
};
use super::{Clock, JsonLine, TextLine, YEAR_10000};

/// A timer that writes the same instant every time, so two formats'
/// lines can be compared byte for byte.
#[derive(Clone, Copy)]
struct Fixed;

impl FormatTime for Fixed {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        w.write_str("2026-12-03T00:34:10.123456Z")
    }
}

/// What the stock format and ours write for the same events, side by
/// side: text (`json` false) or flattened JSON, with or without ANSI.
fn both(json: bool, ansi: bool, emit: impl FnOnce()) -> (String, String) {
    let (stock, ours) = (Kept::default(), Kept::default());
    let subscriber = tracing_subscriber::registry();
    if json {
        let subscriber = subscriber
            .with(
                tracing_subscriber::fmt::layer()
                    .with_timer(Fixed)
                    .json()
                    .flatten_event(true)
                    .with_writer(stock.clone()),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .with_timer(Fixed)
                    .json()
                    .event_format(JsonLine::new(Fixed))
                    .with_writer(ours.clone()),
            );
        tracing::subscriber::with_default(subscriber, emit);
    } else {
        let subscriber = subscriber
            .with(
                tracing_subscriber::fmt::layer()
                    .with_timer(Fixed)
                    .fmt_fields(TextFields)
                    .with_ansi(ansi)
                    .with_writer(stock.clone()),
            )
            .with(
                tracing_subscriber::fmt::layer()
                    .with_timer(Fixed)
                    .fmt_fields(TextFields)
                    .event_format(TextLine::new(Fixed))
                    .with_ansi(ansi)
                    .with_writer(ours.clone()),
            );
        tracing::subscriber::with_default(subscriber, emit);
    }
    (stock.text(), ours.text())
}

/// A value whose `Debug` fails.
struct Failing;

impl fmt::Debug for Failing {
    fn fmt(&self, _: &mut fmt::Formatter<'_>) -> fmt::Result {
        Err(fmt::Error)
    }
}

/// The access line, every kind of field present and absent, each level,
/// an event with a failing `Debug`, and events in a span.
#[test]
fn the_access_line_is_the_stock_formats_line() {
    for (json, ansi) in [(false, false), (false, true), (true, false)] {
        let (stock, ours) = both(json, ansi, || {
            access_line();
            tracing::trace!(a = 1u64);
            tracing::debug!(a = 1u64);
            tracing::warn!(a = f64::INFINITY, b = -0.0f64, c = 1e21f64);
            tracing::error!(
                error = &io::Error::other("gone \"x\"") as &(dyn std::error::Error + 'static)
            );
            if !json {
                // serde_json panics here ("there should be an error"):
                // see `a_json_line_whose_debug_fails_is_lost_alone`.
                tracing::info!(bad = ?Failing, "Not written.");
            }
            let span = tracing::info_span!("request", id = "a\"b", n = 3u64);
            let _entered = span.enter();
            tracing::info!(status = 200u16, "In a span.");
            tracing::info!(parent: None, status = 200u16, "Explicitly no parent.");
        });
        assert_eq!(ours, stock, "json {json}, ansi {ansi}");
        // Every event but the one whose `Debug` fails.
        assert_eq!(stock.lines().count(), 7, "{stock}");
        if json {
            let first: serde_json::Value =
                serde_json::from_str(stock.lines().next().expect("a line")).expect("json");
            assert_eq!(first["output_tokens"], 42, "{first}");
            assert!(stock.contains(r#""span":{"#), "{stock}");
        } else if !ansi {
            assert!(
                stock.starts_with("2026-12-03T00:34:10.123456Z  INFO tokenclock::access: "),
                "{stock}"
            );
            assert!(stock.contains(" request{id=\"a\\\"b\" n=3}: "), "{stock}");
        }
    }
}

/// A value whose `Debug` fails loses its line, as in text; the stock JSON
/// format panics in serde_json instead, which would end the request's task.
#[test]
fn a_json_line_whose_debug_fails_is_lost_alone() {
    let kept = Kept::default();
    let subscriber = tracing_subscriber::registry().with(
        tracing_subscriber::fmt::layer()
            .json()
            .event_format(JsonLine::new(Fixed))
            .with_writer(kept.clone()),
    );
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(bad = ?Failing, "Not written.");
        tracing::info!(good = 1u64, "Written.");
    });
    let text = kept.text();
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(text.contains(r#""message":"Written.","good":1"#), "{text}");
}

proptest! {
    /// Any strings (quotes, backslashes, control characters, unicode),
    /// floats, integers and bools, in an event's fields and message, at
    /// any level and target: the same line as the stock format's.
    #[test]
    fn any_event_is_the_stock_formats_line(
        s in any::<String>(),
        f in any::<f64>(),
        i in any::<i64>(),
        u in any::<u64>(),
        b in any::<bool>(),
        json in any::<bool>(),
        level in 0..5u8,
    ) {
        let (stock, ours) = both(json, false, || {
            match level {
                0 => tracing::trace!(target: "a::b", s = s.as_str(), f, i, u, b, d = %s, "said {}", s),
                1 => tracing::debug!(s = s.as_str(), f, i, u, b, d = ?s),
                2 => tracing::info!(target: "x", s = s.as_str(), message = s.as_str()),
                3 => tracing::warn!(r#type = s.as_str(), f, "{s:?}"),
                _ => tracing::error!(error = &io::Error::other(s.clone()) as &(dyn std::error::Error + 'static), f),
            }
        });
        prop_assert_eq!(ours, stock);
    }
}

/// The clock writes what the stock `SystemTime` timer writes: read just
/// before and just after, the stock lines bracket ours in the same form.
#[test]
fn the_clock_writes_the_stock_timers_text() {
    let at = |timer: &dyn FormatTime| {
        let mut text = String::new();
        timer
            .format_time(&mut Writer::new(&mut text))
            .expect("time");
        text
    };
    for _ in 0..1000 {
        let before = at(&tracing_subscriber::fmt::time::SystemTime);
        let ours = at(&Clock);
        let after = at(&tracing_subscriber::fmt::time::SystemTime);
        assert_eq!(ours.len(), before.len(), "{before} {ours}");
        assert!(before <= ours && ours <= after, "{before} {ours} {after}");
    }
    let mut text = String::new();
    Clock::format_at(
        UNIX_EPOCH + Duration::new(86_400 + 61, 1_999),
        &mut Writer::new(&mut text),
    )
    .expect("time");
    assert_eq!(text, "1970-01-02T00:01:01.000001Z");
}

/// Before 1970 and after 9999 (a clock set wrong), where humantime stops,
/// the stock timer writes the time: no panic, no lost line.
#[test]
fn a_clock_out_of_humantimes_range_is_written_by_the_stock_timer() {
    let now = || {
        let mut text = String::new();
        tracing_subscriber::fmt::time::SystemTime
            .format_time(&mut Writer::new(&mut text))
            .expect("time");
        text
    };
    for wrong in [
        UNIX_EPOCH - Duration::from_secs(1),
        UNIX_EPOCH + Duration::from_secs(YEAR_10000),
    ] {
        // The stock timer's minute, read before and after: a minute may
        // turn between the two.
        let before = now();
        let mut text = String::new();
        Clock::format_at(wrong, &mut Writer::new(&mut text)).expect("time");
        let after = now();
        let minute = text.get(..16);
        assert!(
            minute == before.get(..16) || minute == after.get(..16),
            "{text} {before} {after}"
        );
    }
    let mut text = String::new();
    Clock::format_at(
        UNIX_EPOCH + Duration::from_secs(YEAR_10000 - 1),
        &mut Writer::new(&mut text),
    )
    .expect("time");
    assert_eq!(text, "9999-12-31T23:59:59.000000Z");
}
