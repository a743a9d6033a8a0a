//! The dialects' own structs read by the [`Scanner`] instead of serde: the
//! hot path's reader (issue #14).
//!
//! Each struct a dialect derives `Deserialize` for also implements [`Scan`]
//! (through [`scan_struct!`]) with the same fields, keys and aliases, so
//! what the dialect computes from it is shared code. Where the scanner is
//! unsure it gives up and serde reads the payload ([`Reader::Scan`]); serde
//! alone ([`Reader::Serde`]) is the reference the property tests and the
//! `scan` bench compare it with. Production reads events with
//! [`Reader::Scan`]; whole bodies are read by serde only.

use std::borrow::Cow;

use serde::{de::IgnoredAny, Deserialize};

pub(super) use super::scan::{Scanner, Str, Text};
use super::{
    common::{
        json, len32, Answer, ArgLen, Chunk, ChunkFields, Content, Count, Finishing, Summed,
        SummedFinish, Tally, TextLen, Thinking,
    },
    Escapes, Name, ParseError, Think,
};

/// A value the scanner can read as serde would.
pub(super) trait Scan<'a>: Sized {
    /// Reads one value at the scanner; `None` when unsure (serde decides).
    fn scan(s: &mut Scanner<'a>) -> Option<Self>;
}

/// How an event's payload is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reader {
    /// The scanner, and serde for what it gives up on: production.
    Scan,
    /// serde alone: the reference.
    Serde,
    /// The scanner alone, for tests that check which payloads take the fast
    /// path: a payload it gives up on is [`ParseError::Encoding`] (a reason
    /// no event read can otherwise give).
    #[cfg(test)]
    ScanOnly,
}

impl Reader {
    /// Reads one JSON payload into `T`; invalid JSON is [`ParseError::Json`].
    pub(super) fn read<'a, T: Deserialize<'a> + Scan<'a>>(
        self,
        data: &'a [u8],
    ) -> Result<T, ParseError> {
        match self {
            Self::Scan => scan(data).map_or_else(|| json(data), Ok),
            Self::Serde => json(data),
            #[cfg(test)]
            Self::ScanOnly => scan(data).ok_or(ParseError::Encoding),
        }
    }
}

/// The whole payload as one `T`, nothing but whitespace around it.
fn scan<'a, T: Scan<'a>>(data: &'a [u8]) -> Option<T> {
    let mut s = Scanner::new(data);
    let value = T::scan(&mut s)?;
    s.finish()?;
    Some(value)
}

/// Implements [`Scan`] for a struct that derives `Deserialize`:
/// `Type<'a> { field: "key" | "alias", … }` names every field (else the
/// struct literal does not compile) with the keys serde reads it under.
/// Like serde, a key read twice (aliases included) is refused, and an
/// unknown key's value is skipped; unlike serde, a struct sent as an array
/// is left to serde.
macro_rules! scan_struct {
    ($ty:ident<$lt:lifetime> { $($field:ident: $($key:literal)|+),* $(,)? }) => {
        impl<$lt> $crate::measure::dialect::lazy::Scan<$lt> for $ty<$lt> {
            fn scan(s: &mut $crate::measure::dialect::lazy::Scanner<$lt>) -> Option<Self> {
                scan_struct!(@fields s, $($field: $($key)|+),*)
            }
        }
    };
    ($ty:ident { $($field:ident: $($key:literal)|+),* $(,)? }) => {
        impl<'s> $crate::measure::dialect::lazy::Scan<'s> for $ty {
            fn scan(s: &mut $crate::measure::dialect::lazy::Scanner<'s>) -> Option<Self> {
                scan_struct!(@fields s, $($field: $($key)|+),*)
            }
        }
    };
    (@fields $s:ident, $($field:ident: $($key:literal)|+),*) => {{
        let mut value = Self { $($field: Default::default()),* };
        let mut seen = 0u64;
        $s.object(|s, key| scan_struct!(@field value, &mut seen, s, key; $($field: $($key)|+),*))?;
        Some(value)
    }};
    // One member whose key was read: `$value` gets the field it names,
    // `$seen` (`&mut u64`, one bit per field in order) says which were read.
    (@field $value:ident, $seen:expr, $s:ident, $k:ident; $($field:ident: $($key:literal)|+),*) => {{
        let mut bit = 1u64;
        $(
            if $($k == $key.as_bytes())||+ {
                if *$seen & bit != 0 {
                    return None;
                }
                *$seen |= bit;
                $value.$field = $crate::measure::dialect::lazy::Scan::scan($s)?;
                return Some(());
            }
            bit <<= 1;
        )*
        let _ = bit;
        $s.skip()
    }};
}
pub(super) use scan_struct;

