//! The chunk a stream repeats but for its text, read without a scan.
//!
//! Token by token, an OpenAI-style server sends chunks that differ in one
//! string only, the delta's text:
//! `{"id":"chatcmpl-1",…,"choices":[{"index":0,"delta":{"content":"` then
//! the token, then `"},"logprobs":null,"finish_reason":null}]}`. Once a
//! chunk has been scanned, and the scanner noted that it counted one
//! non-empty string as text (see `scan::Text`), the bytes around that
//! string are kept. A next chunk made of the same bytes around another
//! string reads as the kept one with that string's count, for three
//! reasons:
//! - the scanner is deterministic: the bytes around the string read as
//!   they read before, and a string's value is only its count;
//! - a choice's counts are sums of the lengths of its text strings (and,
//!   for the two names of reasoning, their max), every other one zero in
//!   the kept chunk, so the count that was the string's length is the new
//!   string's length, whatever it is (zero included);
//! - a count the scanner does not take from a string it read (a tool's
//!   arguments sent as an object) marks the text as many, which is not kept.
//!
//! Only a chunk that is nothing but choices' text is kept: no usage,
//! server times, error or finish reason, and its count in exactly one of
//! reasoning, output and tool. `model` and `id` are taken from the new
//! chunk where the kept one had them (before the string, or after it by
//! as much as the string's length changed). Property tests check that a
//! stream read this way gives, event by event, what reading each event
//! alone gives.

use super::{Envelope, Finishing, Name, Scan, Scanner, Span, Text};
use crate::measure::dialect::common::{len32, Counts};

/// The most bytes kept around the text: a stream's memory stays bounded
/// whatever its chunks hold.
const MAX_BYTES: usize = 1024;

/// Chunks kept per stream at most: a stream whose chunks differ in more
/// than their text (a per-chunk nonce, logprobs) is then scanned without a
/// copy per chunk. A plain stream keeps one or two (reasoning, then output).
const MAX_LEARNT: u8 = 8;

/// Which count the text is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    Reasoning,
    Output,
    Tool,
}

/// The chunk a stream repeats, once kept. `Default` keeps none.
#[derive(Debug, Default)]
pub(crate) struct Template {
    /// The kept chunk without its text string: the bytes up to its opening
    /// quote, then those after its closing quote. Empty until kept.
    bytes: Box<[u8]>,
    /// Where the string was: `bytes[..head]` came before it.
    head: u16,
    /// The kept chunk's counts (the text's own is replaced by each read).
    counts: Counts,
    kind: Kind,
    /// Where `model`'s and `id`'s text lie in `bytes`.
    model: Option<Span>,
    id: Option<Span>,
    /// Chunks kept so far (see [`MAX_LEARNT`]).
    learnt: u8,
}

