//! Serde helpers shared by the dialects: text lengths read without keeping the text, array counts, per-choice sums.

use std::{borrow::Cow, fmt, io, marker::PhantomData, time::Duration};

use serde::de::{
    value::{MapAccessDeserializer, SeqAccessDeserializer},
    Deserialize, Deserializer, Error, IgnoredAny, MapAccess, SeqAccess, Visitor,
};

use super::{lazy::scan_struct, Name, ParseError, Parsed, Think};

/// Reads one JSON payload; any failure is [`ParseError::Json`].
pub(super) fn json<'a, T: Deserialize<'a>>(data: &'a [u8]) -> Result<T, ParseError> {
    serde_json::from_slice(data).map_err(|_| ParseError::Json)
}

/// Whether `data` is the OpenAI-style end sentinel `[DONE]`.
pub(super) fn is_done(data: &[u8]) -> bool {
    data.trim_ascii() == b"[DONE]"
}

/// An event's type: its JSON `type` when present, else the SSE `event:` name.
pub(super) fn event_type<'s>(json_type: Option<&'s str>, sse_name: &'s [u8]) -> &'s str {
    match json_type {
        Some(kind) => kind,
        None => std::str::from_utf8(sse_name).unwrap_or_default(),
    }
}

/// The event that only ends the stream.
pub(super) fn done() -> Parsed<'static> {
    Parsed {
        end: true,
        ..Parsed::default()
    }
}

/// Milliseconds as servers report them (often fractional); negative or
/// non-finite values are dropped.
pub(super) fn ms(v: Option<f64>) -> Option<Duration> {
    v.and_then(|ms| Duration::try_from_secs_f64(ms / 1e3).ok())
}

/// Nanoseconds (Ollama's durations).
pub(super) fn ns(v: Option<u64>) -> Option<Duration> {
    v.map(Duration::from_nanos)
}

pub(super) fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Deserializes an optional [`Name`] as [`cow`] reads a string.
pub(super) fn name<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Name<'de>>, D::Error> {
    cow(d).map(|text| text.map(Name::from))
}

/// Deserializes an optional string, borrowing it from the payload unless it
/// holds escapes (serde's own `Cow` impl always allocates inside `Option`).
pub(super) fn cow<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_borrowed_str<E: Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Borrowed(v)))
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Some(Cow::Owned(v.to_owned())))
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

/// Byte length of a JSON string after unescaping, read without keeping the
/// text. Null and other non-string values count 0, so an unexpected shape
/// does not fail the event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct TextLen(pub(super) u32);

/// Like [`TextLen`], but an object or array (Ollama's tool arguments, an
/// Anthropic `tool_use` input) counts its compact JSON length.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct ArgLen(pub(super) u32);

impl<'de> Deserialize<'de> for TextLen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LenVisitor::read(d, false, false).map(|a| Self(a.len))
    }
}

impl<'de> Deserialize<'de> for ArgLen {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LenVisitor::read(d, true, false).map(|a| Self(a.len))
    }
}

impl<'de> Deserialize<'de> for Answer {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        LenVisitor::read(d, false, true)
    }
}

/// `json`: whether objects and arrays count their serialized length;
/// `tags`: whether a string is searched for reasoning tags (an answer's).
struct LenVisitor {
    json: bool,
    tags: bool,
}

impl LenVisitor {
    /// Any value's length, read with these settings.
    fn read<'de, D: Deserializer<'de>>(d: D, json: bool, tags: bool) -> Result<Answer, D::Error> {
        d.deserialize_any(Self { json, tags })
    }
}

