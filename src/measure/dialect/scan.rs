//! A borrowed JSON scanner for the per-event hot path: it walks one payload
//! in place, hands the dialect the keys and values it reads, and skips the
//! rest without allocating or building anything.
//!
//! It is strict by design. Whatever it is unsure of (invalid JSON, an
//! escaped key, a lone surrogate escape, invalid UTF-8 in any string,
//! nesting deeper than [`MAX_DEPTH`]) makes it give up with `None`, and the
//! payload is read again by serde, the reference (see `lazy`). So it never
//! accepts a payload serde rejects; on what it accepts, the readers built
//! on it give serde's result, which the property tests check.

use std::ops::Range;

use super::common::len32;

/// Nesting the scanner follows (objects and arrays); deeper payloads are
/// left to serde, whose own limit (128) is then the one that applies.
const MAX_DEPTH: u32 = 100;

/// One string as it appears in the payload.
#[derive(Clone, Copy, Debug)]
pub(super) struct Str<'a> {
    /// The string with its quotes, escapes as sent.
    pub(super) json: &'a [u8],
    /// Bytes after unescaping (UTF-8), what serde's `&str` would hold.
    pub(super) len: usize,
    /// Whether it holds an escape (then `json` is not the text itself).
    pub(super) escaped: bool,
    /// Whether it may hold a `<` as itself (false only when it does not;
    /// noted on the way, so a reasoning tag costs no second pass to rule
    /// out).
    pub(super) lt: bool,
}

impl<'a> Str<'a> {
    /// The bytes between the quotes.
    pub(super) fn raw(&self) -> &'a [u8] {
        self.json.get(1..self.json.len() - 1).unwrap_or_default()
    }
}

/// One number as it appears in the payload, its grammar checked.
#[derive(Clone, Copy, Debug)]
pub(super) struct Number<'a> {
    pub(super) raw: &'a [u8],
    /// No sign, fraction or exponent: digits only.
    pub(super) digits: bool,
    /// With an exponent (serde refuses some: out of range).
    pub(super) exponent: bool,
}

impl Number<'_> {
    /// Whether serde reads it as some number for sure: no exponent and not
    /// so long that it could overflow an `f64`.
    pub(super) fn in_range(&self) -> bool {
        !self.exponent && self.raw.len() <= 64
    }

    /// Its value when it is a `u64` serde accepts as one (digits only, no overflow).
    pub(super) fn as_u64(&self) -> Option<u64> {
        if !self.digits {
            return None;
        }
        self.raw.iter().try_fold(0u64, |n, d| {
            n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
        })
    }
}

/// The text a scan counted (the non-empty strings [`Scanner::counted`]
/// was told of): where it lies when it was one string, which a stream's
/// next chunk may repeat the rest around (see `openai/template.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) enum Text {
    /// No string counted, or none but empty ones.
    #[default]
    None,
    /// One: the string with its quotes at `json` (from the start of the
    /// bytes), `len` bytes once unescaped; `answer` when it was an answer's
    /// text, searched for reasoning tags (`Think`).
    One {
        json: Range<usize>,
        len: u32,
        answer: bool,
    },
    /// More than one, or a count the scanner did not read itself.
    Many,
}

impl Text {
    /// The same text in bytes that `by` more bytes precede.
    pub(super) fn shifted(self, by: usize) -> Self {
        match self {
            Self::One { json, len, answer } => Self::One {
                json: json.start + by..json.end + by,
                len,
                answer,
            },
            other => other,
        }
    }
}

/// A cursor over one payload.
pub(super) struct Scanner<'a> {
    bytes: &'a [u8],
    at: usize,
    depth: u32,
    /// Where the last key read starts (its opening quote).
    key_at: usize,
    /// The text counted so far.
    text: Text,
}

