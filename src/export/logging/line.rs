//! The line around an event's fields: its timestamp, level and target, as
//! `tracing-subscriber`'s `Full` text format and its flattened JSON format
//! write them, byte for byte, written directly.
//!
//! The access log writes a line per request. Through the stock formats
//! its frame cost about 3,600 instructions in text (the clock through
//! `core::fmt`, the level padded by `Formatter::pad`, the target through
//! two styles that paint nothing) and the JSON line about 29,000 (each
//! of serde's small writes passed through an `io::Write` adaptor that
//! checks it is UTF-8, and the timestamp into a fresh `String`): at 8
//! events a stream, the JSON line was 15% of the proxy's instructions.
//! Here the common case, an event outside any span, is written straight:
//! text with the same fields formatter as before ([`TextFields`]), JSON
//! with serde_json's own escaping and number formats into one buffer.
//! An event inside a span, or text with ANSI styles, goes to the stock
//! format, so the output never differs from it (property tests compare
//! the two on any fields). One difference: a field whose `Debug` fails
//! loses the JSON line here, as it loses the text line; the stock JSON
//! format panics in serde_json.
//!
//! [`TextFields`]: super::fields::TextFields

use std::{
    fmt::{self, Write as _},
    time::{SystemTime, UNIX_EPOCH},
};

use tracing::{
    field::{Field, Visit},
    Event, Level, Subscriber,
};
use tracing_subscriber::{
    fmt::{
        format::{self, Format, Full, Json, Writer},
        time::{self, FormatTime},
        FmtContext, FormatEvent, FormatFields,
    },
    registry::LookupSpan,
};

/// The wall clock as `tracing-subscriber`'s `SystemTime` timer writes it
/// (`2026-12-03T00:34:10.123456Z`, UTC, microseconds), through humantime,
/// which writes the same digits without `core::fmt`. Outside humantime's
/// range (before 1970, after 9999: a clock set wrong) the stock timer
/// writes it, as it always did.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Clock;

/// First second of the year 10000: humantime writes up to the one before.
const YEAR_10000: u64 = 253_402_300_800;

impl Clock {
    fn format_at(now: SystemTime, w: &mut Writer<'_>) -> fmt::Result {
        match now.duration_since(UNIX_EPOCH) {
            Ok(since) if since.as_secs() < YEAR_10000 => {
                write!(w, "{}", humantime::format_rfc3339_micros(now))
            }
            _ => time::SystemTime.format_time(w),
        }
    }
}

impl FormatTime for Clock {
    fn format_time(&self, w: &mut Writer<'_>) -> fmt::Result {
        Self::format_at(SystemTime::now(), w)
    }
}

/// The level as the text format pads it (five columns, right-aligned).
fn padded(level: &Level) -> &'static str {
    match *level {
        Level::TRACE => "TRACE",
        Level::DEBUG => "DEBUG",
        Level::INFO => " INFO",
        Level::WARN => " WARN",
        _ => "ERROR",
    }
}

/// `fmt::layer()`'s text line (`Format<Full>`): time, level, target, the
/// fields as `N` writes them.
#[derive(Debug)]
pub(super) struct TextLine<T = Clock> {
    timer: T,
    stock: Format<Full, T>,
}

impl<T: FormatTime + Clone> TextLine<T> {
    pub(super) fn new(timer: T) -> Self {
        Self {
            stock: format::format().with_timer(timer.clone()),
            timer,
        }
    }
}

impl<S, N, T> FormatEvent<S, N> for TextLine<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if writer.has_ansi_escapes() || ctx.event_scope().is_some() {
            return self.stock.format_event(ctx, writer, event);
        }
        let meta = event.metadata();
        if self.timer.format_time(&mut writer).is_err() {
            writer.write_str("<unknown time>")?;
        }
        writer.write_char(' ')?;
        writer.write_str(padded(meta.level()))?;
        writer.write_char(' ')?;
        writer.write_str(meta.target())?;
        writer.write_str(": ")?;
        ctx.format_fields(writer.by_ref(), event)?;
        writer.write_char('\n')
    }
}

/// `fmt::layer().json().flatten_event(true)`'s line: timestamp, level,
/// the event's fields, target.
#[derive(Debug)]
pub(super) struct JsonLine<T = Clock> {
    timer: T,
    stock: Format<Json, T>,
}

impl<T: FormatTime + Clone> JsonLine<T> {
    pub(super) fn new(timer: T) -> Self {
        Self {
            stock: format::format()
                .with_timer(timer.clone())
                .json()
                .flatten_event(true),
            timer,
        }
    }
}

impl<S, N, T> FormatEvent<S, N> for JsonLine<T>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    T: FormatTime,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // The stock format adds the span and the list of spans when there
        // is one, found this way.
        let span = event.parent().and_then(|id| ctx.span(id));
        if span.or_else(|| ctx.lookup_current()).is_some() {
            return self.stock.format_event(ctx, writer, event);
        }
        let meta = event.metadata();
        let mut line = JsonFields {
            out: Vec::with_capacity(512),
            scratch: String::with_capacity(64),
            result: Ok(()),
        };
        // The timestamp is written into the scratch the `Debug` fields
        // reuse: one allocation fewer per line.
        let mut timestamp = std::mem::take(&mut line.scratch);
        self.timer.format_time(&mut Writer::new(&mut timestamp))?;
        line.out.push(b'{');
        line.str("timestamp", &timestamp);
        line.scratch = timestamp;
        line.str("level", meta.level().as_str());
        event.record(&mut line);
        line.str("target", meta.target());
        line.result?;
        line.out.extend_from_slice(b"}\n");
        writer.write_str(std::str::from_utf8(&line.out).map_err(|_| fmt::Error)?)
    }
}

/// Writes an event's fields as serde_json writes `tracing-serde`'s map of
/// them: `"name":value`, after a comma but for the first.
struct JsonFields {
    out: Vec<u8>,
    /// A `Debug` value's text, before it is escaped.
    scratch: String,
    result: fmt::Result,
}

impl JsonFields {
    fn key(&mut self, name: &str) {
        if self.out != b"{" {
            self.out.push(b',');
        }
        self.quoted(name);
        self.out.push(b':');
    }

    /// `text` as a JSON string, escaped as serde_json escapes it.
    fn quoted(&mut self, text: &str) {
        if serde_json::to_writer(&mut self.out, text).is_err() {
            // Writing to a Vec cannot fail; should it, the line is lost.
            self.result = Err(fmt::Error);
        }
    }

    fn str(&mut self, name: &str, value: &str) {
        self.key(name);
        self.quoted(value);
    }
}

impl Visit for JsonFields {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field.name());
        self.out
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.key(field.name());
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.key(field.name());
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field.name());
        // serde_json's number: shortest round trip, `null` when not finite.
        if serde_json::to_writer(&mut self.out, &value).is_err() {
            self.result = Err(fmt::Error);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.str(field.name(), value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        if write!(text, "{value:?}").is_err() {
            // serde_json fails the line when a value's `Debug` fails.
            self.result = Err(fmt::Error);
        }
        self.str(field.name(), &text);
        self.scratch = text;
    }
}

#[cfg(test)]
mod tests;