impl<'de> Visitor<'de> for LenVisitor {
    type Value = Answer;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: Error>(self, v: &str) -> Result<Answer, E> {
        Ok(Answer {
            len: len32(v.len()),
            think: match self.tags {
                true => Think::find(v.as_bytes(), false),
                false => Think::NONE,
            },
        })
    }
    fn visit_unit<E: Error>(self) -> Result<Answer, E> {
        Ok(Answer::default())
    }
    fn visit_bool<E: Error>(self, _: bool) -> Result<Answer, E> {
        Ok(Answer::default())
    }
    fn visit_i64<E: Error>(self, _: i64) -> Result<Answer, E> {
        Ok(Answer::default())
    }
    fn visit_u64<E: Error>(self, _: u64) -> Result<Answer, E> {
        Ok(Answer::default())
    }
    fn visit_f64<E: Error>(self, _: f64) -> Result<Answer, E> {
        Ok(Answer::default())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Answer, A::Error> {
        let d = SeqAccessDeserializer::new(seq);
        match self.json {
            true => serde_json::Value::deserialize(d).map(|v| Answer {
                len: json_len(&v),
                think: Think::NONE,
            }),
            false => IgnoredAny::deserialize(d).map(|_| Answer::default()),
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Answer, A::Error> {
        let d = MapAccessDeserializer::new(map);
        match self.json {
            true => serde_json::Value::deserialize(d).map(|v| Answer {
                len: json_len(&v),
                think: Think::NONE,
            }),
            false => IgnoredAny::deserialize(d).map(|_| Answer::default()),
        }
    }
}

/// Compact serialized length of a JSON value (null counts 0).
fn json_len(v: &serde_json::Value) -> u32 {
    struct Counter(usize);
    impl io::Write for Counter {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    if v.is_null() {
        return 0;
    }
    let mut c = Counter(0);
    match serde_json::to_writer(&mut c, v) {
        Ok(()) => len32(c.0),
        Err(_) => 0,
    }
}

/// The answer's text: its unescaped length, as [`TextLen`], and where it
/// marks reasoning inline ([`Think`]). Only answer fields are read so.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Answer {
    pub(super) len: u32,
    pub(super) think: Think,
}

/// A chat message's `content`: a string, the answer (its reasoning tags
/// read as [`Answer`]'s), or Mistral's array of typed chunks (Magistral's
/// reasoning, and its answer once a chunk of it was an array): a
/// `{"type":"text","text":…}` chunk is answer, a
/// `{"type":"thinking","thinking":[chunks]}` one reasoning; the others
/// (references, images) carry no text. Any other value counts 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Content {
    pub(super) answer: Answer,
    /// Reasoning text (bytes) in `thinking` chunks.
    pub(super) reasoning: u32,
}

/// One of Mistral's content chunks, an object: `type` need not be read,
/// the text's key says its kind. Any other element carries no text.
#[derive(Default)]
pub(super) struct Chunk(pub(super) ChunkFields);

#[derive(serde::Deserialize, Default)]
pub(super) struct ChunkFields {
    #[serde(default)]
    text: TextLen,
    #[serde(default)]
    thinking: Thinking,
}

scan_struct!(ChunkFields {
    text: "text",
    thinking: "thinking"
});

impl<'de> Deserialize<'de> for Chunk {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Chunk;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a content chunk")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Chunk, A::Error> {
                ChunkFields::deserialize(MapAccessDeserializer::new(map)).map(Chunk)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Chunk, A::Error> {
                IgnoredAny::deserialize(SeqAccessDeserializer::new(seq)).map(|_| Chunk::default())
            }
            fn visit_str<E: Error>(self, _: &str) -> Result<Chunk, E> {
                Ok(Chunk::default())
            }
            fn visit_unit<E: Error>(self) -> Result<Chunk, E> {
                Ok(Chunk::default())
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<Chunk, E> {
                Ok(Chunk::default())
            }
            fn visit_i64<E: Error>(self, _: i64) -> Result<Chunk, E> {
                Ok(Chunk::default())
            }
            fn visit_u64<E: Error>(self, _: u64) -> Result<Chunk, E> {
                Ok(Chunk::default())
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<Chunk, E> {
                Ok(Chunk::default())
            }
        }
        d.deserialize_any(V)
    }
}

impl Tally for Chunk {
    fn tally(self) -> Counts {
        Counts {
            output: self.0.text.0,
            reasoning: self.0.thinking.0,
            ..Counts::default()
        }
    }
}

/// A `thinking` chunk's text (bytes): its own chunks' text, or a string's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Thinking(pub(super) u32);

impl From<Summed<Chunk>> for Thinking {
    fn from(chunks: Summed<Chunk>) -> Self {
        Self(chunks.0.output.saturating_add(chunks.0.reasoning))
    }
}

impl From<Summed<Chunk>> for Content {
    fn from(chunks: Summed<Chunk>) -> Self {
        Self {
            answer: Answer {
                len: chunks.0.output,
                think: Think::NONE,
            },
            reasoning: chunks.0.reasoning,
        }
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ChunksOr(LenVisitor {
            json: false,
            tags: true,
        }))
        .map(|either| match either {
            Either::Chunks(chunks) => chunks.into(),
            Either::Text(answer) => Content {
                answer,
                reasoning: 0,
            },
        })
    }
}

impl<'de> Deserialize<'de> for Thinking {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ChunksOr(LenVisitor {
            json: false,
            tags: false,
        }))
        .map(|either| match either {
            Either::Chunks(chunks) => chunks.into(),
            Either::Text(text) => Thinking(text.len),
        })
    }
}

