//! The oracle of the replay test: what a recorded response implies, read
//! from the recording with `serde_json::Value` and the README's definitions
//! (model A, finish reason B, tool calls C, reasoning source D, hidden
//! reasoning E, TPOT F, llama.cpp input H, split events I, inline
//! reasoning J). It never calls
//! tokenclock's `dialect` module or `Timeline` logic, so a bug there cannot
//! hide in the expected values.

mod dialects;
mod framing;

use std::ops::Range;

use serde_json::Value;

pub use self::framing::{Family, Framing};
use self::{dialects::Facts, framing::sse_event};

/// Usage totals; a later report of a field replaces an earlier one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<u64>,
    pub cached: Option<u64>,
    pub output: Option<u64>,
    pub reasoning: Option<u64>,
}

impl Usage {
    fn merge(&mut self, later: Usage) {
        self.input = later.input.or(self.input);
        self.cached = later.cached.or(self.cached);
        self.output = later.output.or(self.output);
        self.reasoning = later.reasoning.or(self.reasoning);
    }
}

/// The kind of a token-bearing event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Reasoning,
    Output,
    ToolCall,
}

/// One token-bearing event.
#[derive(Clone, Copy, Debug)]
pub struct TokenEvent {
    /// The written unit whose last byte completes it.
    pub unit: usize,
    /// Its index among the dispatched payloads (events), from 0.
    pub event: usize,
    pub kind: Kind,
    /// Its exact token count, when the stream says.
    pub exact: Option<u64>,
}

/// What the recording implies.
#[derive(Clone, Debug)]
pub struct Expected {
    pub family: Family,
    pub framing: Framing,
    /// Whether tokenclock reads the response (a known family, a 2xx status,
    /// a JSON, SSE or NDJSON body).
    pub read: bool,
    /// The body cut at event boundaries: one write each.
    pub units: Vec<Range<usize>>,
    /// Payloads dispatched (SSE events with data, non-blank NDJSON lines, a body).
    pub payloads: usize,
    /// Payloads that are not valid JSON (`[DONE]` excepted).
    pub parse_errors: usize,
    pub tokens: Vec<TokenEvent>,
    pub usage: Usage,
    pub generated: u64,
    pub generated_source: Option<&'static str>,
    pub reasoning: u64,
    pub reasoning_source: Option<&'static str>,
    pub hidden: u64,
    pub response_model: Option<String>,
    /// The first response id, as kept (README, records: `response_id`).
    pub response_id: Option<String>,
    /// The model value (A): the request's, else the response's reduced.
    pub model: Option<String>,
    pub finish_raw: Option<String>,
    pub finish_label: &'static str,
    pub outcome: &'static str,
}

impl Expected {
    /// Reads a recorded response to a request for `path` naming `request_model`.
    pub fn read(
        path: &str,
        content_type: &str,
        status: u16,
        request_model: Option<&str>,
        body: &[u8],
    ) -> Self {
        let framing = Framing::of(content_type);
        let family = Family::answered(path, framing, body);
        let read =
            family != Family::Unknown && (200..300).contains(&status) && framing != Framing::Other;
        let units = framing::units(body, framing);
        let mut acc = Acc::default();
        if read {
            acc.read_all(family, framing, body, &units);
        }
        acc.settle(Settled {
            family,
            framing,
            read,
            units,
            status,
            request_model: request_model.filter(|m| !m.is_empty()),
        })
    }

    /// Generated tokens that were streamed: hidden reasoning left out (E).
    pub fn streamed_tokens(&self) -> u64 {
        self.generated.saturating_sub(self.hidden)
    }

    pub fn first_output(&self) -> Option<&TokenEvent> {
        self.tokens.iter().find(|t| t.kind != Kind::Reasoning)
    }

    /// Streamed events read (token-bearing or not): the payloads that are
    /// valid JSON or `[DONE]`. A whole body is not an event.
    pub fn events(&self) -> usize {
        match self.framing.streamed() {
            true => self.payloads - self.parse_errors,
            false => 0,
        }
    }

