//! Random events, scan against reference: recorded events mutated (values
//! replaced, keys added, removed, reordered, duplicated), random objects
//! over the dialects' own keys, each written with random whitespace and
//! escapes, and some truncated or corrupted. Every dialect must read each
//! one exactly as serde does, error included.

use proptest::prelude::*;

use super::{ndjson, scan::outcomes, sse};
use crate::measure::dialect::{request, Dialect, Events, RequestInfo};

/// A JSON value as written: numbers and raw string bodies kept as text, so
/// odd forms (`1E+2`, `-0`, `01`, lone surrogates) can be sent.
#[derive(Clone, Debug)]
enum J {
    Null,
    Bool(bool),
    Num(String),
    Str(String),
    /// A string body written verbatim between the quotes.
    Raw(&'static str),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl From<serde_json::Value> for J {
    fn from(v: serde_json::Value) -> Self {
        use serde_json::Value;
        match v {
            Value::Null => Self::Null,
            Value::Bool(b) => Self::Bool(b),
            Value::Number(n) => Self::Num(n.to_string()),
            Value::String(s) => Self::Str(s),
            Value::Array(a) => Self::Arr(a.into_iter().map(Self::from).collect()),
            Value::Object(o) => Self::Obj(o.into_iter().map(|(k, v)| (k, v.into())).collect()),
        }
    }
}

/// Keys the dialects read, and a few they do not.
const KEYS: &str = "\
    choices delta message content refusal reasoning reasoning_content tool_calls function name \
    arguments logprobs tokens text finish_reason usage prompt_tokens input_tokens \
    completion_tokens output_tokens prompt_tokens_details input_tokens_details \
    completion_tokens_details output_tokens_details cached_tokens reasoning_tokens metrics \
    queue_time_ms time_to_first_token_ms generation_time_ms timings prompt_ms predicted_ms \
    prompt_n cache_n x_groq time_info queue_time prompt_time completion_time model id error \
    type content_block cache_creation_input_tokens cache_read_input_tokens thinking_tokens \
    thinking partial_json stop_reason input response item output status incomplete_details \
    reason summary token special generated_text details generated_tokens input_length done \
    done_reason prompt_eval_count eval_count load_duration prompt_eval_duration eval_duration \
    stop tokens_predicted tokens_evaluated stop_type stopped_eos stopped_word stopped_limit \
    index object created meta_info output_ids length matched abort timings/prompt_n \
    timings/prompt_ms timings/predicted_n timings/predicted_ms timings/cache_n token_ids \
    request_id routed_experts input_token_details audio_tokens seconds function_call audio \
    transcript total_tokens";

/// Event types and values that switch a dialect's reading (and `""`).
const WORDS: &str = "\
    message_start content_block_start content_block_delta message_delta message_stop error \
    tool_use server_tool_use response.output_text.delta response.refusal.delta \
    response.reasoning_text.delta response.output_item.added \
    response.reasoning_summary_text.delta response.function_call_arguments.delta \
    response.custom_tool_call_input.delta response.completed response.incomplete \
    response.failed function_call custom_tool_call message reasoning stop length none \
    transcript.text.delta transcript.text.done transcript.text.segment transcription.chunk \
    completed <think> </think> <think>\n a</think>b <think>x</think>y <</think> \
    </ think> /think> <th ink> k> < \n<thi a</thi nk>b";

/// Numbers in every form, some that serde refuses or reads only as floats.
const NUMBERS: &str = "\
    0 -0 7 -1 1.5 0.25 1e3 1E+2 2e-3 -0.0 1e400 -1e400 18446744073709551615 \
    18446744073709551616 9007199254740993 01 1. .5 - +1 1e 123456789012345678901234567890.5 \
    0.1e1";

/// String bodies with escapes as sent, some invalid.
#[rustfmt::skip]
const RAW: &[&str] = &[
    r"\ud83d\ude00", r"\ud800", r"\udc00", r"\ud800\u0041", r"\u00E9\u20ac", r"\/\b\f",
    r"\x", r"\u12", "\u{1}", "\t", r"\", r"\u0020\n", r"\u000A", r" \u000b", r"\f\t",
];

/// One of the space-separated words of `list`, or `""`.
fn words(list: &'static str) -> impl Strategy<Value = &'static str> {
    let mut words: Vec<&str> = list.split_whitespace().collect();
    words.push("");
    prop::sample::select(words)
}

fn text() -> impl Strategy<Value = String> {
    let chars = prop_oneof![
        any::<char>(),
        prop::sample::select(vec![
            '"', '\\', '/', '\n', '\0', 'é', '€', '😀', '\u{7f}', 'a'
        ]),
    ];
    // Whitespace alone (blank, [`Think::blank`]).
    let space = prop::sample::select(vec![' ', '\n', '\t', '\r', '\u{c}', '\u{b}']);
    prop_oneof![
        prop::collection::vec(chars, 0..12).prop_map(|c| c.into_iter().collect()),
        prop::collection::vec(space, 0..4).prop_map(|c| c.into_iter().collect()),
        words(WORDS).prop_map(str::to_owned),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![4 => words(KEYS).prop_map(str::to_owned), 1 => text()]
}

fn leaf() -> impl Strategy<Value = J> {
    prop_oneof![
        Just(J::Null),
        any::<bool>().prop_map(J::Bool),
        words(NUMBERS).prop_map(|n| J::Num(n.to_owned())),
        any::<u32>().prop_map(|n| J::Num(n.to_string())),
        (-1e6f64..1e6).prop_map(|f| J::Num(f.to_string())),
        text().prop_map(J::Str),
        prop::sample::select(RAW).prop_map(J::Raw),
    ]
}

fn value() -> impl Strategy<Value = J> {
    leaf().prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Arr),
            prop::collection::vec((key(), inner), 0..5).prop_map(J::Obj),
        ]
    })
}