enum Either {
    Chunks(Summed<Chunk>),
    Text(Answer),
}

/// An array read as Mistral's chunks; any other value as `LenVisitor` reads it.
struct ChunksOr(LenVisitor);

impl<'de> Visitor<'de> for ChunksOr {
    type Value = Either;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string or an array of content chunks")
    }
    fn visit_str<E: Error>(self, v: &str) -> Result<Either, E> {
        self.0.visit_str(v).map(Either::Text)
    }
    fn visit_unit<E: Error>(self) -> Result<Either, E> {
        self.0.visit_unit().map(Either::Text)
    }
    fn visit_bool<E: Error>(self, v: bool) -> Result<Either, E> {
        self.0.visit_bool(v).map(Either::Text)
    }
    fn visit_i64<E: Error>(self, v: i64) -> Result<Either, E> {
        self.0.visit_i64(v).map(Either::Text)
    }
    fn visit_u64<E: Error>(self, v: u64) -> Result<Either, E> {
        self.0.visit_u64(v).map(Either::Text)
    }
    fn visit_f64<E: Error>(self, v: f64) -> Result<Either, E> {
        self.0.visit_f64(v).map(Either::Text)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Either, A::Error> {
        Summed::deserialize(SeqAccessDeserializer::new(seq)).map(Either::Chunks)
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Either, A::Error> {
        self.0.visit_map(map).map(Either::Text)
    }
}

/// Number of elements of a JSON array (logprobs hold one per token).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Count(pub(super) u32);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Count, A::Error> {
                let mut n = 0u32;
                while seq.next_element::<IgnoredAny>()?.is_some() {
                    n = n.saturating_add(1);
                }
                Ok(Count(n))
            }
        }
        d.deserialize_seq(V)
    }
}

/// Generated text of each kind (bytes) in one choice, block or item, and its
/// exact token count when the format gives one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Counts {
    pub(super) reasoning: u32,
    pub(super) output: u32,
    pub(super) tool: u32,
    /// A reasoning tag in the answer's text (`output`).
    pub(super) think: Think,
    pub(super) tokens: Option<u32>,
    /// The tokens are known by their count, not their text, and are all
    /// answer (see `Parsed::answer_by_count`).
    pub(super) by_count: bool,
    /// Elements summed (choices in a chunk).
    pub(super) items: u32,
    /// The first element's `index` (a choice's), 0 when it has none.
    pub(super) index: u32,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.reasoning = self.reasoning.saturating_add(o.reasoning);
        // The elements' texts read one after the other (a worded one
        // without tags ends a blank run too).
        self.think = self.think.then(self.output, o.think, o.output);
        self.output = self.output.saturating_add(o.output);
        self.tool = self.tool.saturating_add(o.tool);
        self.tokens = plus(self.tokens, o.tokens);
        self.by_count |= o.by_count;
        if self.items == 0 {
            self.index = o.index;
        }
        self.items = self.items.saturating_add(1);
    }

    /// An event carrying these counts and nothing else.
    pub(super) fn parsed<'a>(self) -> Parsed<'a> {
        Parsed {
            reasoning_bytes: self.reasoning,
            output_bytes: self.output,
            tool_bytes: self.tool,
            think: self.think,
            tokens: self.tokens,
            answer_by_count: self.by_count,
            ..Parsed::default()
        }
    }
}