/// `null` is `None`, as serde's `Option`.
impl<'a, T: Scan<'a>> Scan<'a> for Option<T> {
    fn scan(s: &mut Scanner<'a>) -> Option<Self> {
        match s.null()? {
            true => Some(None),
            false => T::scan(s).map(Some),
        }
    }
}

/// Boxed as serde's `Box<T>`: for the parts a stream sends once.
impl<'a, T: Scan<'a>> Scan<'a> for Box<T> {
    fn scan(s: &mut Scanner<'a>) -> Option<Self> {
        T::scan(s).map(Box::new)
    }
}

impl Scan<'_> for bool {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        s.bool()
    }
}

impl Scan<'_> for u64 {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        s.number()?.as_u64()
    }
}

/// A count read in place; anything else (a negative or fractional number,
/// a string, `null`) is left to serde's lenient read.
impl Scan<'_> for super::common::Index {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        let n = s.number()?.as_u64()?;
        Some(Self(super::common::index(Some(n))))
    }
}

/// Floats go through serde's own number parser, so they round as it does.
impl Scan<'_> for f64 {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        serde_json::from_slice(s.number()?.raw).ok()
    }
}

/// Borrowed unless escaped: serde unescapes those (rare: ids, models and
/// finish reasons are plain).
impl<'a> Scan<'a> for Cow<'a, str> {
    fn scan(s: &mut Scanner<'a>) -> Option<Self> {
        let text = s.string()?;
        match text.escaped {
            false => std::str::from_utf8(text.raw()).ok().map(Cow::Borrowed),
            true => serde_json::from_slice(text.json).ok().map(Cow::Owned),
        }
    }
}

impl Scan<'_> for IgnoredAny {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        s.skip().map(|()| IgnoredAny)
    }
}

/// Borrowed unless escaped, as [`Cow<str>`]'s; its bytes are not checked as
/// text again (the scanner checked any non-ASCII string).
impl<'a> Scan<'a> for Name<'a> {
    fn scan(s: &mut Scanner<'a>) -> Option<Self> {
        let text = s.string()?;
        match text.escaped {
            false => Some(Name::from(text.raw())),
            true => serde_json::from_slice::<String>(text.json)
                .ok()
                .map(|t| Name::from(Cow::Owned(t))),
        }
    }
}

/// A string's unescaped length; any other value 0. A number is checked
/// as serde checks it here (its range), so odd ones are left to serde.
fn text_len(s: &mut Scanner<'_>) -> Option<u32> {
    match s.peek()? {
        b'"' => {
            let text = s.string()?;
            s.counted(&text, false);
            Some(len32(text.len))
        }
        b'-' | b'0'..=b'9' => s.number().filter(|n| n.in_range()).map(|_| 0),
        _ => s.skip().map(|()| 0),
    }
}

impl Scan<'_> for TextLen {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        text_len(s).map(TextLen)
    }
}

/// A string's length and reasoning tags ([`Think`]), as serde's `Answer`
/// reads them; any other value as [`TextLen`].
impl Scan<'_> for Answer {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        if s.peek()? != b'"' {
            return text_len(s).map(|len| Answer {
                len,
                think: Think::NONE,
            });
        }
        let text = s.string()?;
        let think = answer_think(&text)?;
        s.counted(&text, true);
        Some(Answer {
            len: len32(text.len),
            think,
        })
    }
}

/// The reasoning tags in an answer's string read by the scanner, and
/// whether it is blank ([`Think`]). Most tokens hold neither an escape nor
/// a `<`: no tag, and blank or not by their first byte that is not space.
#[inline]
pub(super) fn answer_think(text: &Str<'_>) -> Option<Think> {
    match text.escaped || text.lt {
        true => think_in(text),
        false => Some(Think::untagged(text.raw(), false)),
    }
}