/// One change at the `at`-th node (preorder) of an event.
#[derive(Clone, Debug)]
enum Change {
    Replace(J),
    Insert(String, J),
    Remove,
    Reverse,
    Duplicate,
    /// Replaces a leaf (`true`: a string leaf, where the dialects find
    /// text, ids and types).
    Leaf(J, bool),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        1 => value().prop_map(Change::Replace),
        1 => (key(), value()).prop_map(|(k, v)| Change::Insert(k, v)),
        1 => Just(Change::Remove),
        1 => Just(Change::Reverse),
        1 => Just(Change::Duplicate),
        3 => text().prop_map(|t| Change::Leaf(J::Str(t), true)),
        3 => leaf().prop_map(|v| Change::Leaf(v, false)),
    ]
}

/// The nodes of `j` (`objects`: its objects only) in preorder.
fn count(j: &J, objects: bool) -> usize {
    let own = usize::from(!objects || matches!(j, J::Obj(_)));
    own + match j {
        J::Arr(items) => items.iter().map(|v| count(v, objects)).sum(),
        J::Obj(fields) => fields.iter().map(|(_, v)| count(v, objects)).sum(),
        _ => 0,
    }
}

/// The `n`-th node in preorder, counting down `n`.
fn nth<'j>(j: &'j mut J, n: &mut usize) -> Option<&'j mut J> {
    if *n == 0 {
        return Some(j);
    }
    *n -= 1;
    match j {
        J::Arr(items) => items.iter_mut().find_map(|v| nth(v, n)),
        J::Obj(fields) => fields.iter_mut().find_map(|(_, v)| nth(v, n)),
        _ => None,
    }
}

/// The fields of the `n`-th object in preorder, counting down `n`.
fn nth_object<'j>(j: &'j mut J, n: &mut usize) -> Option<&'j mut Vec<(String, J)>> {
    match j {
        J::Obj(fields) => match n.checked_sub(1) {
            None => Some(fields),
            Some(rest) => {
                *n = rest;
                fields.iter_mut().find_map(|(_, v)| nth_object(v, n))
            }
        },
        J::Arr(items) => items.iter_mut().find_map(|v| nth_object(v, n)),
        _ => None,
    }
}

/// Every leaf (`strings`: every string), in preorder.
fn leaves<'j>(j: &'j mut J, strings: bool, out: &mut Vec<&'j mut J>) {
    match j {
        J::Arr(items) => items.iter_mut().for_each(|v| leaves(v, strings, out)),
        J::Obj(fields) => fields.iter_mut().for_each(|(_, v)| leaves(v, strings, out)),
        J::Str(_) => out.push(j),
        _ if !strings => out.push(j),
        _ => {}
    }
}