    /// The `model` label: `unknown` when none, `other` past 128 bytes.
    pub fn model_label(&self) -> String {
        match self.model.as_deref() {
            None => "unknown".into(),
            Some(m) if m.len() > 128 => "other".into(),
            Some(m) => m.into(),
        }
    }
}

/// Where a response is in the reasoning its answer's text holds inline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Think {
    #[default]
    Before,
    Inside,
    After,
}

/// The running reading of a response.
#[derive(Default)]
struct Acc {
    payloads: usize,
    parse_errors: usize,
    tokens: Vec<TokenEvent>,
    usage: Usage,
    last_cumulative: Option<u64>,
    text_bytes: u64,
    reasoning_bytes: u64,
    /// A whole body's token array (logprobs entries, token ids).
    body_exact: Option<u64>,
    /// Where the answer's text is in its inline reasoning (J).
    think: Think,
    raw_reasoning: bool,
    response_model: Option<String>,
    response_id: Option<String>,
    finish: Option<String>,
    function_call_item: bool,
    error: bool,
}

/// What `Acc::settle` needs besides the reading.
struct Settled<'a> {
    family: Family,
    framing: Framing,
    read: bool,
    units: Vec<Range<usize>>,
    status: u16,
    request_model: Option<&'a str>,
}

impl Acc {
    fn read_all(&mut self, family: Family, framing: Framing, body: &[u8], units: &[Range<usize>]) {
        for (unit, range) in units.iter().enumerate() {
            let bytes = &body[range.clone()];
            let payload = match framing {
                Framing::Sse => sse_event(bytes),
                Framing::Ndjson => {
                    let line = bytes.strip_suffix(b"\n").unwrap_or(bytes);
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    (!line.iter().all(u8::is_ascii_whitespace))
                        .then(|| (String::new(), line.to_vec()))
                }
                _ => Some((String::new(), bytes.to_vec())),
            };
            if let Some((name, data)) = payload {
                self.payload(family, framing, unit, &name, &data);
            }
        }
    }

