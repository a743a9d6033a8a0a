//! What tokenclock learns from a request body.
//!
//! A body is read once per request, but it holds the whole prompt: a chat
//! request with a long history is tens or hundreds of KiB of strings, and
//! the reference parse (serde_json's `Value`) allocates each of them to
//! read a handful of fields. The scanner of the event path reads it in
//! place instead (`scan`), counting each string's length without copying
//! it; whatever it is unsure of (a duplicate of a key read here, an escaped
//! `model` or key, a number near what `Value` refuses, invalid JSON) sends the
//! body to the reference, whose result is then the one given. Property
//! tests check both give the same on random bodies.

use serde_json::Value;

use super::{
    scan::{Number, Scanner},
    Dialect,
};

/// Where the output cap may be, first match wins (after the dialect's own,
/// [`own_cap`]).
const MAX_TOKENS: [&str; 8] = [
    "/max_tokens",
    "/max_completion_tokens",
    "/max_output_tokens",
    "/options/num_predict",
    "/n_predict",
    "/parameters/max_new_tokens",
    "/sampling_params/max_new_tokens",
    "/sampling_params/max_tokens",
];

/// Top-level fields holding prompt text, across the families (llama.cpp's
/// `/infill`'s three: the code before and after the cursor and other
/// files' chunks; then a rerank's query and documents, TEI's `texts`, and
/// the pairs of vLLM's and SGLang's `/score`).
const PROMPT_FIELDS: [&str; 18] = [
    "messages",
    "prompt",
    "input",
    "system",
    "inputs",
    "text",
    "input_prefix",
    "input_suffix",
    "input_extra",
    "query",
    "documents",
    "texts",
    "text_1",
    "text_2",
    "queries",
    "items",
    "data_1",
    "data_2",
];

/// Prompt fields whose text the model continues as written, with no chat
/// template around it (completions' `prompt`, llama.cpp's too, SGLang's
/// `text`, TGI's `inputs`), when a string: one that ends in an open
/// `<think>` opens the answer's reasoning ([`RequestInfo::opens_reasoning`]).
const RAW_PROMPT_FIELDS: [&str; 3] = ["prompt", "text", "inputs"];

/// What tokenclock learns from a request body (a capped copy read on the
/// side while it streams upstream). Unknown or unreadable bodies give the
/// default: nothing learned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestInfo {
    /// `model`.
    pub model: Option<String>,
    /// `stream`.
    pub stream: Option<bool>,
    /// `stream_options.include_usage`.
    pub include_usage: Option<bool>,
    /// `stream_options.continuous_usage_stats` (vLLM).
    pub continuous_usage: Option<bool>,
    /// The output cap the client asked for: `max_tokens`,
    /// `max_completion_tokens`, `max_output_tokens`, Ollama
    /// `options.num_predict`, llama.cpp `n_predict`, TGI
    /// `parameters.max_new_tokens`, SGLang `sampling_params.max_new_tokens`,
    /// vLLM `/inference/v1/generate`'s `sampling_params.max_tokens`.
    pub max_tokens: Option<u64>,
    /// Bytes of prompt text (message contents, `prompt`, `input`, `system`,
    /// `inputs`, SGLang's `text`, llama.cpp `/infill`'s `input_prefix`,
    /// `input_suffix` and `input_extra`, a rerank's `query` and
    /// `documents`, TEI's `texts`, `/score`'s `text_1`, `text_2`,
    /// `queries`, `items`, `data_1` and `data_2`): the basis
    /// of the input-token estimate when the server reports no usage.
    pub prompt_bytes: u64,
    /// A raw prompt field (`prompt`, `text`, `inputs`) is a string that
    /// ends in `<think>`, maybe with whitespace after it: the prompt opened
    /// the reasoning, and the answer's text is reasoning until `</think>`.
    /// Only the raw-text dialects' prompts are read so
    /// ([`Dialect::raw_prompt`]); a chat's is wrapped in a template.
    pub opens_reasoning: bool,
}

impl RequestInfo {
    /// Reads what it can from `body`; never fails.
    pub fn parse(dialect: Dialect, body: &[u8]) -> Self {
        if !dialect.reads_request() {
            return Self::default();
        }
        let own = own_cap(dialect);
        scan_for(body, own).unwrap_or_else(|| Self::reference_for(body, own))
    }

    /// The reference [`RequestInfo::parse`] reads a body by when it is
    /// unsure (serde_json's `Value`): what the property tests compare with,
    /// and the `scan` bench's baseline. Reads any body as JSON, whatever
    /// its dialect.
    #[doc(hidden)]
    pub fn parse_reference(body: &[u8]) -> Self {
        Self::reference_for(body, None)
    }