/// An element's `index` as [`Counts::index`] holds it: 0 when absent, and
/// one past `u32` read as the last (no server numbers so many).
pub(super) fn index(index: Option<u64>) -> u32 {
    index.map_or(0, |i| u32::try_from(i).unwrap_or(u32::MAX))
}

/// A choice's `index`, read leniently: a count when it is one (past `u32`,
/// the last), else 0, whatever its value (`-1`, `"0"`, `0.0`, `null`, an
/// object): it only tells whose a cumulative count is, so a value no
/// server sends must not make the chunk unreadable (its text, finish and
/// usage).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Index(pub(super) u32);

impl<'de> Deserialize<'de> for Index {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Index;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any value")
            }
            fn visit_u64<E: Error>(self, v: u64) -> Result<Index, E> {
                Ok(Index(index(Some(v))))
            }
            fn visit_i64<E: Error>(self, v: i64) -> Result<Index, E> {
                Ok(Index(u64::try_from(v).map_or(0, |v| index(Some(v)))))
            }
            fn visit_f64<E: Error>(self, _: f64) -> Result<Index, E> {
                Ok(Index(0))
            }
            fn visit_bool<E: Error>(self, _: bool) -> Result<Index, E> {
                Ok(Index(0))
            }
            fn visit_str<E: Error>(self, _: &str) -> Result<Index, E> {
                Ok(Index(0))
            }
            fn visit_unit<E: Error>(self) -> Result<Index, E> {
                Ok(Index(0))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Index, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Index(0))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Index, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Index(0))
            }
        }
        d.deserialize_any(V)
    }
}

/// Two counts summed; `None` only when neither is known.
fn plus(a: Option<u32>, b: Option<u32>) -> Option<u32> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    }
}

/// A JSON element that contributes generated text to an event.
pub(super) trait Tally {
    /// What this element generated.
    fn tally(self) -> Counts;
}

/// The summed [`Counts`] of the elements of a JSON array (null: zero),
/// folded as they are read so the array is never collected.
pub(super) struct Summed<T>(pub(super) Counts, PhantomData<T>);

impl<T> Default for Summed<T> {
    fn default() -> Self {
        Self(Counts::default(), PhantomData)
    }
}

impl<T: Tally> Summed<T> {
    /// Adds one element.
    pub(super) fn push(&mut self, el: T) {
        self.0.add(el.tally());
    }
}

impl<'de, T: Deserialize<'de> + Tally> Deserialize<'de> for Summed<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        fold(d, Summed::push)
    }
}

/// An array element that may say why generation stopped (an OpenAI
/// choice's `finish_reason`, a Responses `function_call` item).
pub(super) trait Finishing<'a>: Tally {
    /// Takes the element's finish reason, before it is tallied.
    fn finish(&mut self) -> Option<Cow<'a, str>>;
}

/// Like [`Summed`], and the last finish reason an element gave (borrowed
/// from the payload), so a choice's reason is kept without keeping the choice.
pub(super) struct SummedFinish<'a, T>(
    pub(super) Counts,
    pub(super) Option<Cow<'a, str>>,
    PhantomData<T>,
);

impl<T> Default for SummedFinish<'_, T> {
    fn default() -> Self {
        Self(Counts::default(), None, PhantomData)
    }
}

impl<'a, T: Finishing<'a>> SummedFinish<'a, T> {
    /// Adds one element, keeping its finish reason if it gives one.
    pub(super) fn push(&mut self, mut el: T) {
        if let Some(finish) = el.finish() {
            self.1 = Some(finish);
        }
        self.0.add(el.tally());
    }
}

impl<'de: 'a, 'a, T: Deserialize<'de> + Finishing<'a>> Deserialize<'de> for SummedFinish<'a, T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        fold(d, SummedFinish::push)
    }
}

