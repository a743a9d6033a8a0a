//! The chunk a stream repeats but for its text, read without a scan.
//!
//! Token by token, an OpenAI-style server sends chunks that differ in one
//! string, the delta's text, and perhaps in members nobody reads (a send
//! time, OpenAI's `obfuscation` padding, llama.cpp's `created`):
//! `{"id":"chatcmpl-1",…,"choices":[{"index":0,"delta":{"content":"` then
//! the token, then `"},"logprobs":null,"finish_reason":null}],"obfuscation":"…"}`.
//! Once a chunk has been scanned, and the scanner noted that it counted one
//! non-empty string as text (see `scan::Text`), the chunk is kept, with
//! where that string lies and, after it, where the values of the top-level
//! members the envelope ignores lie (its holes). A next chunk made of the
//! same bytes around another string, and around any other values in the
//! holes, reads as the kept one with that string's count, for three
//! reasons:
//! - the scanner is deterministic: the same bytes read as they read
//!   before, a string's value is only its count, and a value the envelope
//!   ignores is only skipped (the hole's is skipped by the same scanner,
//!   as strictly);
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
//! chunk where the kept one had them, moved by as much as the string and
//! the holes before them changed in length. Property tests check that a
//! stream read this way gives, event by event, what reading each event
//! alone gives.

use std::ops::Range;

use super::{Envelope, Finishing, Name, Scan, Scanner, Span, Text};
use crate::measure::dialect::{
    common::{len32, Counts},
    lazy::answer_think,
    Parsed, Think,
};

/// The most bytes kept around the text: a stream's memory stays bounded
/// whatever its chunks hold.
const MAX_BYTES: usize = 1024;

/// Chunks kept per stream at most: a stream whose chunks differ in more
/// than their text and ignored members (a usage object on every chunk,
/// logprobs) is then scanned without a copy per chunk. A plain stream
/// keeps one or two (reasoning, then output).
const MAX_LEARNT: u8 = 8;

/// Top-level members whose values are holes, at most; those after them
/// are compared as bytes (so a chunk that changes them is scanned).
const MAX_HOLES: usize = 4;

/// What a scan of a chunk found for the template: the text it counted and
/// where the values of the top-level members the envelope ignores lie.
#[derive(Debug, Default)]
pub(super) struct Notes {
    pub(super) text: Text,
    ignored: [(usize, usize); MAX_HOLES],
    len: usize,
}

impl Notes {
    /// Reads one top-level member as the envelope does (see
    /// `Envelope::field`), noting where its value lies when the envelope
    /// ignores it and it comes after counted text (those before are kept
    /// as bytes, and would only take up holes); `at` bytes precede the
    /// scanner's.
    #[inline(always)]
    pub(super) fn field<'a, C: Scan<'a> + Finishing<'a>>(
        &mut self,
        value: &mut Envelope<'a, C>,
        seen: &mut u64,
        s: &mut Scanner<'a>,
        key: &[u8],
        at: usize,
    ) -> Option<()> {
        let (start, before) = (s.at(), *seen);
        value.field(seen, s, key)?;
        if *seen == before && self.len < MAX_HOLES && s.counted_any() {
            self.ignored[self.len] = (at + start, at + s.at());
            self.len += 1;
        }
        Some(())
    }
}

/// Which count the text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Reasoning,
    /// Output that is not the answer's text (a refusal).
    Output,
    /// The answer's text, whose reasoning tags are read from each string.
    Answer,
    Tool,
}