    /// [`RequestInfo::parse_reference`], the cap at `MAX_TOKENS[own]`
    /// first when there is one.
    fn reference_for(body: &[u8], own: Option<usize>) -> Self {
        let Ok(v) = serde_json::from_slice::<Value>(body) else {
            return Self::default();
        };
        if !v.is_object() {
            return Self::default();
        }
        let options = v.get("stream_options");
        let flag = |name: &str| options.and_then(|o| o.get(name)).and_then(Value::as_bool);
        Self {
            model: v.get("model").and_then(Value::as_str).map(str::to_owned),
            stream: v.get("stream").and_then(Value::as_bool),
            include_usage: flag("include_usage"),
            continuous_usage: flag("continuous_usage_stats"),
            max_tokens: own
                .map(|i| MAX_TOKENS[i])
                .into_iter()
                .chain(MAX_TOKENS)
                .find_map(|p| v.pointer(p).and_then(Value::as_u64)),
            prompt_bytes: PROMPT_FIELDS
                .iter()
                .filter_map(|f| v.get(*f))
                .map(text_bytes)
                .sum(),
            opens_reasoning: RAW_PROMPT_FIELDS
                .iter()
                .filter_map(|f| v.get(*f).and_then(Value::as_str))
                .any(opens_think),
        }
    }
}

/// The fields of a form (`multipart/form-data`, speech to text's) read,
/// by [`RequestInfo::from_form`]'s index: vLLM's flattened stream options
/// (`stream_include_usage`, `stream_continuous_usage_stats`) stand for
/// JSON's `stream_options`.
pub const FORM_FIELDS: &[&str] = &[
    "model",
    "stream",
    "stream_include_usage",
    "stream_continuous_usage_stats",
    "max_completion_tokens",
];

impl RequestInfo {
    /// What a form's fields say ([`FORM_FIELDS`], each value by its index);
    /// `prompt_bytes` stays 0: the input is audio, whose tokens its bytes
    /// do not tell, so input tokens come from usage only.
    pub fn from_form<'a>(value: impl Fn(usize) -> Option<&'a [u8]>) -> Self {
        let flag = |i| value(i).and_then(form_bool);
        Self {
            model: value(0)
                .and_then(|v| std::str::from_utf8(v).ok())
                .map(str::to_owned),
            stream: flag(1),
            include_usage: flag(2),
            continuous_usage: flag(3),
            max_tokens: value(4)
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.parse().ok()),
            prompt_bytes: 0,
            opens_reasoning: false,
        }
    }
}

/// Whitespace a prompt may end with after its `<think>` (JSON's).
const SPACE: [char; 4] = [' ', '\n', '\r', '\t'];

/// Whether `text` ends in `<think>`, whitespace after it allowed: the
/// reference's reading of a raw prompt.
fn opens_think(text: &str) -> bool {
    text.trim_end_matches(SPACE).ends_with("<think>")
}

/// [`opens_think`] on a JSON string's raw bytes (`escaped`: it holds
/// escapes), read back from its end: a prompt's tail is all it takes.
fn raw_opens_think(raw: &[u8], escaped: bool) -> bool {
    let mut end = raw.len();
    let mut back = || {
        let (unit, len) = unit_before(raw, end, escaped)?;
        end -= len;
        Some(unit)
    };
    let mut unit = back();
    while unit.is_some_and(|u| SPACE.iter().any(|&c| u == c as u32)) {
        unit = back();
    }
    for want in b"<think>".iter().rev() {
        if unit != Some(u32::from(*want)) {
            return false;
        }
        unit = back();
    }
    true
}

/// The text unit that ends at `end` of a JSON string's raw bytes and how
/// many raw bytes it takes: an escape (`\n`, `\u003c`: a UTF-16 unit) or one
/// byte as itself. A backslash escapes what follows it only when an odd
/// run of them ends there (`\\n` is a backslash and an `n`).
fn unit_before(raw: &[u8], end: usize, escaped: bool) -> Option<(u32, usize)> {
    let last = *raw.get(end.checked_sub(1)?)?;
    if !escaped {
        return Some((u32::from(last), 1));
    }
    // Whether the backslash at `at` starts an escape.
    let escapes = |at: usize| raw[..=at].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1;
    if end >= 6 && raw[end - 6] == b'\\' && raw[end - 5] == b'u' && escapes(end - 6) {
        let hex = std::str::from_utf8(&raw[end - 4..end]).ok();
        if let Some(unit) = hex.and_then(|h| u32::from_str_radix(h, 16).ok()) {
            return Some((unit, 6));
        }
    }
    if end >= 2 && raw[end - 2] == b'\\' && escapes(end - 2) {
        let unit = match last {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'b' => 8,
            b'f' => 12,
            other => other,
        };
        return Some((u32::from(unit), 2));
    }
    Some((u32::from(last), 1))
}