fn apply(j: &mut J, at: usize, change: Change) {
    if let Change::Leaf(v, strings) = change {
        let mut found = Vec::new();
        leaves(j, strings, &mut found);
        if let Some(n) = at.checked_rem(found.len()) {
            *found[n] = v;
        }
        return;
    }
    if let Change::Replace(v) = change {
        if let Some(node) = at
            .checked_rem(count(j, false))
            .and_then(|mut n| nth(j, &mut n))
        {
            *node = v;
        }
        return;
    }
    let mut n = at.checked_rem(count(j, true)).unwrap_or(0);
    let Some(fields) = nth_object(j, &mut n) else {
        return;
    };
    let len = fields.len();
    match change {
        Change::Insert(k, v) => fields.insert(at % (len + 1), (k, v)),
        Change::Remove if len > 0 => drop(fields.remove(at % len)),
        Change::Reverse => fields.reverse(),
        Change::Duplicate if len > 0 => fields.push(fields[at % len].clone()),
        _ => {}
    }
}

/// Writes `j` with whitespace and escapes chosen by `style`'s bits.
struct Writer {
    out: Vec<u8>,
    style: u64,
}

impl Writer {
    /// `n` random bits (splitmix64 over `style`).
    fn bits(&mut self, n: u32) -> u64 {
        self.style = self.style.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.style;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) & ((1 << n) - 1)
    }

    fn space(&mut self) {
        let ws: &[u8] =
            [&b""[..], b"", b"", b" ", b"\n", b"\t", b"\r\n", b"  "][self.bits(3) as usize];
        self.out.extend_from_slice(ws);
    }

    /// A string with the escapes JSON needs, and in one string out of two
    /// (one key out of sixteen) more: `\u` (either case, UTF-16 pairs) or `\/`.
    fn string(&mut self, s: &str, key: bool) {
        let more = self.bits(if key { 4 } else { 1 }) == 0;
        self.out.push(b'"');
        for c in s.chars() {
            let short = match c {
                '"' => Some(b'"'),
                '\\' => Some(b'\\'),
                '\n' => Some(b'n'),
                '\t' => Some(b't'),
                '/' => Some(b'/'),
                _ => None,
            };
            let must = c == '"' || c == '\\' || c < ' ';
            if !(must || more && self.bits(2) == 0) {
                self.out
                    .extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
            } else if let Some(e) = short.filter(|_| self.bits(1) == 0) {
                self.out.extend_from_slice(&[b'\\', e]);
            } else {
                for u in c.encode_utf16(&mut [0u16; 2]) {
                    let hex = match self.bits(1) {
                        0 => format!("\\u{u:04x}"),
                        _ => format!("\\u{u:04X}"),
                    };
                    self.out.extend_from_slice(hex.as_bytes());
                }
            }
        }
        self.out.push(b'"');
    }

    fn value(&mut self, j: &J) {
        self.space();
        match j {
            J::Null => self.out.extend_from_slice(b"null"),
            J::Bool(b) => self
                .out
                .extend_from_slice(if *b { b"true" } else { b"false" }),
            J::Num(n) => self.out.extend_from_slice(n.as_bytes()),
            J::Str(s) => self.string(s, false),
            J::Raw(r) => self.out.extend_from_slice(format!("\"{r}\"").as_bytes()),
            J::Arr(items) => {
                self.out.push(b'[');
                for (i, v) in items.iter().enumerate() {
                    self.out.extend_from_slice(if i > 0 { b"," } else { b"" });
                    self.value(v);
                }
                self.space();
                self.out.push(b']');
            }
            J::Obj(fields) => {
                self.out.push(b'{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    self.out.extend_from_slice(if i > 0 { b"," } else { b"" });
                    self.space();
                    self.string(k, true);
                    self.space();
                    self.out.push(b':');
                    self.value(v);
                }
                self.space();
                self.out.push(b'}');
            }
        }
        self.space();
    }
}