impl<'a> Scanner<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Self {
            bytes,
            at: 0,
            depth: 0,
            key_at: 0,
            text: Text::None,
        }
    }

    /// A scanner over the rest of an object whose start was read before:
    /// `bytes` follow its `{` or a `,` after one of its members, so a key
    /// comes first (see [`Scanner::members`]).
    pub(super) fn resume(bytes: &'a [u8]) -> Self {
        Self {
            depth: 1,
            ..Self::new(bytes)
        }
    }

    /// Where the last key read starts (its opening quote), from the start
    /// of the bytes.
    pub(super) fn key_at(&self) -> usize {
        self.key_at
    }

    /// Where the scanner is, from the start of the bytes.
    pub(super) fn at(&self) -> usize {
        self.at
    }

    /// Notes that the string just read (`str`) was counted as text;
    /// `answer` when as an answer's text.
    #[inline]
    pub(super) fn counted(&mut self, str: &Str<'a>, answer: bool) {
        if str.len == 0 {
            return;
        }
        self.text = match self.text {
            Text::None => Text::One {
                json: self.at - str.json.len()..self.at,
                len: len32(str.len),
                answer,
            },
            _ => Text::Many,
        };
    }

    /// Notes a count taken otherwise than from a string the scanner read.
    pub(super) fn counted_otherwise(&mut self) {
        self.text = Text::Many;
    }

    /// Whether any text was counted so far.
    pub(super) fn counted_any(&self) -> bool {
        self.text != Text::None
    }

    /// The text counted so far.
    pub(super) fn text(&self) -> Text {
        self.text.clone()
    }

    /// Ends the scan: only whitespace may follow the value.
    pub(super) fn finish(mut self) -> Option<()> {
        self.ws();
        (self.at == self.bytes.len()).then_some(())
    }

    /// The next byte after whitespace, not consumed.
    #[inline]
    pub(super) fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes.get(self.at).copied()
    }

    #[inline]
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.bytes.get(self.at) {
            self.at += 1;
        }
    }

    #[inline]
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn word(&mut self, word: &[u8]) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes.get(self.at..end)? == word).then(|| self.at = end)
    }

    /// Consumes `null` when it comes next; whether it did.
    pub(super) fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.word(b"null").map(|()| true)
    }

    pub(super) fn bool(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.word(b"true").map(|()| true),
            b'f' => self.word(b"false").map(|()| false),
            _ => None,
        }
    }

    /// A number: `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
    pub(super) fn number(&mut self) -> Option<Number<'a>> {
        self.ws();
        let (b, start) = (self.bytes, self.at);
        let digits = |i: usize| i + b.get(i..).map_or(0, digit_run);
        let mut i = start + usize::from(b.get(start) == Some(&b'-'));
        i = match b.get(i)? {
            b'0' => i + 1,
            b'1'..=b'9' => digits(i + 1),
            _ => return None,
        };
        let int_end = i;
        if b.get(i) == Some(&b'.') {
            i = Some(digits(i + 1)).filter(|&end| end > i + 1)?;
        }
        let exponent = matches!(b.get(i), Some(b'e' | b'E'));
        if exponent {
            let sign = usize::from(matches!(b.get(i + 1), Some(b'+' | b'-')));
            i = Some(digits(i + 1 + sign)).filter(|&end| end > i + 1 + sign)?;
        }
        self.at = i;
        Some(Number {
            raw: &b[start..i],
            digits: b[start] != b'-' && int_end == i,
            exponent,
        })
    }

    /// A string; `None` unless one comes next.
    pub(super) fn string(&mut self) -> Option<Str<'a>> {
        if self.peek()? != b'"' {
            return None;
        }
        let (b, start) = (self.bytes, self.at);
        let (mut i, mut shrink, mut high, mut lt) = (start + 1, 0, 0u64, 0u64);
        loop {
            i += plain_run(b.get(i..)?, &mut high, &mut lt);
            match b.get(i)? {
                b'"' => break,
                b'\\' => {
                    let (sent, unescaped) = escape(b.get(i + 1..)?)?;
                    i += 1 + sent;
                    shrink += 1 + sent - unescaped;
                }
                _ => return None,
            }
        }
        let json = &b[start..=i];
        if high & HIGHS != 0 && std::str::from_utf8(json).is_err() {
            return None;
        }
        self.at = i + 1;
        Some(Str {
            json,
            len: json.len() - 2 - shrink,
            escaped: shrink > 0,
            lt: lt != 0,
        })
    }

    /// An object's key, without its quotes: plain text only, an escaped
    /// key is left to serde (as `object` says). Cheaper than `string`,
    /// which counts what escapes stand for.
    fn key(&mut self) -> Option<&'a [u8]> {
        if self.peek()? != b'"' {
            return None;
        }
        let (b, start, mut high) = (self.bytes, self.at + 1, 0u64);
        self.key_at = self.at;
        let end = start + plain_run(b.get(start..)?, &mut high, &mut 0);
        if *b.get(end)? != b'"' {
            return None; // an escape, or a control character
        }
        let key = &b[start..end];
        if high & HIGHS != 0 && std::str::from_utf8(key).is_err() {
            return None;
        }
        self.at = end + 1;
        Some(key)
    }

    fn enter(&mut self, open: u8) -> Option<()> {
        self.eat(open)?;
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// After an element: `true` when another follows, `false` at `close`.
    #[inline]
    fn next(&mut self, close: u8) -> Option<bool> {
        match self.peek()? {
            b',' => self.at += 1,
            c if c == close => {
                self.at += 1;
                self.depth -= 1;
                return Some(false);
            }
            _ => return None,
        }
        Some(true)
    }

    /// Reads an object: `field` gets each key (never an escaped one) with
    /// the scanner at its value, which it must consume.
    pub(super) fn object(
        &mut self,
        field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
        self.enter(b'{')?;
        if self.peek()? == b'}' {
            return self.next(b'}').map(drop);
        }
        self.members(field)
    }

    /// Reads the members of an object up to its `}`, from a key on: the
    /// rest of [`Scanner::object`], and what a [`Scanner::resume`]d one reads.
    #[inline]
    pub(super) fn members(
        &mut self,
        mut field: impl FnMut(&mut Self, &'a [u8]) -> Option<()>,
    ) -> Option<()> {
        loop {
            let key = self.key()?;
            self.eat(b':')?;
            field(self, key)?;
            if !self.next(b'}')? {
                return Some(());
            }
        }
    }

    /// Reads an array: `element` is called at each element, which it must consume.
    pub(super) fn array(&mut self, mut element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.enter(b'[')?;
        if self.peek()? == b']' {
            return self.next(b']').map(drop);
        }
        loop {
            element(self)?;
            if !self.next(b']')? {
                return Some(());
            }
        }
    }

    /// Skips one value of any kind, checked as strictly as the rest.
    pub(super) fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(|s, _| s.skip()),
            b'[' => self.array(Self::skip),
            b'"' => self.string().map(drop),
            b'n' => self.word(b"null"),
            b't' => self.word(b"true"),
            b'f' => self.word(b"false"),
            _ => self.number().map(drop),
        }
    }

    /// Skips one value and returns its bytes.
    pub(super) fn skip_raw(&mut self) -> Option<&'a [u8]> {
        self.ws();
        let start = self.at;
        self.skip()?;
        self.bytes.get(start..self.at)
    }
}