/// A boolean form value as the servers read one (pydantic's lax booleans,
/// which vLLM's FastAPI forms use): `true`, `1`, `yes`, `on`, `t`, `y` and
/// their opposites, in any case.
fn form_bool(v: &[u8]) -> Option<bool> {
    const TRUE: [&[u8]; 6] = [b"true", b"1", b"yes", b"on", b"t", b"y"];
    const FALSE: [&[u8]; 6] = [b"false", b"0", b"no", b"off", b"f", b"n"];
    let is = |words: [&[u8]; 6]| words.iter().any(|w| v.eq_ignore_ascii_case(w));
    match (is(TRUE), is(FALSE)) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}

/// Bytes of text in a prompt value: a string, an array of strings or parts,
/// or a message / part object (`content`, `text`). Images, token-id arrays
/// and other fields count 0.
fn text_bytes(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.len() as u64,
        Value::Array(items) => items.iter().map(text_bytes).sum(),
        Value::Object(map) => ["content", "text"]
            .iter()
            .filter_map(|k| map.get(*k))
            .map(text_bytes)
            .sum(),
        _ => 0,
    }
}

/// [`scan_for`] with no dialect's cap first: in the reference's order.
#[cfg(test)]
pub(super) fn scan(body: &[u8]) -> Option<RequestInfo> {
    scan_for(body, None)
}

/// The path of [`MAX_TOKENS`] a dialect's server reads its output cap
/// from, when it is not the first found: Ollama's `options.num_predict`
/// (it ignores a top-level `max_tokens`), llama.cpp's `n_predict`, TGI's
/// `parameters.max_new_tokens`, SGLang's `sampling_params.max_new_tokens`,
/// the Responses API's `max_output_tokens`.
fn own_cap(dialect: Dialect) -> Option<usize> {
    match dialect {
        Dialect::OpenAiResponses => Some(2),
        Dialect::Ollama => Some(3),
        Dialect::LlamaCpp => Some(4),
        Dialect::Tgi => Some(5),
        Dialect::Sglang => Some(6),
        _ => None,
    }
}

/// The body read in place, the cap at `MAX_TOKENS[own]` first when there
/// is one; `None` when the reference must decide.
fn scan_for(body: &[u8], own: Option<usize>) -> Option<RequestInfo> {
    let mut s = Scanner::new(body);
    if s.peek()? != b'{' {
        return None;
    }
    let mut info = RequestInfo::default();
    // Each key read here at most once: `Value` keeps a duplicate's last
    // value, which is left to it.
    let mut seen = 0u32;
    // Per path of `MAX_TOKENS`, in its order: the value when a `u64`.
    let mut caps = [None; MAX_TOKENS.len()];
    s.object(|s, key| {
        let Some(i) = KEYS.iter().position(|k| *k == key) else {
            return value(s);
        };
        if seen & 1 << i != 0 {
            return None;
        }
        seen |= 1 << i;
        match key {
            b"model" => info.model = as_str(s)?.map(str::to_owned),
            b"stream" => info.stream = as_bool(s)?,
            b"stream_options" => {
                [info.include_usage, info.continuous_usage] = in_object(
                    s,
                    [&b"include_usage"[..], b"continuous_usage_stats"],
                    as_bool,
                )?;
            }
            b"max_tokens" => caps[0] = as_u64(s)?,
            b"max_completion_tokens" => caps[1] = as_u64(s)?,
            b"max_output_tokens" => caps[2] = as_u64(s)?,
            b"options" => [caps[3]] = in_object(s, [&b"num_predict"[..]], as_u64)?,
            b"n_predict" => caps[4] = as_u64(s)?,
            b"parameters" => [caps[5]] = in_object(s, [&b"max_new_tokens"[..]], as_u64)?,
            b"sampling_params" => {
                [caps[6], caps[7]] = in_object(s, [&b"max_new_tokens"[..], b"max_tokens"], as_u64)?;
            }
            b"prompt" | b"text" | b"inputs" if s.peek()? == b'"' => {
                let string = s.string()?;
                info.prompt_bytes += string.len as u64;
                info.opens_reasoning |= raw_opens_think(string.raw(), string.escaped);
            }
            _ => info.prompt_bytes += scanned_text_bytes(s)?,
        }
        Some(())
    })?;
    s.finish()?;
    info.max_tokens = own
        .and_then(|i| caps[i])
        .or_else(|| caps.into_iter().find_map(|cap| cap));
    Some(info)
}