/// The chunk a stream repeats, once kept.
#[derive(Debug)]
pub(crate) struct Template {
    /// The kept chunk without its text string: the bytes up to its opening
    /// quote, then those after its closing quote. Empty once let go.
    bytes: Box<[u8]>,
    /// Where the string was: `bytes[..head]` came before it.
    head: u16,
    /// The holes, in `bytes`: the values (with the whitespace before them)
    /// of the members after the string that the envelope ignores.
    holes: [(u16, u16); MAX_HOLES],
    hole_count: u8,
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
    /// Reads `data` when it is the kept chunk around another string (and
    /// other values in the holes): the event it is, made here rather than
    /// through an envelope, since all it carries are the counts and the
    /// names (what `Envelope::parsed` makes of an envelope with nothing
    /// else).
    #[inline]
    pub(super) fn read<'a>(&self, data: &'a [u8]) -> Option<Parsed<'a>> {
        let at = usize::from(self.head);
        let (head, tail) = self.bytes.split_at_checked(at)?;
        if head.is_empty() || !data.starts_with(head) || data.get(at) != Some(&b'"') {
            return None;
        }
        let text = Scanner::new(data.get(at..)?).string()?;
        // Walk the rest: the kept bytes between the holes, each hole's
        // value skipped. `moved` is how far `data` is ahead of `bytes`
        // (as a wrapping difference) after each hole.
        let mut read = at + text.json.len();
        let mut kept = at;
        let mut moved = [0usize; MAX_HOLES + 1];
        moved[0] = read.wrapping_sub(kept);
        let holes = self.holes.get(..usize::from(self.hole_count))?;
        for (n, &(start, end)) in holes.iter().enumerate() {
            let same = tail.get(kept - at..usize::from(start) - at)?;
            if !data.get(read..)?.starts_with(same) {
                return None;
            }
            read += same.len();
            let mut s = Scanner::resume(data.get(read..)?);
            s.skip()?;
            read += s.at();
            kept = usize::from(end);
            moved[n + 1] = read.wrapping_sub(kept);
        }
        if data.get(read..)? != tail.get(kept - at..)? {
            return None;
        }
        let mut counts = self.counts;
        let len = len32(text.len);
        match self.kind {
            Kind::Reasoning => counts.reasoning = len,
            Kind::Output => counts.output = len,
            Kind::Answer => {
                counts.output = len;
                counts.think = answer_think(&text)?;
            }
            Kind::Tool => counts.tool = len,
        }
        // A name is where it was in `bytes`, moved by the string (if after
        // it) and the holes before it.
        let name = |span: Option<Span>| {
            let by = span.map_or(0, |span| {
                let start = usize::from(span.start);
                let after = holes
                    .iter()
                    .take_while(|h| usize::from(h.1) <= start)
                    .count();
                if start >= at {
                    moved[after]
                } else {
                    0
                }
            });
            Span::read_moved(span, data, by)
        };
        Some(Parsed {
            model: name(self.model)?,
            response_id: name(self.id)?,
            ..counts.parsed()
        })
    }

    /// After a chunk [`Template::read`] did not read: once no more chunks
    /// may be kept, the kept one is let go, so that a stream whose chunks
    /// stopped matching it does not pay for comparing them.
    pub(super) fn missed(&mut self) {
        if self.learnt >= MAX_LEARNT && !self.bytes.is_empty() {
            self.bytes = Box::default();
        }
    }

    /// Keeps `data`, read whole as `value` with `notes`, in `kept` when it
    /// is a chunk that can be kept (see the module). The template is boxed
    /// when first kept: a stream of another dialect, or one whose chunks
    /// cannot be kept, carries a pointer, not a template.
    pub(super) fn learn<'a, C>(
        kept: &mut Option<Box<Self>>,
        data: &'a [u8],
        value: &Envelope<'a, C>,
        notes: &Notes,
    ) {
        let learnt = kept.as_ref().map_or(0, |t| t.learnt);
        if learnt >= MAX_LEARNT {
            return;
        }
        let Some(new) = Self::keep(learnt, data, value, notes) else {
            return;
        };
        match kept {
            Some(template) => **template = new,
            None => *kept = Some(Box::new(new)),
        }
    }

    fn keep<'a, C>(
        learnt: u8,
        data: &'a [u8],
        value: &Envelope<'a, C>,
        notes: &Notes,
    ) -> Option<Self> {
        let Text::One {
            ref json,
            len,
            answer,
        } = notes.text
        else {
            return None;
        };
        let kept = data.len().checked_sub(json.len())?;
        let finish = value.choices.1.is_some();
        if !value.names_only() || finish || kept > MAX_BYTES || data.get(json.start) != Some(&b'"')
        {
            return None;
        }
        let counts = value.choices.0;
        // A chunk with a reasoning tag, or blank, is read whole (each
        // string's own tags are read from it; the kept counts have none).
        if counts.think != Think::NONE {
            return None;
        }
        let kind = match (counts.reasoning, counts.output, counts.tool) {
            (r, 0, 0) if r == len => Kind::Reasoning,
            (0, o, 0) if o == len && answer => Kind::Answer,
            (0, o, 0) if o == len => Kind::Output,
            (0, 0, t) if t == len => Kind::Tool,
            _ => return None,
        };
        // A place in `data` as a place in the bytes kept (not in the text).
        let place = |r: Range<usize>| -> Option<Range<usize>> {
            if r.end <= json.start {
                Some(r)
            } else if r.start >= json.end {
                Some(r.start - json.len()..r.end - json.len())
            } else {
                None
            }
        };
        let span = |name: &Option<Name<'a>>| match Span::find(name, data)? {
            Some(r) => Span::new(Some(place(r)?)),
            None => Some(None),
        };
        let mut holes = [(0, 0); MAX_HOLES];
        let mut hole_count = 0;
        for &(start, end) in notes.ignored.get(..notes.len)? {
            if start >= json.end {
                let r = place(start..end)?;
                holes[hole_count] = (u16::try_from(r.start).ok()?, u16::try_from(r.end).ok()?);
                hole_count += 1;
            }
        }
        let mut bytes = Vec::with_capacity(kept);
        bytes.extend_from_slice(data.get(..json.start)?);
        bytes.extend_from_slice(data.get(json.end..)?);
        Some(Self {
            bytes: bytes.into(),
            head: u16::try_from(json.start).ok()?,
            holes,
            hole_count: u8::try_from(hole_count).ok()?,
            counts,
            kind,
            model: span(&value.model)?,
            id: span(&value.id)?,
            learnt: learnt + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Kind, Template, MAX_LEARNT};
    use crate::measure::dialect::{Dialect, Events, Parsed};

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

    /// The names an event read by the template carries.
    fn assert_names(parsed: &Parsed<'_>, model: &str, id: &str) {
        assert_eq!(parsed.model.as_ref().and_then(|m| m.to_text()), Some(model));
        assert_eq!(
            parsed.response_id.as_ref().and_then(|m| m.to_text()),
            Some(id)
        );
    }

    fn template(events: &Events) -> &Template {
        events.learnt.template.as_deref().expect("a chunk was kept")
    }

    fn kept(events: &Events) -> bool {
        events.learnt.template.is_some()
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
        assert_eq!(kept.kind, Kind::Answer);
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
        assert!(!kept(&events));
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
            assert!(!kept(&events), "{other}");
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
        assert_names(&parsed, "llama", "chatcmpl-9");
    }

    #[test]
    fn completions_text_is_kept() {
        let chunk = |t: &str| {
            format!(
                r#"{{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{{"index":0,"text":"{t}","logprobs":null,"finish_reason":null}}]}}"#
            )
        };
        let events = read(Dialect::OpenAiCompletions, &[chunk("a"), chunk("bcd")]);
        assert_eq!(template(&events).kind, Kind::Answer);
    }

    /// A per-chunk nonce or send time after `choices` (OpenAI's
    /// `obfuscation`, the simulator's `sim_sent_unix_ns`) is a hole: any
    /// value there, of any length or kind, reads as the envelope reads it
    /// (ignored), and a damaged one as alone.
    #[test]
    fn members_the_envelope_ignores_after_the_text_may_change() {
        let values = [
            r#""Ab3""#,
            r#""a much longer nonce""#,
            "1796192752640420550",
            "7",
            r#"{"a":[1,2]}"#,
            "null",
            r#" "spaced""#,
            r#""bad \x escape""#,
            "[1,",
            r#""é😀""#,
        ];
        for (n, value) in values.into_iter().enumerate() {
            let with = |text: &str, v: &str| {
                chunk(&format!(r#""content":"{text}""#))
                    .replace("]}", &format!(r#"],"obfuscation":{v}}}"#))
            };
            let first = [with("a", r#""x""#), with("bc", r#""yz""#)];
            let mut events = read(Dialect::OpenAiChat, &first);
            assert_eq!(template(&events).learnt, 1, "the hole: {value}");
            let data = with(&"t".repeat(n), value);
            let alone = Dialect::OpenAiChat.parse_event(b"", data.as_bytes());
            assert_eq!(events.parse(b"", data.as_bytes()), alone, "{data}");
        }
    }

    /// llama.cpp writes `choices` first and a `created` second that moves
    /// on every second: the names after it are read where they moved, by
    /// the text and by the hole.
    #[test]
    fn names_after_a_hole_are_read_where_they_moved() {
        let chunk = |t: &str, created: &str| {
            format!(
                r#"{{"choices":[{{"finish_reason":null,"index":0,"delta":{{"content":"{t}"}}}}],"created":{created},"id":"chatcmpl-9","model":"llama","system_fingerprint":"b1-x","object":"chat.completion.chunk"}}"#
            )
        };
        let chunks = [
            chunk("a", "999"),
            chunk("longer", "1000"),
            chunk("", "99"),
            chunk("x", "1.5e3"),
        ];
        let mut events = read(Dialect::OpenAiChat, &chunks);
        assert_eq!(template(&events).learnt, 1);
        assert_eq!(
            template(&events).hole_count,
            3,
            "created, system_fingerprint, object"
        );
        for data in &chunks {
            let parsed = events.parse(b"", data.as_bytes()).expect("read");
            assert_names(&parsed, "llama", "chatcmpl-9");
        }
    }

    /// OpenAI's layout: members the envelope ignores before `choices`
    /// (`object`, `created`, `service_tier`, `system_fingerprint`) and an
    /// `obfuscation` nonce after: the first chunk kept reads the rest.
    #[test]
    fn members_before_the_text_do_not_take_up_holes() {
        let chunk = |t: &str, nonce: &str| {
            format!(
                r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt","service_tier":"default","system_fingerprint":"fp_1","choices":[{{"index":0,"delta":{{"content":"{t}"}},"logprobs":null,"finish_reason":null}}],"usage":null,"obfuscation":"{nonce}"}}"#
            )
        };
        let chunks = [
            chunk("a", "x1"),
            chunk("bc", "Qz"),
            chunk("d", "long nonce"),
        ];
        let events = read(Dialect::OpenAiChat, &chunks);
        assert_eq!(template(&events).learnt, 1);
        assert_eq!(template(&events).hole_count, 1);
    }

    /// More members to ignore than holes: those after the last hole are
    /// compared as bytes, so a chunk that changes one is scanned.
    #[test]
    fn members_past_the_last_hole_are_compared() {
        let chunk = |t: &str, last: u32| {
            chunk(&format!(r#""content":"{t}""#))
                .replace("]}", &format!(r#"],"a":1,"b":2,"c":3,"d":4,"e":{last}}}"#))
        };
        let chunks = [chunk("a", 1), chunk("b", 1), chunk("c", 22)];
        let events = read(Dialect::OpenAiChat, &chunks);
        assert_eq!(usize::from(template(&events).hole_count), super::MAX_HOLES);
        assert_eq!(template(&events).learnt, 2, "the last chunk was kept anew");
    }

    /// Chunks that differ in more than text and holes (here the choice's
    /// index) are kept a few times, then let go.
    #[test]
    fn a_stream_whose_chunks_differ_around_the_text_stops_keeping() {
        let chunks: Vec<String> = (0..20)
            .map(|n| chunk(r#""content":"a""#).replace(r#""index":0"#, &format!(r#""index":{n}"#)))
            .collect();
        let events = read(Dialect::OpenAiChat, &chunks);
        assert_eq!(template(&events).learnt, MAX_LEARNT);
        assert!(template(&events).bytes.is_empty(), "let go");
    }
}