/// The recorded-shape events every dialect's fixtures hold, as trees.
fn templates() -> Vec<(String, J)> {
    let sse_files: [&[u8]; 12] = [
        fixture!("sglang_generate_incremental.sse"),
        fixture!("vllm_tokens_generate.sse"),
        fixture!("sglang_generate_batch.sse"),
        fixture!("anthropic_thinking.sse"),
        fixture!("openai_responses.sse"),
        fixture!("openai_chat_tools.sse"),
        fixture!("openai_completions.sse"),
        fixture!("vllm_chat_reasoning.sse"),
        fixture!("tgi_generate_stream.sse"),
        fixture!("llamacpp_completion.sse"),
        fixture!("openai_audio_transcription.sse"),
        fixture!("vllm_audio_transcription.sse"),
    ];
    let frames = sse_files.into_iter().flat_map(sse);
    let frames = frames.chain(ndjson(fixture!("ollama_chat.ndjson")));
    let tree = |data: &str| serde_json::from_str::<serde_json::Value>(data).ok();
    frames
        .filter_map(|f| Some((f.name, tree(&f.data)?.into())))
        .collect()
}

/// How a written event is damaged: not at all, cut short, or one byte changed.
fn damage(mut bytes: Vec<u8>, how: u8, at: usize, byte: u8) -> Vec<u8> {
    let at = at % (bytes.len() + 1);
    match how % 8 {
        0 => bytes.truncate(at),
        1 if at < bytes.len() => bytes[at] = byte,
        2 => bytes.insert(at, byte),
        _ => {}
    }
    bytes
}

