//! The start every chunk of a stream repeats, read once.
//!
//! An OpenAI-style server writes the same members ahead of `choices` in
//! every chunk of a stream: `{"id":"chatcmpl-…","object":"chat.completion.chunk",
//! "created":…,"model":"…","system_fingerprint":"…",` is about 170 of a
//! 250-byte chunk (vLLM, SGLang, OpenAI, TGI's OpenAI route). The scanner
//! is deterministic, so identical bytes read identically: once a chunk has
//! been scanned, the next one that starts with the same bytes up to its
//! `choices` key resumes the scan there, with what those bytes gave.
//!
//! What they gave must be exact for the rest to read as a whole scan
//! would: the fields read (a key sent again after `choices` is refused as
//! a duplicate, as ever) and their values. Only a start whose fields are
//! `model` and `id` (as plain strings or `null`) and members the envelope
//! ignores is kept; `model` and `id` are taken from the new chunk at the
//! same place (its bytes are the same). A start holding anything else
//! (`usage` before `choices`, an escaped model name) is not kept, and its
//! stream is scanned whole, as before. Property tests check that a stream
//! read this way gives, event by event, what reading each event alone gives.

use super::{template::Notes, Envelope, Finishing, Name, Scan, Scanner, Span};

/// The shortest start worth keeping: shorter, the copy and the compare
/// would cost about what they save.
const MIN_BYTES: usize = 24;

/// The longest start kept: a stream's memory stays bounded whatever a
/// server sends ahead of `choices`.
const MAX_BYTES: usize = 512;

/// Starts learnt per stream at most: a server whose chunks start
/// differently each time (a new `id` per chunk) is then scanned whole
/// without a copy per chunk.
const MAX_LEARNT: u8 = 4;

/// What one stream's chunks start with, once learnt. `Default` knows none.
#[derive(Debug, Default)]
pub(crate) struct Prefix {
    /// The bytes up to the `choices` key's quote; empty until learnt.
    bytes: Box<[u8]>,
    /// The envelope's fields read in them (its `seen` bits).
    seen: u64,
    /// Where `model`'s and `id`'s text lie in them, when read as strings.
    model: Option<Span>,
    id: Option<Span>,
    /// Starts learnt so far (see [`MAX_LEARNT`]).
    learnt: u8,
}