    fn payload(&mut self, family: Family, framing: Framing, unit: usize, name: &str, data: &[u8]) {
        self.payloads += 1;
        if data.trim_ascii() == b"[DONE]" {
            return;
        }
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            self.parse_errors += 1;
            return;
        };
        let mut f = match framing.streamed() {
            true => dialects::event(family, name, &v),
            false => dialects::body(family, &v),
        };
        let thinking = self.inline(&mut f, framing.streamed());
        self.absorb(&f);
        let growth = f
            .cumulative
            .map(|now| now.saturating_sub(self.last_cumulative.replace(now).unwrap_or(0)));
        let bearing = match f.by_growth {
            true => growth.is_some_and(|n| n > 0),
            false => {
                f.reasoning + f.output + f.tool > 0
                    || f.tool_start
                    || f.exact.is_some_and(|n| n > 0)
            }
        };
        if !framing.streamed() {
            if let Some(n) = f.exact {
                self.body_exact = Some(self.body_exact.unwrap_or(0) + n);
            }
            return;
        }
        if !bearing {
            return;
        }
        let kind = match () {
            _ if thinking => Kind::Reasoning,
            _ if f.by_growth || f.output > 0 => Kind::Output,
            _ if f.tool > 0 || f.tool_start => Kind::ToolCall,
            _ if f.reasoning > 0 => Kind::Reasoning,
            // A token with no text (TGI's empty token, a logprob): an output token.
            _ => Kind::Output,
        };
        let event = self.payloads - 1 - self.parse_errors;
        self.tokens.push(TokenEvent {
            unit,
            event,
            kind,
            exact: f.exact.or(growth),
        });
    }

    /// Inline reasoning (J): a `<think>` in the answer's text with nothing
    /// but whitespace before it, and before any answer, reasoning field or
    /// tool call, opens reasoning there (the whitespace is its), which the
    /// first `</think>` after it closes; in a whole body a `</think>` alone
    /// closes what came before it too. Moves those bytes from `output` to
    /// `reasoning`; whether the payload is inside reasoning and answers
    /// nothing.
    fn inline(&mut self, f: &mut Facts, streamed: bool) -> bool {
        const OPEN: &str = "<think>";
        const CLOSE: &str = "</think>";
        let text = f.answer.as_str();
        let was = self.think;
        // Where the first close ends, if the text has one.
        let closed = text.find(CLOSE).map(|c| c + CLOSE.len());
        let opens = text
            .trim_start_matches(|c: char| c.is_ascii_whitespace())
            .starts_with(OPEN);
        let moved = match was {
            Think::After => 0,
            Think::Before if f.reasoning > 0 || f.tool > 0 || f.tool_start => {
                self.think = Think::After;
                0
            }
            Think::Before if opens => match closed {
                Some(end) => {
                    self.think = Think::After;
                    end
                }
                None => {
                    self.think = Think::Inside;
                    text.len()
                }
            },
            Think::Before => match closed {
                Some(end) if !streamed => {
                    self.think = Think::After;
                    end
                }
                _ => {
                    if f.output > 0 {
                        self.think = Think::After;
                    }
                    0
                }
            },
            Think::Inside => match closed {
                Some(end) => {
                    self.think = Think::After;
                    end
                }
                None => text.len(),
            },
        };
        let moved = (moved as u64).min(f.output);
        f.output -= moved;
        f.reasoning += moved;
        f.raw_reasoning |= moved > 0;
        f.output == 0 && (moved > 0 || was == Think::Inside)
    }

    fn absorb(&mut self, f: &Facts) {
        self.usage.merge(f.usage);
        self.text_bytes += f.reasoning + f.output + f.tool;
        self.reasoning_bytes += f.reasoning;
        self.raw_reasoning |= f.raw_reasoning;
        if self.response_model.is_none() {
            self.response_model = f.model.clone().filter(|m| !m.is_empty());
        }
        if self.response_id.is_none() {
            self.response_id = f.response_id.as_deref().and_then(kept_id);
        }
        if f.finish.is_some() {
            self.finish.clone_from(&f.finish);
        }
        self.function_call_item |= f.function_call_item;
        self.error |= f.error;
    }

    /// Generated tokens and their source: usage > per_event > events > estimated.
    fn generated(&self, read: bool) -> (u64, Option<&'static str>) {
        let exact: Option<u64> = self.tokens.iter().map(|t| t.exact).sum();
        let events: u64 = self.tokens.iter().map(|t| t.exact.unwrap_or(1)).sum();
        match self.usage.output {
            Some(n) => (n, Some("usage")),
            None if !self.tokens.is_empty() => match exact {
                Some(n) => (n, Some("per_event")),
                None => (events, Some("events")),
            },
            // A whole body that lists its tokens: that many, exactly.
            None if self.body_exact.is_some() => (self.body_exact.unwrap_or(0), Some("per_event")),
            None if self.text_bytes > 0 => (self.text_bytes.div_ceil(4), Some("estimated")),
            // G: a read response that generated nothing counts 0 events.
            None => (0, read.then_some("events")),
        }
    }

    /// Reasoning tokens and their source (D).
    fn reasoning(
        &self,
        generated: u64,
        source: Option<&'static str>,
    ) -> (u64, Option<&'static str>) {
        let reasoning: Vec<_> = self
            .tokens
            .iter()
            .filter(|t| t.kind == Kind::Reasoning)
            .collect();
        let weight = |t: &&TokenEvent| t.exact.unwrap_or(1);
        if let Some(r) = self.usage.reasoning {
            // Reported, even as 0: the server's count.
            return (r, Some("usage"));
        }
        match source {
            // A whole body: its reasoning text's share of its text, of the total.
            Some("usage" | "per_event") if self.tokens.is_empty() && self.reasoning_bytes > 0 => {
                let share = self.reasoning_bytes as f64 / self.text_bytes as f64;
                ((share * generated as f64).round() as u64, Some("estimated"))
            }
            _ if reasoning.is_empty() && source != Some("estimated") => (0, None),
            Some("per_event") | Some("events") => (reasoning.iter().map(weight).sum(), source),
            Some("usage") => {
                let all: u64 = self.tokens.iter().map(|t| t.exact.unwrap_or(1)).sum();
                let mine: u64 = reasoning.iter().map(weight).sum();
                let share = mine as f64 / all as f64 * generated as f64;
                (share.round() as u64, Some("estimated"))
            }
            _ if self.reasoning_bytes > 0 => (self.reasoning_bytes.div_ceil(4), Some("estimated")),
            _ => (0, None),
        }
    }

    fn settle(self, s: Settled<'_>) -> Expected {
        let (generated, generated_source) = self.generated(s.read);
        let (reasoning, reasoning_source) = self.reasoning(generated, generated_source);
        let hidden = match self.usage.reasoning {
            Some(r) if r > 0 && !self.raw_reasoning => r,
            _ => 0,
        };
        let finish_raw = self.finish.as_deref().map(|f| truncate(f, 64).to_owned());
        let finish_label = finish_label(finish_raw.as_deref(), s.family, self.function_call_item);
        let outcome = match () {
            _ if s.status >= 400 => "http_error",
            _ if self.error => "upstream_error",
            _ => "ok",
        };
        let model = match s.request_model {
            Some(m) => Some(m.to_owned()),
            None => self.response_model.as_deref().map(reduce_path),
        };
        Expected {
            family: s.family,
            framing: s.framing,
            read: s.read,
            units: s.units,
            payloads: self.payloads,
            parse_errors: self.parse_errors,
            tokens: self.tokens,
            usage: self.usage,
            generated,
            generated_source,
            reasoning,
            reasoning_source,
            hidden,
            response_model: self.response_model,
            response_id: self.response_id,
            model,
            finish_raw,
            finish_label,
            outcome,
        }
    }
}