fn check(name: &str, data: &[u8]) -> Result<(), TestCaseError> {
    for d in Dialect::ALL {
        for name in [name.as_bytes(), b""] {
            let (scan, _, reference) = outcomes(d, name, data);
            prop_assert_eq!(scan, reference, "{:?} {}", d, String::from_utf8_lossy(data));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn mutated_recorded_events_read_as_the_reference(
        pick in any::<prop::sample::Index>(),
        changes in prop::collection::vec((any::<usize>(), change()), 0..5),
        style in any::<u64>(),
        (how, at, byte) in (any::<u8>(), any::<usize>(), any::<u8>()),
    ) {
        let templates = templates();
        let (name, mut event) = templates[pick.index(templates.len())].clone();
        for (at, change) in changes {
            apply(&mut event, at, change);
        }
        let mut w = Writer { out: Vec::new(), style };
        w.value(&event);
        check(&name, &damage(w.out, how, at, byte))?;
    }

    #[test]
    fn random_events_read_as_the_reference(
        fields in prop::collection::vec((key(), value()), 0..8),
        name in words(WORDS),
        style in any::<u64>(),
        (how, at, byte) in (any::<u8>(), any::<usize>(), any::<u8>()),
    ) {
        let mut w = Writer { out: Vec::new(), style };
        w.value(&J::Obj(fields));
        check(name, &damage(w.out, how, at, byte))?;
    }
}

/// OpenAI-style chunks: the events whose start a stream repeats.
fn chunk_templates() -> Vec<J> {
    let sse_files: [&[u8]; 5] = [
        fixture!("openai_chat_tools.sse"),
        fixture!("openai_completions.sse"),
        fixture!("vllm_tokens_generate.sse"),
        fixture!("vllm_chat_reasoning.sse"),
        fixture!("vllm_chat_continuous_usage.sse"),
    ];
    let tree = |data: &str| serde_json::from_str::<serde_json::Value>(data).ok();
    sse_files
        .into_iter()
        .flat_map(sse)
        .filter_map(|f| Some(tree(&f.data)?.into()))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// A stream of chunks that mostly start alike (the same template
    /// written the same way, changed here and there, sometimes ahead of
    /// `choices`, sometimes damaged), read in order by one `Events` per
    /// dialect: each event reads as it reads alone.
    #[test]
    fn stream_events_read_in_order_as_each_alone(
        pick in any::<prop::sample::Index>(),
        chunks in prop::collection::vec(
            (
                prop::collection::vec((any::<usize>(), change()), 0..3),
                any::<u8>(),
                any::<u64>(),
                (any::<u8>(), any::<usize>(), any::<u8>()),
            ),
            1..10,
        ),
        style in any::<u64>(),
    ) {
        let templates = chunk_templates();
        let base = &templates[pick.index(templates.len())];
        let written: Vec<Vec<u8>> = chunks
            .into_iter()
            .map(|(changes, odd, other_style, (how, at, byte))| {
                let mut event = base.clone();
                for (at, change) in changes {
                    apply(&mut event, at, change);
                }
                // Written the same way three times out of four (so the
                // start is the same), damaged one time out of eight.
                let style = if odd % 4 == 0 { other_style } else { style };
                let mut w = Writer { out: Vec::new(), style };
                w.value(&event);
                match odd % 8 {
                    1 => damage(w.out, how, at, byte),
                    _ => w.out,
                }
            })
            .collect();
        for d in Dialect::ALL {
            let mut events = Events::new(d);
            for data in &written {
                let alone = d.parse_event(b"", data);
                let read = events.parse(b"", data);
                prop_assert_eq!(read, alone, "{:?} {}", d, String::from_utf8_lossy(data));
            }
        }
    }
}

/// The keys a request body is read for, at every level, and a few others.
const REQUEST_KEYS: &str = "\
    model stream stream_options include_usage continuous_usage_stats max_tokens \
    max_completion_tokens max_output_tokens options num_predict n_predict parameters \
    max_new_tokens sampling_params messages prompt input system inputs content text role type \
    input_prefix input_suffix input_extra query documents texts text_1 text_2 queries items data_1 data_2 filename";

fn request_key() -> impl Strategy<Value = String> {
    prop_oneof![6 => words(REQUEST_KEYS).prop_map(str::to_owned), 1 => text()]
}

/// A prompt that may end in a reasoning tag, then whitespace or not
/// (what [`RequestInfo::opens_reasoning`] reads from a prompt's end).
fn tagged_prompt() -> impl Strategy<Value = J> {
    let tag = prop::sample::select(vec![
        "<think>",
        "</think>",
        "think>",
        "<think",
        "<think\\u003e",
        "\\u003cthink>",
        "\\\\<think>",
        "",
    ]);
    let space = prop::sample::select(vec!["", " ", "\n", "\t\r\n", "\\", "\\n", "\u{a0}", "x"]);
    (text(), tag, space.clone(), space).prop_map(|(t, tag, a, b)| J::Str(format!("{t}{tag}{a}{b}")))
}

fn request_value() -> impl Strategy<Value = J> {
    prop_oneof![3 => leaf(), 1 => tagged_prompt()].prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(J::Arr),
            prop::collection::vec((request_key(), inner), 0..5).prop_map(J::Obj),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// A request body read in place gives what the reference (serde_json's
    /// `Value`) gives: random bodies over the keys read (repeated ones
    /// too), in every value form, escaped, cut short or corrupted.
    #[test]
    fn random_request_bodies_read_as_the_reference(
        fields in prop::collection::vec((request_key(), request_value()), 0..8),
        style in any::<u64>(),
        (how, at, byte) in (any::<u8>(), any::<usize>(), any::<u8>()),
    ) {
        let mut w = Writer { out: Vec::new(), style };
        w.value(&J::Obj(fields));
        let body = damage(w.out, how, at, byte);
        let reference = RequestInfo::parse_reference(&body);
        if let Some(scanned) = request::scan(&body) {
            prop_assert_eq!(&scanned, &reference, "{}", String::from_utf8_lossy(&body));
        }
        prop_assert_eq!(RequestInfo::parse(Dialect::OpenAiChat, &body), reference);
    }

    /// A raw prompt's end is read back from its last byte, escapes and
    /// all: the same as the reference on random prompts ending near a tag.
    #[test]
    fn random_prompt_ends_read_as_the_reference(
        key in words("prompt text inputs"),
        prompt in tagged_prompt(),
        style in any::<u64>(),
    ) {
        let mut w = Writer { out: Vec::new(), style };
        w.value(&J::Obj(vec![(key.to_owned(), prompt)]));
        let reference = RequestInfo::parse_reference(&w.out);
        // One string under one key: nothing the scanner leaves to serde
        // but an escaped key.
        let plain_key = format!("\"{key}\"");
        let escaped = !w.out.windows(plain_key.len()).any(|k| k == plain_key.as_bytes());
        match request::scan(&w.out) {
            Some(scanned) => prop_assert_eq!(scanned, reference),
            None => prop_assert!(escaped, "{}", String::from_utf8_lossy(&w.out)),
        }
    }
}