/// Folds the elements of a JSON array (null: none) into `S` as they are
/// read, so the array is never collected.
fn fold<'de, D, S, T, F>(d: D, step: F) -> Result<S, D::Error>
where
    D: Deserializer<'de>,
    S: Default,
    T: Deserialize<'de>,
    F: FnMut(&mut S, T),
{
    struct V<S, T, F>(F, PhantomData<fn() -> (S, T)>);
    impl<'de, S: Default, T: Deserialize<'de>, F: FnMut(&mut S, T)> Visitor<'de> for V<S, T, F> {
        type Value = S;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an array or null")
        }
        fn visit_unit<E: Error>(self) -> Result<S, E> {
            Ok(S::default())
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<S, A::Error> {
            let mut acc = S::default();
            while let Some(el) = seq.next_element::<T>()? {
                (self.0)(&mut acc, el);
            }
            Ok(acc)
        }
    }
    d.deserialize_any(V(step, PhantomData))
}

/// One tool call, OpenAI (`arguments` a string fragment) or Ollama
/// (`arguments` an object): its name and arguments count as tool text.
#[derive(serde::Deserialize)]
pub(super) struct ToolCall {
    #[serde(default)]
    function: Option<Function>,
}

#[derive(serde::Deserialize)]
pub(super) struct Function {
    #[serde(default)]
    name: TextLen,
    #[serde(default)]
    arguments: ArgLen,
}

impl Function {
    /// Its text: name and arguments (bytes).
    pub(super) fn len(self) -> u32 {
        self.name.0.saturating_add(self.arguments.0)
    }
}

scan_struct!(ToolCall {
    function: "function"
});
scan_struct!(Function {
    name: "name",
    arguments: "arguments"
});

impl Tally for ToolCall {
    fn tally(self) -> Counts {
        let tool = self.function.map_or(0, Function::len);
        Counts {
            tool,
            ..Counts::default()
        }
    }
}

/// A whole body of one answer, or of an array of them (a batch, several
/// prompts, `n` > 1, TGI's `POST /`), each read by `whole` and summed
/// ([`summed_bodies`]).
pub(super) fn one_or_summed<'a, T: Deserialize<'a>>(
    data: &'a [u8],
    whole: impl Fn(T) -> Parsed<'a>,
) -> Result<Parsed<'a>, ParseError> {
    if data.trim_ascii_start().first() != Some(&b'[') {
        return json::<T>(data).map(whole);
    }
    let items: Vec<T> = json(data)?;
    Ok(summed_bodies(items.into_iter().map(whole)))
}

/// A whole body that is an array of answers (a batch, or TGI's `POST /`
/// wrapping its one answer in an array): their text and usage summed, the
/// first id and finish reason, an error if any is one; it ends the body.
pub(super) fn summed_bodies<'a>(items: impl IntoIterator<Item = Parsed<'a>>) -> Parsed<'a> {
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
    };
    let mut whole = done();
    let mut usage: Option<super::Usage> = None;
    for one in items {
        if let Some(u) = one.usage {
            let sum = usage.get_or_insert_with(super::Usage::default);
            sum.input = add(sum.input, u.input);
            sum.cached_input = add(sum.cached_input, u.cached_input);
            sum.output = add(sum.output, u.output);
            sum.reasoning = add(sum.reasoning, u.reasoning);
        }
        whole.reasoning_bytes = whole.reasoning_bytes.saturating_add(one.reasoning_bytes);
        whole.think = whole
            .think
            .then(whole.output_bytes, one.think, one.output_bytes);
        whole.output_bytes = whole.output_bytes.saturating_add(one.output_bytes);
        whole.tokens = plus(whole.tokens, one.tokens);
        whole.tool_bytes = whole.tool_bytes.saturating_add(one.tool_bytes);
        whole.error |= one.error;
        whole.server = whole.server.or(one.server);
        whole.model = whole.model.or(one.model);
        whole.response_id = whole.response_id.or(one.response_id);
        whole.finish = whole.finish.or(one.finish);
    }
    whole.usage = usage;
    whole
}
