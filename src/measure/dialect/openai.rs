//! The chunk envelope the OpenAI-style dialects share: choices, usage, vLLM `metrics`, llama.cpp `timings`, `[DONE]`.

mod prefix;
mod template;

use std::ops::Range;

use serde::{de::IgnoredAny, Deserialize};

use self::{
    prefix::Prefix,
    template::{Notes, Template},
};
use super::{
    common::{done, is_done, json, ms, name, Finishing, SummedFinish},
    lazy::{scan_struct, Reader, Scan, Scanner, Text},
    llamacpp::Timings,
    Finish, Name, ParseError, Parsed, ServerTimings, Usage,
};

/// OpenAI usage; the aliases read the Responses API's names.
#[derive(Deserialize, Default)]
pub(super) struct OpenAiUsage {
    #[serde(default, alias = "input_tokens")]
    prompt_tokens: Option<u64>,
    #[serde(default, alias = "output_tokens")]
    completion_tokens: Option<u64>,
    #[serde(default, alias = "input_tokens_details")]
    prompt_tokens_details: Option<Details>,
    #[serde(default, alias = "output_tokens_details")]
    completion_tokens_details: Option<Details>,
    /// Tells xAI's sum from OpenAI's (see `From<OpenAiUsage> for Usage`).
    #[serde(default)]
    total_tokens: Option<u64>,
}

scan_struct!(OpenAiUsage {
    prompt_tokens: "prompt_tokens" | "input_tokens",
    completion_tokens: "completion_tokens" | "output_tokens",
    prompt_tokens_details: "prompt_tokens_details" | "input_tokens_details",
    completion_tokens_details: "completion_tokens_details" | "output_tokens_details",
    total_tokens: "total_tokens",
});

#[derive(Deserialize, Default)]
struct Details {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

scan_struct!(Details {
    cached_tokens: "cached_tokens",
    reasoning_tokens: "reasoning_tokens",
});

/// OpenAI's `completion_tokens` includes its `reasoning_tokens`, and
/// `total_tokens` is prompt + completion. xAI's (Grok) leaves reasoning out
/// of `completion_tokens` and adds it to the total: prompt + completion +
/// reasoning. A total that adds up only that way says the usage is xAI's,
/// whatever the server, and the generated tokens are then completion +
/// reasoning (read as OpenAI's, Grok's answer tokens were lost and its
/// reasoning came out larger than its output). So does reasoning larger
/// than the completion, which cannot include it, whatever the total says.
impl From<OpenAiUsage> for Usage {
    fn from(u: OpenAiUsage) -> Self {
        let reasoning = u.completion_tokens_details.and_then(|d| d.reasoning_tokens);
        let output = match (
            u.prompt_tokens,
            u.completion_tokens,
            reasoning,
            u.total_tokens,
        ) {
            (Some(prompt), Some(completion), Some(r @ 1..), Some(total))
                if Some(total)
                    == prompt
                        .checked_add(completion)
                        .and_then(|s| s.checked_add(r)) =>
            {
                Some(completion + r)
            }
            (_, Some(completion), Some(r), _) if r > completion => completion.checked_add(r),
            (_, completion, ..) => completion,
        };
        Usage {
            input: u.prompt_tokens,
            cached_input: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
            output,
            reasoning,
        }
    }
}

/// vLLM `--enable-per-request-metrics`, on the final usage chunk (ms).
#[derive(Deserialize)]
struct VllmMetrics {
    #[serde(default)]
    time_to_first_token_ms: Option<f64>,
    #[serde(default)]
    generation_time_ms: Option<f64>,
    #[serde(default)]
    queue_time_ms: Option<f64>,
}

scan_struct!(VllmMetrics {
    time_to_first_token_ms: "time_to_first_token_ms",
    generation_time_ms: "generation_time_ms",
    queue_time_ms: "queue_time_ms",
});

/// Groq's `x_groq` object: on the last chunk of a stream it holds the usage
/// (the top-level `usage` stays absent) and the server's own times, in s.
#[derive(Deserialize)]
struct XGroq {
    #[serde(default)]
    usage: Option<GroqUsage>,
}

scan_struct!(XGroq { usage: "usage" });

/// Groq's `x_groq.usage` and Cerebras' `time_info`: the server's own
/// times, in seconds (Groq's also holds the token counts).
#[derive(Deserialize)]
struct GroqUsage {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
    #[serde(default)]
    queue_time: Option<f64>,
    #[serde(default)]
    prompt_time: Option<f64>,
    #[serde(default)]
    completion_time: Option<f64>,
}

scan_struct!(GroqUsage {
    prompt_tokens: "prompt_tokens",
    completion_tokens: "completion_tokens",
    queue_time: "queue_time",
    prompt_time: "prompt_time",
    completion_time: "completion_time",
});

impl GroqUsage {
    fn usage(&self) -> Usage {
        Usage {
            input: self.prompt_tokens,
            output: self.completion_tokens,
            ..Usage::default()
        }
    }