impl Template {
    /// Reads `data` when it is the kept chunk around another string.
    #[inline]
    pub(super) fn read<'a, C: Scan<'a> + Finishing<'a>>(
        &self,
        data: &'a [u8],
    ) -> Option<Envelope<'a, C>> {
        let at = usize::from(self.head);
        let (head, tail) = self.bytes.split_at_checked(at)?;
        if head.is_empty() || !data.starts_with(head) || data.get(at) != Some(&b'"') {
            return None;
        }
        let text = Scanner::new(data.get(at..)?).string()?;
        let end = at + text.json.len();
        if data.get(end..)? != tail {
            return None;
        }
        let mut counts = self.counts;
        let len = len32(text.len);
        match self.kind {
            Kind::Reasoning => counts.reasoning = len,
            Kind::Output => counts.output = len,
            Kind::Tool => counts.tool = len,
        }
        // In the new chunk, what followed the string moved by as much as
        // the string's length changed.
        let name = |span: Option<Span>| {
            let after = span.is_some_and(|s| usize::from(s.start) >= at);
            Span::read(span, data, if after { end - at } else { 0 })
        };
        let mut value = Envelope::empty();
        value.choices.0 = counts;
        value.model = name(self.model)?;
        value.id = name(self.id)?;
        Some(value)
    }

    /// Keeps `data`, read whole as `value` counting `text`, when it is a
    /// chunk that can be kept (see the module).
    pub(super) fn learn<'a, C>(&mut self, data: &'a [u8], value: &Envelope<'a, C>, text: Text) {
        if self.learnt >= MAX_LEARNT {
            return;
        }
        if let Some(kept) = self.keep(data, value, text) {
            *self = kept;
        }
    }

    fn keep<'a, C>(&self, data: &'a [u8], value: &Envelope<'a, C>, text: Text) -> Option<Self> {
        let Text::One { json, len } = text else {
            return None;
        };
        let kept = data.len().checked_sub(json.len())?;
        let finish = value.choices.1.is_some();
        if !value.names_only() || finish || kept > MAX_BYTES || data.get(json.start) != Some(&b'"')
        {
            return None;
        }
        let counts = value.choices.0;
        let kind = match (counts.reasoning, counts.output, counts.tool) {
            (r, 0, 0) if r == len => Kind::Reasoning,
            (0, o, 0) if o == len => Kind::Output,
            (0, 0, t) if t == len => Kind::Tool,
            _ => return None,
        };
        // Where a borrowed name lies in the bytes kept: not in the text.
        let span = |name: &Option<Name<'a>>| match Span::find(name, data)? {
            Some(r) if r.end <= json.start => Span::new(Some(r)),
            Some(r) if r.start >= json.end => {
                Span::new(Some(r.start - json.len()..r.end - json.len()))
            }
            Some(_) => None,
            None => Some(None),
        };
        let mut bytes = Vec::with_capacity(kept);
        bytes.extend_from_slice(data.get(..json.start)?);
        bytes.extend_from_slice(data.get(json.end..)?);
        Some(Self {
            bytes: bytes.into(),
            head: u16::try_from(json.start).ok()?,
            counts,
            kind,
            model: span(&value.model)?,
            id: span(&value.id)?,
            learnt: self.learnt + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, Template, MAX_LEARNT};
    use crate::measure::dialect::{Dialect, Events};

    /// A vLLM chunk whose delta is `delta`.
    fn chunk(delta: &str) -> String {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{{"index":0,"delta":{{{delta}}},"logprobs":null,"finish_reason":null}}]}}"#
        )
    }

    /// Reads `chunks` in order with one `Events`, checking each against
    /// the chunk read alone; what was kept at the end.
    fn read(dialect: Dialect, chunks: &[String]) -> Events {
        let mut events = Events::new(dialect);
        for data in chunks {
            let alone = dialect.parse_event(b"", data.as_bytes());
            assert!(alone.is_ok(), "{data}");
            assert_eq!(events.parse(b"", data.as_bytes()), alone, "{data}");
        }
        events
    }

    fn template(events: &Events) -> &Template {
        &events.learnt.template
    }

    #[test]
    fn a_chunk_around_another_text_reads_as_the_kept_one_with_its_count() {
        let texts = ["a", "bc", "", r#"\"q\u00e9\n"#, "é😀", " the"];
        let chunks: Vec<String> = texts
            .iter()
            .map(|t| chunk(&format!(r#""content":"{t}""#)))
            .collect();
        let events = read(Dialect::OpenAiChat, &chunks);
        let kept = template(&events);
        assert_eq!(kept.learnt, 1, "kept once, then read by it");
        assert_eq!(kept.kind, Kind::Output);
        let head = chunks[0].find(r#""a""#).expect("text");
        assert_eq!(usize::from(kept.head), head);
        assert_eq!(kept.bytes.len(), chunks[0].len() - 3);
    }

    #[test]
    fn reasoning_and_tool_arguments_are_kept_as_their_own_count() {
        for (delta, kind) in [
            (r#""reasoning_content":"{}""#, Kind::Reasoning),
            (r#""reasoning":"{}","content":null"#, Kind::Reasoning),
            (r#""refusal":"{}""#, Kind::Output),
            (
                r#""tool_calls":[{"index":0,"function":{"arguments":"{}"}}]"#,
                Kind::Tool,
            ),
        ] {
            let chunks: Vec<String> = ["x", "yz", ""]
                .iter()
                .map(|t| chunk(&delta.replace("{}", t)))
                .collect();
            let events = read(Dialect::OpenAiChat, &chunks);
            assert_eq!(template(&events).kind, kind, "{delta}");
            assert_eq!(template(&events).learnt, 1, "{delta}");
        }
    }

    /// vLLM 0.11 sends the same reasoning under both names, counted once
    /// (their max): two strings are not one text, so nothing is kept, and
    /// a chunk where the two differ still reads as alone.
    #[test]
    fn two_texts_in_one_chunk_are_not_kept() {
        let both =
            |a: &str, b: &str| chunk(&format!(r#""reasoning":"{a}","reasoning_content":"{b}""#));
        let events = read(
            Dialect::OpenAiChat,
            &[
                both("Okay", "Okay"),
                both("Okay", "xy"),
                both("Okay", "Okay"),
            ],
        );
        assert!(template(&events).bytes.is_empty());
    }

    #[test]
    fn a_chunk_with_more_than_text_is_not_kept() {
        let content = chunk(r#""content":"a""#);
        for other in [
            content.replace(r#""finish_reason":null"#, r#""finish_reason":"stop""#),
            content.replace("]}", r#"],"usage":{"prompt_tokens":1}}"#),
            content.replace("]}", r#"],"error":{"message":"x"}}"#),
            chunk(r#""tool_calls":[{"function":{"name":"f","arguments":{"a":1}}}]"#),
            content.replace(r#""model":"m""#, r#""model":"\u006d""#),
        ] {
            let events = read(Dialect::OpenAiChat, std::slice::from_ref(&other));
            assert!(template(&events).bytes.is_empty(), "{other}");
        }
    }

    /// llama.cpp writes `choices` first: the names after the text move by
    /// as much as the text's length changed.
    #[test]
    fn names_after_the_text_are_read_where_they_moved() {
        let chunk = |t: &str| {
            format!(
                r#"{{"choices":[{{"finish_reason":null,"index":0,"delta":{{"content":"{t}"}}}}],"created":1,"id":"chatcmpl-9","model":"llama","object":"chat.completion.chunk"}}"#
            )
        };
        let chunks = [chunk("a"), chunk("longer text"), chunk("")];
        let events = read(Dialect::OpenAiChat, &chunks);
        assert_eq!(template(&events).learnt, 1);
        let mut events = events;
        let parsed = events.parse(b"", chunks[1].as_bytes()).expect("read");
        assert_eq!(
            parsed.model.as_ref().and_then(|m| m.to_text()),
            Some("llama")
        );
        assert_eq!(
            parsed.response_id.as_ref().and_then(|m| m.to_text()),
            Some("chatcmpl-9")
        );
    }

    #[test]
    fn completions_text_is_kept() {
        let chunk = |t: &str| {
            format!(
                r#"{{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{{"index":0,"text":"{t}","logprobs":null,"finish_reason":null}}]}}"#
            )
        };
        let events = read(Dialect::OpenAiCompletions, &[chunk("a"), chunk("bcd")]);
        assert_eq!(template(&events).kind, Kind::Output);
    }

    /// A per-chunk nonce (OpenAI's `obfuscation`) changes every chunk
    /// around the text: after a few tries the stream is scanned without
    /// keeping each chunk.
    #[test]
    fn a_stream_whose_chunks_differ_around_the_text_stops_keeping() {
        let chunks: Vec<String> = (0..20)
            .map(|n| {
                chunk(r#""content":"a""#).replace("]}", &format!(r#"],"obfuscation":"{n}"}}"#))
            })
            .collect();
        let events = read(Dialect::OpenAiChat, &chunks);
        assert_eq!(template(&events).learnt, MAX_LEARNT);
    }
}
