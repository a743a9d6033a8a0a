//! OpenAI Embeddings, `…/v1/embeddings`: what OpenAI, Azure OpenAI, vLLM,
//! SGLang, TEI, llama.cpp, Ollama, LiteLLM and Infinity answer there.
//!
//! The answer is one whole body, `{"object":"list","data":[{"object":
//! "embedding","index":0,"embedding":[…]}, …],"model":…,"usage":
//! {"prompt_tokens":…,"total_tokens":…}}` (vLLM writes `id`, `created` and
//! `model` before `data`). Nothing is generated: its output is 0 tokens,
//! its input the usage's `prompt_tokens`.
//!
//! The vectors (numbers, or base64 with `encoding_format: "base64"`, which
//! the OpenAI Python SDK asks for unless told otherwise) are nearly all of
//! the body, and a batch's is often MiBs, past `max_event_bytes`. So only
//! the body's ends are kept (`frame::ends`), and what is read is the
//! members complete in its first bytes and those complete in its last,
//! each read as a whole body's. A bare array (llama.cpp's own
//! `/embeddings`) holds nothing to read.

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{done, json, name},
    openai::OpenAiUsage,
    Name, ParseError, Parsed, Usage,
};

/// The members of an answer read: the vectors are not.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    /// vLLM's `embd-…`.
    #[serde(default, borrow, deserialize_with = "name")]
    id: Option<Name<'a>>,
    #[serde(default)]
    usage: Option<OpenAiUsage>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl<'a> Body<'a> {
    fn parsed(self) -> Parsed<'a> {
        Parsed {
            usage: self.usage.map(Usage::from),
            model: self.model,
            response_id: self.id,
            error: self.error.is_some(),
            ..done()
        }
    }

    /// Each member of `self`, else of `first`: the body's end, then its start.
    fn or(self, first: Self) -> Self {
        Self {
            model: self.model.or(first.model),
            id: self.id.or(first.id),
            usage: self.usage.or(first.usage),
            error: self.error.or(first.error),
        }
    }
}

/// A whole answer.
pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    match data.trim_ascii_start().first() {
        Some(b'{') => Ok(json::<Body<'_>>(data)?.parsed()),
        // Vectors only.
        Some(b'[') => json::<IgnoredAny>(data).map(|_| done()),
        _ => Err(ParseError::Json),
    }
}

/// An answer of which only `head`, its first bytes, and `tail`, its last,
/// were kept: the members complete in each, read as [`body`] reads them.
pub(super) fn ends<'a>(head: &'a mut [u8], tail: &'a mut [u8]) -> Result<Parsed<'a>, ParseError> {
    Ok(match members::<Body<'a>>(head, tail)? {
        Some((first, last)) => last.or(first).parsed(),
        None => done(),
    })
}

/// The members complete in `head`, the first bytes of an object, and in
/// `tail`, its last, each read as a `T` (each buffer has one byte
/// overwritten to close or open an object); `None` for a bare array's
/// ends, which hold no member. What lies between is not read, nor checked.
/// Any embeddings answer's ends (Ollama's too).
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
fn closed_head(head: &mut [u8]) -> &[u8] {
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
fn opened_tail(tail: &mut [u8]) -> &[u8] {
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

#[cfg(test)]
mod tests;