    fn server(&self) -> ServerTimings {
        let s = |v: Option<f64>| ms(v.map(|s| s * 1e3));
        ServerTimings {
            queue: s(self.queue_time),
            prefill: s(self.prompt_time),
            decode: s(self.completion_time),
            load: None,
        }
    }
}

/// One chat or completions chunk (or whole body); `C` is one choice.
#[derive(Deserialize)]
#[serde(bound(deserialize = "C: Deserialize<'de> + Finishing<'a>"))]
struct Envelope<'a, C> {
    #[serde(default)]
    choices: SummedFinish<'a, C>,
    /// The parts a stream sends once, at its end, are boxed: every chunk
    /// moves the envelope, and they would make up most of its size.
    #[serde(default)]
    usage: Option<Box<OpenAiUsage>>,
    #[serde(default)]
    metrics: Option<Box<VllmMetrics>>,
    #[serde(default)]
    timings: Option<Box<Timings>>,
    #[serde(default)]
    x_groq: Option<Box<XGroq>>,
    /// Cerebras.
    #[serde(default)]
    time_info: Option<Box<GroqUsage>>,
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    /// `chatcmpl-…`, `cmpl-…`: the same on every chunk of a stream.
    #[serde(default, borrow, deserialize_with = "name")]
    id: Option<Name<'a>>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

impl<'a, C: Scan<'a> + Finishing<'a>> Scan<'a> for Envelope<'a, C> {
    fn scan(s: &mut Scanner<'a>) -> Option<Self> {
        let mut value = Self::empty();
        let mut seen = 0;
        s.object(|s, key| value.field(&mut seen, s, key))?;
        Some(value)
    }
}

impl<'a, C: Scan<'a> + Finishing<'a>> Envelope<'a, C> {
    /// An envelope no member was read into.
    fn empty() -> Self {
        Self {
            choices: SummedFinish::default(),
            usage: None,
            metrics: None,
            timings: None,
            x_groq: None,
            time_info: None,
            model: None,
            id: None,
            error: None,
        }
    }

    /// Reads one member, its key read: `seen` has a bit per field read.
    #[inline(always)]
    fn field(&mut self, seen: &mut u64, s: &mut Scanner<'a>, key: &[u8]) -> Option<()> {
        let value = self;
        scan_struct!(@field value, seen, s, key;
            choices: "choices",
            usage: "usage",
            metrics: "metrics",
            timings: "timings",
            x_groq: "x_groq",
            time_info: "time_info",
            model: "model",
            id: "id",
            error: "error"
        )
    }
}

impl<'a, C> Envelope<'a, C> {
    /// Whether it read nothing but choices and names: none of the parts a
    /// stream sends once, no error.
    fn names_only(&self) -> bool {
        self.usage.is_none()
            && self.metrics.is_none()
            && self.timings.is_none()
            && self.x_groq.is_none()
            && self.time_info.is_none()
            && self.error.is_none()
    }

    fn parsed(self) -> Parsed<'a> {
        let counts = self.choices.0;
        // llama.cpp puts the cached prompt in `timings`, not in usage.
        let cache_n = self.timings.as_ref().and_then(|t| t.cache_n);
        let groq = self.x_groq.and_then(|x| x.usage);
        let usage = self.usage.map(|u| Usage::from(*u)).map(|u| Usage {
            cached_input: u.cached_input.or(cache_n),
            ..u
        });
        let usage = usage.or_else(|| groq.as_ref().map(GroqUsage::usage));
        let server = match (self.metrics, self.timings) {
            (Some(m), _) => Some(ServerTimings {
                queue: ms(m.queue_time_ms),
                prefill: ms(m.time_to_first_token_ms),
                decode: ms(m.generation_time_ms),
                load: None,
            }),
            (None, Some(t)) => Some(t.server()),
            (None, None) => groq
                .or(self.time_info.map(|t| *t))
                .as_ref()
                .map(GroqUsage::server),
        };
        let cumulative = usage.is_some() && counts.items > 0;
        Parsed {
            cumulative,
            // vLLM's continuous usage is its one choice's count.
            item: if cumulative { counts.index } else { 0 },
            usage,
            server,
            model: self.model,
            response_id: self.id,
            finish: Finish::new(self.choices.1),
            error: self.error.is_some(),
            ..counts.parsed()
        }
    }
}