/// `0x0101…01`: one in each byte of a word.
const ONES: u64 = u64::MAX / 255;
/// The top bit of each byte of a word.
const HIGHS: u64 = ONES << 7;

/// Bytes up to the next quote, backslash or control character (or the
/// end), eight at a time; ORs what it passes into `high` so the caller
/// knows whether the string has non-ASCII bytes to validate, and into `lt`
/// whether a `<` may be among them.
fn plain_run(s: &[u8], high: &mut u64, lt: &mut u64) -> usize {
    let has = |word: u64, byte: u8| {
        let x = word ^ (ONES * u64::from(byte));
        x.wrapping_sub(ONES) & !x
    };
    let mut i = 0;
    while let Some(chunk) = s.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let word = u64::from_le_bytes(*chunk);
        *high |= word;
        // Bytes after the run's end count too: a `<` there is a false
        // alarm, which only costs the exact look.
        *lt |= has(word, b'<') & HIGHS;
        let control = word.wrapping_sub(ONES * 0x20) & !word;
        let stop = (control | has(word, b'"') | has(word, b'\\')) & HIGHS;
        if stop != 0 {
            return i + stop.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    while let Some(&c) = s.get(i) {
        if c == b'"' || c == b'\\' || c < 0x20 {
            break;
        }
        *high |= u64::from(c);
        *lt |= u64::from(c == b'<');
        i += 1;
    }
    i
}

/// The ASCII digits at the start of `s`, eight at a time: timestamps and
/// ids run to 10 and 19 digits.
fn digit_run(s: &[u8]) -> usize {
    let mut i = 0;
    while let Some(chunk) = s.get(i..).and_then(<[u8]>::first_chunk::<8>) {
        let word = u64::from_le_bytes(*chunk);
        // A byte is a digit when its high nibble is 3 and stays 3 with 6
        // added (0x30..=0x39). Adding carries out of a byte only from
        // 0xFA up, a non-digit: what it spoils lies after the first one.
        let off = ((word & (ONES * 0xF0)) ^ (ONES * 0x30))
            | ((word.wrapping_add(ONES * 0x06) & (ONES * 0xF0)) ^ (ONES * 0x30));
        // A high bit in each byte of `off` that is not zero.
        let stop = (((off & !HIGHS).wrapping_add(!HIGHS)) | off) & HIGHS;
        if stop != 0 {
            return i + stop.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    i + s
        .get(i..)
        .unwrap_or_default()
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .count()
}

/// One escape, `rest` starting after its backslash: the bytes it takes
/// and the bytes it stands for. Surrogates must come as a valid pair.
fn escape(rest: &[u8]) -> Option<(usize, usize)> {
    match rest.first()? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some((1, 1)),
        b'u' => match hex4(rest.get(1..5)?)? {
            0xD800..=0xDBFF => {
                if rest.get(5..7)? != b"\\u" {
                    return None;
                }
                let low = hex4(rest.get(7..11)?)?;
                (0xDC00..=0xDFFF).contains(&low).then_some((11, 4))
            }
            0xDC00..=0xDFFF => None,
            n => Some((5, char::from_u32(n)?.len_utf8())),
        },
        _ => None,
    }
}

fn hex4(digits: &[u8]) -> Option<u32> {
    digits
        .iter()
        .try_fold(0u32, |n, &d| Some(n << 4 | char::from(d).to_digit(16)?))
}

#[cfg(test)]
mod tests {
    use super::digit_run;

    /// Every byte value at every place of a digit run, with the bytes that
    /// carry when 6 is added (0xFA up) right before digits.
    #[test]
    fn a_digit_run_ends_at_the_first_byte_that_is_not_a_digit() {
        let naive = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
        for len in 0..20 {
            for at in 0..len {
                for byte in 0..=255u8 {
                    let mut s: Vec<u8> = (0..len).map(|i| b'0' + (i % 10) as u8).collect();
                    s[at] = byte;
                    assert_eq!(digit_run(&s), naive(&s), "{s:?}");
                    if at + 1 < len {
                        s[at + 1] = 0xFF;
                        assert_eq!(digit_run(&s), naive(&s), "{s:?}");
                    }
                }
            }
        }
    }
}