impl Prefix {
    /// Reads one chunk with what this stream's earlier chunks taught: the
    /// envelope, or `None` when the scanner is unsure (serde decides).
    /// `notes` gets what the scan found for the template.
    pub(super) fn scan<'a, C: Scan<'a> + Finishing<'a>>(
        &mut self,
        data: &'a [u8],
        notes: &mut Notes,
    ) -> Option<Envelope<'a, C>> {
        if !self.bytes.is_empty() && data.starts_with(&self.bytes) {
            if let Some(read) = self.resume(data, notes) {
                return Some(read);
            }
            *notes = Notes::default();
        }
        self.learn(data, notes)
    }

    /// Scans `data` after the start it shares with the chunk this was learnt from.
    fn resume<'a, C: Scan<'a> + Finishing<'a>>(
        &self,
        data: &'a [u8],
        notes: &mut Notes,
    ) -> Option<Envelope<'a, C>> {
        let at = self.bytes.len();
        let rest = data.get(at..)?;
        // The same bytes as in the chunk they were read from.
        let mut value = Envelope::empty();
        value.model = Span::read(self.model, data)?;
        value.id = Span::read(self.id, data)?;
        let mut seen = self.seen;
        let mut s = Scanner::resume(rest);
        s.members(|s, key| notes.field(&mut value, &mut seen, s, key, at))?;
        // The start holds no text the scan counts (only names).
        notes.text = s.text().shifted(at);
        s.finish()?;
        Some(value)
    }

    /// Scans `data` whole, and keeps its start for the next chunk when it
    /// can be kept (see the module) and fewer than [`MAX_LEARNT`] were.
    fn learn<'a, C: Scan<'a> + Finishing<'a>>(
        &mut self,
        data: &'a [u8],
        notes: &mut Notes,
    ) -> Option<Envelope<'a, C>> {
        let mut s = Scanner::new(data);
        let mut value = Envelope::empty();
        let mut seen = 0;
        let mut mark = None;
        s.object(|s, key| {
            if key == b"choices" && mark.is_none() && self.learnt < MAX_LEARNT {
                mark = Some(self.mark(data, &value, seen, s.key_at()));
            }
            notes.field(&mut value, &mut seen, s, key, 0)
        })?;
        notes.text = s.text();
        s.finish()?;
        if let Some(Some(learnt)) = mark {
            *self = learnt;
        }
        Some(value)
    }

    /// The start of `data` up to its `choices` key at `at`, with what the
    /// scan read in it (`value`, `seen`), when it can be kept.
    fn mark<'a, C>(
        &self,
        data: &'a [u8],
        value: &Envelope<'a, C>,
        seen: u64,
        at: usize,
    ) -> Option<Self> {
        if !value.names_only() || !(MIN_BYTES..=MAX_BYTES).contains(&at) {
            return None;
        }
        // Where a borrowed name lies in `data`: in the start kept.
        let span = |name: &Option<Name<'a>>| match Span::find(name, data)? {
            Some(range) if range.end > at => None,
            range => Span::new(range),
        };
        Some(Self {
            bytes: data.get(..at)?.into(),
            seen,
            model: span(&value.model)?,
            id: span(&value.id)?,
            learnt: self.learnt + 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Envelope, Name, Notes, Prefix};
    use crate::measure::dialect::{openai_chat::Choice, Dialect, Events};

    /// A vLLM chunk; `{}` is what comes before `"choices"` after the model.
    fn chunk(extra: &str, content: &str) -> String {
        format!(
            r#"{{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m"{extra},"choices":[{{"index":0,"delta":{{"content":"{content}"}},"finish_reason":null}}]}}"#
        )
    }

    fn scan<'a>(prefix: &mut Prefix, data: &'a str) -> Option<Envelope<'a, Choice<'a>>> {
        prefix.scan(data.as_bytes(), &mut Notes::default())
    }

    #[test]
    fn the_start_up_to_choices_is_kept_and_the_next_chunk_resumes_after_it() {
        let (first, second) = (chunk("", "a"), chunk("", "bc"));
        let mut prefix = Prefix::default();
        assert!(scan(&mut prefix, &first).is_some());
        let start = first.find(r#""choices""#).expect("choices");
        assert_eq!(&prefix.bytes[..], &first.as_bytes()[..start]);
        let notes = &mut Notes::default();
        assert!(prefix
            .resume::<Choice<'_>>(second.as_bytes(), notes)
            .is_some());
        let envelope = scan(&mut prefix, &second).expect("read");
        assert_eq!(envelope.model.as_ref().and_then(Name::to_text), Some("m"));
        assert_eq!(
            envelope.id.as_ref().and_then(Name::to_text),
            Some("chatcmpl-1")
        );
        assert_eq!(prefix.learnt, 1, "a hit learns nothing");
    }

    #[test]
    fn a_start_holding_more_than_model_and_id_or_an_escape_is_not_kept() {
        for extra in [
            r#","usage":{"prompt_tokens":3}"#,
            r#","metrics":{"queue_time_ms":1.5}"#,
            r#","error":{"message":"x"}"#,
            r#","id":"again""#,
        ] {
            let mut prefix = Prefix::default();
            let _ = scan(&mut prefix, &chunk(extra, "a"));
            assert!(prefix.bytes.is_empty(), "{extra}");
        }
        let escaped = chunk("", "a").replace(r#""model":"m""#, r#""model":"\u006d""#);
        let mut prefix = Prefix::default();
        assert!(scan(&mut prefix, &escaped).is_some());
        assert!(prefix.bytes.is_empty());
    }

    /// A field read as `null` ahead of `choices` is kept as read: the same
    /// field sent again after `choices` is still a duplicate, refused by
    /// the scan, and serde's reading of it (an error) is what the event
    /// gives.
    #[test]
    fn a_field_read_in_the_start_stays_read() {
        let model = chunk("", "a").replace(r#""model":"m""#, r#""model":null"#);
        let usage = chunk(r#","usage":null"#, "a");
        for (null, again) in [(&model, r#""model":"x""#), (&usage, r#""usage":null"#)] {
            let twice = null.replace("]}", &format!("],{again}}}"));
            let mut prefix = Prefix::default();
            assert!(scan(&mut prefix, null).is_some());
            assert!(!prefix.bytes.is_empty(), "{null}");
            let mut events = Events::new(Dialect::OpenAiChat);
            for data in [null, &twice, null] {
                let alone = Dialect::OpenAiChat.parse_event(b"", data.as_bytes());
                assert_eq!(events.parse(b"", data.as_bytes()), alone, "{data}");
            }
            let alone = Dialect::OpenAiChat.parse_event(b"", twice.as_bytes());
            assert!(alone.is_err(), "{twice}");
        }
    }

    #[test]
    fn a_stream_whose_chunks_start_differently_stops_learning() {
        let mut prefix = Prefix::default();
        for n in 0..10 {
            let data = chunk("", "a").replace("chatcmpl-1", &format!("chatcmpl-{n}"));
            assert!(scan(&mut prefix, &data).is_some());
        }
        assert_eq!(prefix.learnt, super::MAX_LEARNT);
    }
}
