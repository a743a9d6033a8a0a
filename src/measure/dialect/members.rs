//! The members of a JSON object of which only the first and the last
//! bytes were kept (`frame::ends`): what an answer too large to keep, and
//! whose bulk is not read (embeddings' vectors, a rerank's documents),
//! holds before and after that bulk.
//!
//! The first bytes are walked forward from the object's `{`, each key,
//! `:` and value, up to the `,` that shows a member complete; the last
//! bytes back from its `}`, each value, `:` and key, down to the `,`
//! before it. One byte of each is overwritten to make it an object, which
//! serde then reads as it reads a whole body. The property tests are
//! `openai_embeddings`'s, whose answers were the first read so.

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{done, json},
    ParseError, Parsed,
};

/// What a dialect read by its ends reads of an answer: its `Body`, the
/// members it needs, whose bulk (vectors, documents) it skips.
pub(super) trait Members<'a>: Deserialize<'a> {
    /// Whether a bare array (no object: vectors or results alone) is an
    /// answer, which holds nothing read, rather than unreadable.
    const BARE_ARRAY: bool;

    /// What the members say.
    fn parsed(self) -> Parsed<'a>;

    /// Each member of `self`, else of `first`: the body's end, then its
    /// start.
    fn or(self, first: Self) -> Self;
}

/// A whole answer of `T`'s dialect.
pub(super) fn whole<'a, T: Members<'a>>(data: &'a [u8]) -> Result<Parsed<'a>, ParseError> {
    match data.trim_ascii_start().first() {
        Some(b'{') => Ok(json::<T>(data)?.parsed()),
        Some(b'[') if T::BARE_ARRAY => json::<IgnoredAny>(data).map(|_| done()),
        _ => Err(ParseError::Json),
    }
}

/// An answer of `T`'s dialect of which only `head`, its first bytes, and
/// `tail`, its last, were kept: the members complete in each, read as
/// [`whole`] reads them.
pub(super) fn by_ends<'a, T: Members<'a>>(
    head: &'a mut [u8],
    tail: &'a mut [u8],
) -> Result<Parsed<'a>, ParseError> {
    match members::<T>(head, tail)? {
        Some((first, last)) => Ok(last.or(first).parsed()),
        None if T::BARE_ARRAY => Ok(done()),
        None => Err(ParseError::Json),
    }
}

/// The members complete in `head`, the first bytes of an object, and in
/// `tail`, its last, each read as a `T` (each buffer has one byte
/// overwritten to close or open an object); `None` for a bare array's
/// ends, which hold no member. What lies between is not read, nor checked.
/// Any embeddings or rerank answer's ends.
pub(super) fn members<'a, T: Deserialize<'a>>(
    head: &'a mut [u8],
    tail: &'a mut [u8],
) -> Result<Option<(T, T)>, ParseError> {
    match (
        head.trim_ascii_start().first(),
        tail.trim_ascii_end().last(),
    ) {
        (Some(b'{'), Some(b'}')) => {}
        (Some(b'['), Some(b']')) => return Ok(None),
        _ => return Err(ParseError::Json),
    }
    let first = json(closed_head(head))?;
    let last = json(opened_tail(tail))?;
    Ok(Some((first, last)))
}

/// The members complete in the first bytes of an object, as an object:
/// the `,` after the last of them becomes its `}`. A member counts as
/// complete only once its `,` is in: a number's digits may go on.
pub(super) fn closed_head(head: &mut [u8]) -> &[u8] {
    match last_comma(head) {
        Some(at) => {
            head[at] = b'}';
            &head[..=at]
        }
        None => b"{}",
    }
}

/// The members complete in the last bytes of an object, as an object: the
/// `,` before the first of them becomes its `{`.
pub(super) fn opened_tail(tail: &mut [u8]) -> &[u8] {
    match first_member(tail) {
        Some(at) => {
            tail[at] = b'{';
            &tail[at..]
        }
        None => b"{}",
    }
}

/// Where the `,` after the last member complete in `head`, the first bytes
/// of an object, is: found walking its members on from its `{`, each key,
/// its `:` and its value, until one does not end within `head`. Exact on
/// JSON; on anything else, serde refuses what it gives.
fn last_comma(head: &[u8]) -> Option<usize> {
    let mut at = ws(head, 0);
    if head.get(at) != Some(&b'{') {
        return None;
    }
    let mut last = None;
    loop {
        at = ws(head, at + 1);
        if head.get(at) != Some(&b'"') {
            return last;
        }
        let Some(colon) = string_end(head, at).map(|end| ws(head, end)) else {
            return last;
        };
        if head.get(colon) != Some(&b':') {
            return last;
        }
        let Some(value) = value_end(head, ws(head, colon + 1)) else {
            return last;
        };
        at = ws(head, value);
        if head.get(at) != Some(&b',') {
            return last;
        }
        last = Some(at);
    }
}

