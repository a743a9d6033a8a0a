//! The text format's fields, written as `tracing-subscriber`'s default
//! ([`DefaultFields`]) writes them, byte for byte, with the common values
//! written directly.
//!
//! The access log writes a line of about eighteen fields per request. The
//! default visitor writes each field through `core::fmt` with two styled
//! wrappers around the name, about a thousand instructions a field, and
//! that was most of the line's cost. Here an integer, a bool, and a string
//! that needs no escape are written as bytes; a float in decimal notation
//! through zmij; a `Display` and a `Debug` value (and a float written with
//! an exponent) through a single `{:?}`; anything else (the message,
//! errors, raw `r#` names, a string with an escape, and every field when
//! the writer paints ANSI styles) is handed to the default visitor, so the
//! text cannot differ from the default's.
//!
//! [`DefaultFields`]: tracing_subscriber::fmt::format::DefaultFields

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::{
    field::{MakeVisitor, VisitFmt, VisitOutput},
    fmt::format::{DefaultVisitor, Writer},
};

/// Makes a [`TextVisitor`] per event or span (`fmt::layer().fmt_fields`).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct TextFields;

/// Writes one event's or span's fields, separated by spaces.
pub(super) struct TextVisitor<'a> {
    writer: Writer<'a>,
    /// Nothing written yet: no space before the next field.
    is_empty: bool,
    result: fmt::Result,
}

impl<'a> MakeVisitor<Writer<'a>> for TextFields {
    type Visitor = TextVisitor<'a>;

    fn make_visitor(&self, writer: Writer<'a>) -> TextVisitor<'a> {
        TextVisitor {
            writer,
            is_empty: true,
            result: Ok(()),
        }
    }
}

impl TextVisitor<'_> {
    /// The field's name when it is written as the default writes a plain
    /// `name=value` (no style, no `r#`, not the message); else `None`.
    fn plain(&self, field: &Field) -> Option<&'static str> {
        let name = field.name();
        let special = name == "message" || name.starts_with("r#") || name.starts_with("log.");
        (self.result.is_ok() && !special && !self.writer.has_ansi_escapes()).then_some(name)
    }

    /// Writes `name=` after the separating space, if any.
    fn name(&mut self, name: &str) -> fmt::Result {
        if !std::mem::take(&mut self.is_empty) {
            self.writer.write_char(' ')?;
        }
        self.writer.write_str(name)?;
        self.writer.write_char('=')
    }

    /// Hands the field to the default visitor, which writes it (and the
    /// space before it) as `DefaultFields` does. It always writes: only
    /// with `tracing-subscriber`'s `tracing-log` feature (off here) would
    /// it drop a `log.` field, and then the space before the next would
    /// differ (`the_access_line_is_written_as_the_default_writes_it` has
    /// such a field, so turning the feature on fails it).
    fn delegate(&mut self, record: impl FnOnce(&mut DefaultVisitor<'_>)) {
        if self.result.is_err() {
            return;
        }
        let mut visitor = DefaultVisitor::new(self.writer.by_ref(), self.is_empty);
        record(&mut visitor);
        self.result = visitor.finish();
        self.is_empty = false;
    }

    fn integer(&mut self, field: &Field, value: impl itoa::Integer + fmt::Debug) {
        match self.plain(field) {
            Some(name) => {
                self.result = self
                    .name(name)
                    .and_then(|()| self.writer.write_str(itoa::Buffer::new().format(value)));
            }
            None => self.delegate(|v| v.record_debug(field, &value)),
        }
    }
}

/// Writes `value` as `Debug` writes it. In decimal notation (zero, and
/// 1e-4 ≤ |value| < 1e16: the access log's milliseconds) that is the
/// shortest digits that read back as `value`, with at least one after the
/// point; zmij writes those in about a third of the instructions, without
/// the generic formatting machinery (it switches to an exponent only below
/// 1e-5 and from 1e16). Up to 15 significant digits the shortest digits
/// are unique (15-digit decimals lie further apart than a double's
/// spacing), so any shortest writer writes `Debug`'s; with 16 or 17 two
/// may fit, and zmij's last digit may differ from the closest one `Debug`
/// picks (-766343804728487.2 against …487.3). Those, and every value out
/// of that range, `Debug` writes.
fn write_f64(writer: &mut Writer<'_>, value: f64) -> fmt::Result {
    let size = value.abs();
    if size == 0.0 || (1e-4..1e16).contains(&size) {
        let mut buffer = zmij::Buffer::new();
        let text = buffer.format_finite(value);
        if significant_digits(text) <= 15 {
            return writer.write_str(text);
        }
    }
    write!(writer, "{value:?}")
}

/// The significant digits of a number written in decimal notation: its
/// digits less the zeros that lead or trail them.
fn significant_digits(text: &str) -> usize {
    let digits = || text.bytes().filter(u8::is_ascii_digit);
    let all = digits().count();
    let leading = digits().take_while(|&b| b == b'0').count();
    if leading == all {
        return 0;
    }
    all - leading - digits().rev().take_while(|&b| b == b'0').count()
}

/// Whether `Debug` writes `s` as itself between quotes: printable ASCII
/// other than `"` and `\` (every other char may be escaped).
fn verbatim(s: &str) -> bool {
    s.bytes()
        .all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\')
}

impl Visit for TextVisitor<'_> {
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.integer(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.integer(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        match self.plain(field) {
            Some(name) => {
                let text = if value { "true" } else { "false" };
                self.result = self.name(name).and_then(|()| self.writer.write_str(text));
            }
            None => self.delegate(|v| v.record_bool(field, value)),
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        match self.plain(field) {
            Some(name) => {
                self.result = self
                    .name(name)
                    .and_then(|()| write_f64(&mut self.writer, value));
            }
            None => self.delegate(|v| v.record_f64(field, value)),
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        match self.plain(field).filter(|_| verbatim(value)) {
            Some(name) => {
                self.result = self.name(name).and_then(|()| {
                    self.writer.write_char('"')?;
                    self.writer.write_str(value)?;
                    self.writer.write_char('"')
                });
            }
            None => self.delegate(|v| v.record_str(field, value)),
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.delegate(|v| v.record_error(field, value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // The default writes a plain field's `Debug` (and `Display`, which
        // `%` wraps in a `Debug`) as is, unescaped, after `name=`.
        match self.plain(field) {
            Some(name) => {
                self.result = self
                    .name(name)
                    .and_then(|()| write!(self.writer, "{value:?}"));
            }
            None => self.delegate(|v| v.record_debug(field, value)),
        }
    }
}

impl VisitOutput<fmt::Result> for TextVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for TextVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

#[cfg(test)]
mod tests;