/// The reasoning tags in a string read by the scanner, in place: as is
/// when it holds no escape, or through its escapes when none is a `\u` or
/// `\/` one (a tag is then written as itself). Otherwise a tag may hide in
/// escapes (Go's encoder writes `<` as `\u003c`), and when one may, the
/// string is unescaped to be searched: only such strings with a `<` (or a
/// `\u` escape, of a `<` or not) pay for a copy. `None` only when that
/// copy cannot be made (serde decides).
#[inline(never)]
fn think_in(text: &Str<'_>) -> Option<Think> {
    let raw = text.raw();
    if !text.escaped {
        return Some(Think::find(raw, false));
    }
    let lt = text.lt;
    let Escapes { unicode, slash, .. } = Escapes::of(raw);
    if !unicode && !slash {
        return Some(match lt {
            true => Think::find(raw, true),
            false => Think::untagged(raw, true),
        });
    }
    // A `<` is there as itself or as `\u003c`.
    let escaped_lt = || unicode && raw.windows(6).any(|w| w.eq_ignore_ascii_case(b"\\u003c"));
    if !lt && !escaped_lt() {
        return Some(Think::untagged(raw, true));
    }
    let unescaped: String = serde_json::from_slice(text.json).ok()?;
    Some(Think::find(unescaped.as_bytes(), false))
}

/// An object or array counts its compact JSON length, as serde's `ArgLen`
/// computes it from the value's bytes (tool arguments: not per token).
/// An object as a content chunk's fields; any other value as nothing,
/// read as serde reads it (a number serde refuses: serde decides).
impl Scan<'_> for Chunk {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        match s.peek()? {
            b'{' => ChunkFields::scan(s).map(Chunk),
            b'"' => s.string().map(|_| Chunk::default()),
            b'-' | b'0'..=b'9' => s
                .number()
                .filter(|n| n.in_range())
                .map(|_| Chunk::default()),
            _ => s.skip().map(|()| Chunk::default()),
        }
    }
}

/// An array as Mistral's content chunks, anything else as [`Answer`].
impl Scan<'_> for Content {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        match s.peek()? {
            b'[' => Summed::<Chunk>::scan(s).map(Content::from),
            _ => Answer::scan(s).map(|answer| Content {
                answer,
                reasoning: 0,
            }),
        }
    }
}

/// An array as Mistral's content chunks, anything else as [`TextLen`].
impl Scan<'_> for Thinking {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        match s.peek()? {
            b'[' => Summed::<Chunk>::scan(s).map(Thinking::from),
            _ => text_len(s).map(Thinking),
        }
    }
}

impl Scan<'_> for ArgLen {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        match s.peek()? {
            b'{' | b'[' => {
                s.counted_otherwise();
                serde_json::from_slice(s.skip_raw()?).ok()
            }
            _ => text_len(s).map(ArgLen),
        }
    }
}

impl Scan<'_> for Count {
    fn scan(s: &mut Scanner<'_>) -> Option<Self> {
        let mut n = 0u32;
        s.array(|s| {
            n = n.saturating_add(1);
            s.skip()
        })?;
        Some(Count(n))
    }
}

/// An array folded as read (`null`: empty), as serde's `fold`.
fn fold<'a, T: Scan<'a>>(s: &mut Scanner<'a>, mut step: impl FnMut(T)) -> Option<()> {
    match s.null()? {
        true => Some(()),
        false => s.array(|s| T::scan(s).map(&mut step)),
    }
}

impl<'a, T: Scan<'a> + Tally> Scan<'a> for Summed<T> {
    fn scan(s: &mut Scanner<'a>) -> Option<Self> {
        let mut sum = Self::default();
        fold(s, |el: T| sum.push(el))?;
        Some(sum)
    }
}

impl<'a, T: Scan<'a> + Finishing<'a>> Scan<'a> for SummedFinish<'a, T> {
    fn scan(s: &mut Scanner<'a>) -> Option<Self> {
        let mut sum = Self::default();
        fold(s, |el: T| sum.push(el))?;
        Some(sum)
    }
}