/// An id as the README says it is kept: trimmed, its first 128 bytes,
/// dropped unless they are visible ASCII.
fn kept_id(id: &str) -> Option<String> {
    let id = id.trim().as_bytes();
    let kept = &id[..id.len().min(128)];
    let visible = !kept.is_empty() && kept.iter().all(u8::is_ascii_graphic);
    visible.then(|| String::from_utf8_lossy(kept).into_owned())
}

/// At most `max` bytes, cut on a character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// B: the closed set of the `finish_reason` label.
fn finish_label(raw: Option<&str>, family: Family, function_call_item: bool) -> &'static str {
    let Some(raw) = raw else { return "none" };
    match raw {
        "completed" if family == Family::Responses && function_call_item => "tool_calls",
        "stop" | "end_turn" | "stop_sequence" | "eos" | "eos_token" | "word" | "completed" => {
            "stop"
        }
        "length" | "max_tokens" | "max_output_tokens" | "limit" => "length",
        "tool_calls" | "tool_use" | "function_call" => "tool_calls",
        "content_filter" | "refusal" => "content_filter",
        _ => "other",
    }
}

/// A: a path-like response model is reduced to its last path segment.
pub fn reduce_path(model: &str) -> String {
    let b = model.as_bytes();
    let separated = model.contains(['/', '\\']);
    let rooted = model.starts_with(['/', '\\'])
        || (b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':');
    let lower = model.to_ascii_lowercase();
    let file = lower.ends_with(".gguf") || lower.ends_with(".bin");
    if (separated && rooted) || file {
        model.rsplit(['/', '\\']).next().unwrap_or(model).to_owned()
    } else {
        model.to_owned()
    }
}