/// `at` moved on over JSON whitespace.
fn ws(bytes: &[u8], mut at: usize) -> usize {
    while matches!(bytes.get(at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        at += 1;
    }
    at
}

/// Where the value that starts at `at` ends, if it ends within `bytes`
/// (a number or a word that reaches their end may go on).
fn value_end(bytes: &[u8], at: usize) -> Option<usize> {
    match *bytes.get(at)? {
        b'"' => string_end(bytes, at),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = at;
            while let Some(&b) = bytes.get(i) {
                match b {
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    b'"' => {
                        i = string_end(bytes, i)?;
                        continue;
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        _ => {
            let word = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-');
            let end = at + bytes[at..].iter().position(|b| !word(b))?;
            (end > at).then_some(end)
        }
    }
}

/// Where the string whose opening quote is at `at` ends (after its
/// closing quote), if it does within `bytes`.
fn string_end(bytes: &[u8], at: usize) -> Option<usize> {
    let mut i = at + 1;
    loop {
        match *bytes.get(i)? {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            _ => i += 1,
        }
    }
}

/// Where the `,` (or `{`) before the first member complete in `tail`, the
/// last bytes of an object, is: found walking its members back from the
/// object's `}`, each value, its `:` and its key, until one does not begin
/// within `tail`. Exact on JSON; on anything else, serde refuses what it
/// gives.
fn first_member(tail: &[u8]) -> Option<usize> {
    let mut at = back_ws(tail, tail.len()).checked_sub(1)?;
    if tail[at] != b'}' {
        return None;
    }
    let mut first = None;
    loop {
        let Some(value) = value_start(tail, back_ws(tail, at)) else {
            return first;
        };
        let colon = back_ws(tail, value).checked_sub(1);
        let Some(colon) = colon.filter(|&c| tail[c] == b':') else {
            return first;
        };
        let key_end = back_ws(tail, colon);
        if key_end == 0 || tail[key_end - 1] != b'"' {
            return first;
        }
        let Some(key) = string_start(tail, key_end) else {
            return first;
        };
        match back_ws(tail, key).checked_sub(1).map(|b| (b, tail[b])) {
            Some((comma, b',')) => {
                first = Some(comma);
                at = comma;
            }
            Some((open, b'{')) => return Some(open),
            _ => return first,
        }
    }
}

/// `end` moved back over JSON whitespace.
fn back_ws(bytes: &[u8], mut end: usize) -> usize {
    while end > 0 && matches!(bytes[end - 1], b' ' | b'\t' | b'\n' | b'\r') {
        end -= 1;
    }
    end
}

/// Where the value that ends at `end` starts, if it starts within `bytes`
/// (a number or a word that reaches their start may be cut).
fn value_start(bytes: &[u8], end: usize) -> Option<usize> {
    match *bytes.get(end.checked_sub(1)?)? {
        b'"' => string_start(bytes, end),
        b'}' | b']' => {
            let mut depth = 0usize;
            let mut at = end;
            while at > 0 {
                at -= 1;
                match bytes[at] {
                    b'}' | b']' => depth += 1,
                    b'{' | b'[' => {
                        depth = depth.saturating_sub(1);
                        if depth == 0 {
                            return Some(at);
                        }
                    }
                    b'"' => at = string_start(bytes, at + 1)?,
                    _ => {}
                }
            }
            None
        }
        _ => {
            let word = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-');
            let start = bytes[..end].iter().rposition(|b| !word(b))? + 1;
            (start < end).then_some(start)
        }
    }
}

/// Where the string whose closing quote is at `end - 1` opens: the quote
/// before it that an even run of backslashes precedes (an odd one escapes
/// it). A run that reaches the start of `bytes` may be longer, but then
/// nothing before the quote can be the `:` and key or the bracket that
/// [`first_member`] needs next, so it stops there either way.
fn string_start(bytes: &[u8], end: usize) -> Option<usize> {
    let mut at = end.checked_sub(1)?;
    loop {
        at = bytes[..at].iter().rposition(|&b| b == b'"')?;
        let run = bytes[..at]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if run % 2 == 0 {
            return Some(at);
        }
    }
}