/// Reads one streamed chunk whose choices are `C`.
pub(super) fn event<'a, C: Deserialize<'a> + Scan<'a> + Finishing<'a>>(
    reader: Reader,
    data: &'a [u8],
) -> Result<Parsed<'a>, ParseError> {
    if is_done(data) {
        return Ok(done());
    }
    reader.read::<Envelope<'a, C>>(data).map(Envelope::parsed)
}

/// Where a name (`model`, `id`) lies in a kept chunk, to be read in place
/// from the next one: two offsets, as a stream's kept bytes are few.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Span {
    start: u16,
    end: u16,
}

impl Span {
    /// Where `name`, read from `data`, lies in it: `Some(None)` for no
    /// name, `None` for one that cannot be read in place (escaped, so not
    /// borrowed from `data`, or too far into it).
    fn find(name: &Option<Name<'_>>, data: &[u8]) -> Option<Option<Range<usize>>> {
        match name {
            None => Some(None),
            Some(name) if !name.is_borrowed() => None,
            Some(name) => {
                let bytes = name.as_bytes();
                let start = (bytes.as_ptr() as usize).checked_sub(data.as_ptr() as usize)?;
                let end = start + bytes.len();
                (end <= data.len()).then_some(Some(start..end))
            }
        }
    }

    fn new(range: Option<Range<usize>>) -> Option<Option<Self>> {
        let Some(range) = range else {
            return Some(None);
        };
        Some(Some(Self {
            start: u16::try_from(range.start).ok()?,
            end: u16::try_from(range.end).ok()?,
        }))
    }

    /// The name at `span` in `data`: `Some(None)` for no name.
    fn read(span: Option<Self>, data: &[u8]) -> Option<Option<Name<'_>>> {
        Self::read_moved(span, data, 0)
    }

    /// The name at `span` in `data`, moved by `by` bytes (a wrapping
    /// difference: negative when what came before it shrank).
    fn read_moved(span: Option<Self>, data: &[u8], by: usize) -> Option<Option<Name<'_>>> {
        let Some(span) = span else {
            return Some(None);
        };
        let start = usize::from(span.start).wrapping_add(by);
        let end = usize::from(span.end).wrapping_add(by);
        Some(Some(Name::from(data.get(start..end)?)))
    }
}

/// What a stream's earlier chunks taught: the start they repeat
/// (`prefix.rs`) and the chunk they repeat but for its text (`template.rs`).
#[derive(Debug, Default)]
pub(crate) struct Learnt {
    prefix: Prefix,
    template: Option<Box<Template>>,
}

impl Learnt {
    /// Reads one chunk with what was learnt, and learns from it; `None`
    /// when the scanner is unsure (serde decides).
    fn scan<'a, C: Scan<'a> + Finishing<'a>>(&mut self, data: &'a [u8]) -> Option<Parsed<'a>> {
        if let Some(template) = &mut self.template {
            match template.read(data) {
                Some(parsed) => return Some(parsed),
                None => template.missed(),
            }
        }
        let mut notes = Notes::default();
        let envelope = self.prefix.scan::<C>(data, &mut notes)?;
        Template::learn(&mut self.template, data, &envelope, &notes);
        Some(envelope.parsed())
    }
}

/// Reads one chunk of a stream as [`event`] does, with what the stream's
/// earlier chunks taught: the same result.
pub(super) fn event_in_stream<'a, C: Deserialize<'a> + Scan<'a> + Finishing<'a>>(
    learnt: &mut Learnt,
    data: &'a [u8],
) -> Result<Parsed<'a>, ParseError> {
    if is_done(data) {
        return Ok(done());
    }
    match learnt.scan::<C>(data) {
        Some(parsed) => Ok(parsed),
        None => json::<Envelope<'a, C>>(data).map(Envelope::parsed),
    }
}

/// Reads a whole non-streamed response whose choices are `C`.
pub(super) fn body<'a, C: Deserialize<'a> + Finishing<'a>>(
    data: &'a [u8],
) -> Result<Parsed<'a>, ParseError> {
    let parsed = json::<Envelope<'a, C>>(data)?.parsed();
    Ok(Parsed {
        cumulative: false,
        end: true,
        ..parsed
    })
}