/// The top-level keys read (`PROMPT_FIELDS` last), for `seen`'s bits.
const KEYS: [&[u8]; 28] = [
    b"model",
    b"stream",
    b"stream_options",
    b"max_tokens",
    b"max_completion_tokens",
    b"max_output_tokens",
    b"options",
    b"n_predict",
    b"parameters",
    b"sampling_params",
    b"messages",
    b"prompt",
    b"input",
    b"system",
    b"inputs",
    b"text",
    b"input_prefix",
    b"input_suffix",
    b"input_extra",
    b"query",
    b"documents",
    b"texts",
    b"text_1",
    b"text_2",
    b"queries",
    b"items",
    b"data_1",
    b"data_2",
];

/// Any value, checked as `Value` would take it (see [`number`]).
fn value(s: &mut Scanner<'_>) -> Option<()> {
    match s.peek()? {
        b'{' => s.object(|s, _| value(s)),
        b'[' => s.array(value),
        b'"' => s.string().map(drop),
        b'n' => s.null()?.then_some(()),
        b't' | b'f' => s.bool().map(drop),
        _ => number(s).map(drop),
    }
}

/// A number `Value` takes (serde_json without `arbitrary_precision` or
/// `float_roundtrip`, which would change what it takes and holds; the
/// property test compares with whatever it does). It refuses one only when it overflows an
/// `f64` (an exponent, or a long mantissa; an underflow is 0); one whose
/// magnitude is anywhere near that is left to it. Python writes small
/// floats with an exponent (`1e-05`), so those are read here.
fn number<'a>(s: &mut Scanner<'a>) -> Option<Number<'a>> {
    let n = s.number()?;
    if n.in_range() {
        return Some(n);
    }
    let v: f64 = std::str::from_utf8(n.raw).ok()?.parse().ok()?;
    (v.abs() < 1e300).then_some(n)
}

/// `Value::as_str`: the string, unless escaped (left to the reference).
fn as_str<'a>(s: &mut Scanner<'a>) -> Option<Option<&'a str>> {
    if s.peek()? != b'"' {
        return value(s).map(|()| None);
    }
    let string = s.string()?;
    if string.escaped {
        return None;
    }
    std::str::from_utf8(string.raw()).ok().map(Some)
}

/// `Value::as_bool`.
fn as_bool(s: &mut Scanner<'_>) -> Option<Option<bool>> {
    match s.peek()? {
        b't' | b'f' => s.bool().map(Some),
        _ => value(s).map(|()| None),
    }
}

/// `Value::as_u64`: digits only, within `u64` (`Value` holds a sign, a
/// fraction or an exponent as a float, `-0` too, and a `u64` overflow).
fn as_u64(s: &mut Scanner<'_>) -> Option<Option<u64>> {
    match s.peek()? {
        b'-' | b'0'..=b'9' => number(s).map(|n| n.as_u64()),
        _ => value(s).map(|()| None),
    }
}

/// The members `names` of an object, each read by `read`, as
/// `Value::get` on it gives them (nothing from what is not an object).
fn in_object<'a, T, const N: usize>(
    s: &mut Scanner<'a>,
    names: [&[u8]; N],
    read: impl Fn(&mut Scanner<'a>) -> Option<Option<T>>,
) -> Option<[Option<T>; N]> {
    let mut found = [const { None }; N];
    if s.peek()? != b'{' {
        return value(s).map(|()| found);
    }
    let mut seen = [false; N];
    s.object(|s, key| match names.iter().position(|n| *n == key) {
        Some(i) if !std::mem::replace(&mut seen[i], true) => {
            found[i] = read(s)?;
            Some(())
        }
        Some(_) => None,
        None => value(s),
    })?;
    Some(found)
}

/// [`text_bytes`] in place.
fn scanned_text_bytes(s: &mut Scanner<'_>) -> Option<u64> {
    match s.peek()? {
        b'"' => s.string().map(|string| string.len as u64),
        b'[' => {
            let mut sum = 0;
            s.array(|s| {
                sum += scanned_text_bytes(s)?;
                Some(())
            })?;
            Some(sum)
        }
        b'{' => {
            let parts = in_object(s, [&b"content"[..], b"text"], |s| {
                scanned_text_bytes(s).map(Some)
            })?;
            Some(parts.into_iter().flatten().sum())
        }
        _ => value(s).map(|()| 0),
    }
}
