//! Counting tokens honestly: the best source available per request, and
//! the gaps between token events weighted by the tokens they carried.

use std::time::Duration;

use super::Split;
use crate::measure::dialect::{Parsed, RequestInfo, Usage};

/// Where a token count came from, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CountSource {
    /// The server's `usage` totals.
    Usage,
    /// Exact counts carried by the payloads themselves: per event in a
    /// stream (logprobs entries, token ids, TGI's one token per event,
    /// cumulative usage on every event), or a whole body's token array.
    PerEvent,
    /// One token per token-bearing event: exact only when the server sends
    /// one token per event.
    Events,
    /// Text bytes / 4: a rough estimate.
    Estimated,
}

impl CountSource {
    /// The label value: `usage`, `per_event`, `events`, `estimated`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Usage => "usage",
            Self::PerEvent => "per_event",
            Self::Events => "events",
            Self::Estimated => "estimated",
        }
    }
}

/// The cumulative count each item of a stream reached (`Parsed::item`):
/// vLLM counts each of `n` choices apart, llama.cpp each of several
/// prompts. A single answer's is kept inline (16 bytes, as the one count
/// was: the timeline is held by every request's future); a list only for
/// a stream of several. Items past [`Cumulative::MAX_ITEMS`] are not
/// followed (their events count one token each).
#[derive(Clone, Debug, Default)]
enum Cumulative {
    #[default]
    None,
    One(u64),
    /// By item; `None` for one not seen yet. A `Vec` behind a thin
    /// pointer: inline, the `Vec` would make every request's timeline 8
    /// bytes larger for the few streams of several items.
    #[allow(clippy::box_collection)]
    Many(Box<Vec<Option<u64>>>),
}

impl Cumulative {
    /// `n` (a request's choices) is at most 128 on OpenAI's API.
    const MAX_ITEMS: u32 = 1024;

    /// The item's count; `None` for an item not followed.
    fn get(&self, item: u32) -> Option<Option<u64>> {
        match (self, item) {
            (_, Self::MAX_ITEMS..) => None,
            (Self::None, _) => Some(None),
            (Self::One(n), 0) => Some(Some(*n)),
            (Self::One(_), _) => Some(None),
            (Self::Many(items), i) => Some(items.get(i as usize).copied().flatten()),
        }
    }

    fn set(&mut self, item: u32, now: u64) {
        if item >= Self::MAX_ITEMS {
            return;
        }
        match self {
            Self::None | Self::One(_) if item == 0 => *self = Self::One(now),
            Self::None | Self::One(_) => {
                let first = match self {
                    Self::One(n) => Some(*n),
                    _ => None,
                };
                *self = Self::Many(Box::new(vec![first]));
                self.set(item, now);
            }
            Self::Many(items) => {
                let at = item as usize;
                if items.len() <= at {
                    items.resize(at + 1, None);
                }
                if let Some(slot) = items.get_mut(at) {
                    *slot = Some(now);
                }
            }
        }
    }
}

/// Bytes of text per estimated token (the common chars/4 rule of thumb).
const BYTES_PER_TOKEN: u64 = 4;

/// Token counts of one request. While the stream runs only the running
/// counts move; [`TokenCounts::settle`] fixes the totals and their sources.
#[derive(Clone, Debug, Default)]
pub struct TokenCounts {
    /// Generated tokens, reasoning included (settled).
    pub generated: u64,
    /// Of `generated`, reasoning tokens (settled).
    pub reasoning: u64,
    /// Where `reasoning` came from; `None` when no reasoning was reported
    /// or seen (`reasoning` is then 0).
    pub reasoning_source: Option<CountSource>,
    /// Of `reasoning`, tokens the server reported but never streamed as
    /// reasoning text (OpenAI's hidden reasoning): they took time before the
    /// first visible token, not between streamed ones.
    pub hidden_reasoning: u64,
    /// Where `generated` came from; `None` when nothing was generated or seen.
    pub generated_source: Option<CountSource>,
    /// Prompt tokens.
    pub input: Option<u64>,
    /// Where `input` came from.
    pub input_source: Option<CountSource>,
    /// Prompt tokens served from the server's cache, when reported.
    pub cached_input: Option<u64>,
    /// Token-bearing events.
    pub token_events: u64,
    /// A response body or event was read (a read response that generated
    /// nothing counts 0 tokens from `events`, rather than nothing).
    read: bool,
    /// Some event carried raw reasoning text (not a summary of it).
    raw_reasoning: bool,
    /// Tokens the token-bearing events carried (one each unless exact);
    /// with no such event, those a whole body listed one by one (logprobs
    /// entries, token ids).
    event_tokens: u64,
    reasoning_event_tokens: u64,
    first_event_tokens: u64,
    /// Every token-bearing event had an exact count; with no such event,
    /// a whole body listed its tokens.
    all_exact: bool,
    /// The cumulative counts the token-bearing events reached, per item.
    cumulative: Cumulative,
    /// Tokens listed on events that carried none of their text, for the
    /// next token-bearing event ([`TokenCounts::step_held`]); those no
    /// event took by the end are counted in the total, in no gap.
    held: u32,
    text_bytes: u64,
    reasoning_bytes: u64,
}

// === impl TokenCounts ===

impl TokenCounts {
    /// The exact token count of an event, when the stream tells it: its own
    /// `tokens`, or the growth of its item's cumulative usage count since
    /// the item's last token-bearing event. Call for every event, then
    /// [`TokenCounts::step_cumulative`].
    pub(crate) fn exact_for_event(&mut self, parsed: &Parsed<'_>) -> Option<u32> {
        self.read = true;
        let from_usage = || {
            let now = Self::cumulative_count(parsed)?;
            let before = self.cumulative.get(parsed.item)?.unwrap_or(0);
            Some(u32::try_from(now.saturating_sub(before)).unwrap_or(u32::MAX))
        };
        parsed.tokens.or_else(from_usage)
    }

    /// Moves the event's item to its cumulative count when the event bore
    /// tokens (`bearing`): tokens counted by an event that carried none of
    /// their text (vLLM's empty chunk while a character or a stop string is
    /// held back) are the next token-bearing event's, which carries it
    /// (they were lost before 2026-12-07). A count that went down starts
    /// again from there.
    pub(crate) fn step_cumulative(&mut self, parsed: &Parsed<'_>, bearing: bool) {
        let Some(now) = Self::cumulative_count(parsed) else {
            return;
        };
        if let Some(before) = self.cumulative.get(parsed.item) {
            if bearing || before.is_some_and(|b| now < b) {
                self.cumulative.set(parsed.item, now);
            }
        }
    }

    /// The exact count of an event that bore tokens (`bearing`), with the
    /// tokens held for it: those listed on events that carried none of
    /// their text ([`Parsed::own_tokens`]), which are held instead.
    pub(crate) fn step_held(
        &mut self,
        parsed: &Parsed<'_>,
        exact: Option<u32>,
        bearing: bool,
    ) -> Option<u32> {
        if !bearing {
            if let Some(n) = parsed.tokens.filter(|_| !parsed.answer_by_count) {
                self.held = self.held.saturating_add(n);
            }
            return exact;
        }
        match exact {
            Some(n) if parsed.tokens.is_some() => {
                Some(n.saturating_add(std::mem::take(&mut self.held)))
            }
            // A count's growth has them already (its base did not move).
            Some(n) => {
                self.held = 0;
                Some(n)
            }
            None => None,
        }
    }

    fn cumulative_count(parsed: &Parsed<'_>) -> Option<u64> {
        parsed
            .usage
            .and_then(|u| u.output)
            .filter(|_| parsed.cumulative)
    }

    /// Counts a token-bearing event carrying `exact` tokens, if known, and
    /// `split`'s text (`summary`: its reasoning is a summary);
    /// `reasoning`: its tokens are reasoning.
    pub(crate) fn count_event(
        &mut self,
        split: &Split,
        summary: bool,
        exact: Option<u32>,
        reasoning: bool,
    ) {
        if self.token_events == 0 {
            self.all_exact = true;
        }
        self.all_exact &= exact.is_some();
        let n = u64::from(exact.unwrap_or(1));
        if self.token_events == 0 {
            self.first_event_tokens = n;
        }
        self.token_events += 1;
        self.event_tokens += n;
        if reasoning {
            self.reasoning_event_tokens += n;
        }
        self.count_text(split, summary);
    }

    /// Everything counted so far was reasoning: whitespace read as answer
    /// before a `<think>` opened (the timeline's `Inline::Blank`), and any
    /// token before it that carried no text.
    pub(crate) fn reclaim_as_reasoning(&mut self) {
        self.reasoning_event_tokens = self.event_tokens;
        self.reasoning_bytes = self.text_bytes;
        self.raw_reasoning |= self.text_bytes > 0;
    }

    /// Counts the text of a whole non-streamed body.
    pub(crate) fn count_body(&mut self, split: &Split, summary: bool, tokens: Option<u32>) {
        self.read = true;
        if let Some(n) = tokens {
            self.event_tokens += u64::from(n);
            self.all_exact = true;
        }
        self.count_text(split, summary);
    }

    fn count_text(&mut self, split: &Split, summary: bool) {
        self.text_bytes += u64::from(split.reasoning + split.output + split.tool);
        self.reasoning_bytes += u64::from(split.reasoning);
        self.raw_reasoning |= split.reasoning > 0 && !summary;
    }

    /// Fixes the totals from the best source available.
    pub fn settle(&mut self, usage: &Usage, request: &RequestInfo) {
        // Generated, though no event showed their text (a stop string
        // held back, then cut); exactly, when no event bore any.
        let held = std::mem::take(&mut self.held);
        if held > 0 && self.token_events == 0 {
            self.all_exact = true;
        }
        self.event_tokens += u64::from(held);
        (self.generated, self.generated_source) = self.generated_total(usage);
        (self.reasoning, self.reasoning_source) = self.reasoning_total(usage);
        // Reasoning the server counted but no event carried as text.
        self.hidden_reasoning = match usage.reasoning {
            Some(r) if !self.raw_reasoning => r.min(self.generated),
            _ => 0,
        };
        (self.input, self.input_source) = match usage.input {
            Some(n) => (Some(n), Some(CountSource::Usage)),
            None if request.prompt_bytes > 0 => (
                Some(request.prompt_bytes.div_ceil(BYTES_PER_TOKEN)),
                Some(CountSource::Estimated),
            ),
            None => (None, None),
        };
        self.cached_input = usage.cached_input;
    }

    fn generated_total(&self, usage: &Usage) -> (u64, Option<CountSource>) {
        match usage.output {
            Some(n) => (n, Some(CountSource::Usage)),
            // Exact per event, or a whole body's listed tokens.
            None if self.all_exact => (self.event_tokens, Some(CountSource::PerEvent)),
            None if self.token_events > 0 => (self.event_tokens, Some(CountSource::Events)),
            None if self.text_bytes > 0 => (
                self.text_bytes.div_ceil(BYTES_PER_TOKEN),
                Some(CountSource::Estimated),
            ),
            // Read, and nothing was generated: zero token-bearing events.
            None if self.read => (0, Some(CountSource::Events)),
            None => (0, None),
        }
    }

    /// Reasoning tokens: the server's, else the reasoning-only events'
    /// share of the total (exact only when the total came from the events
    /// themselves), else, for a whole body, the reasoning text's share of
    /// the total, else the reasoning text's estimate.
    fn reasoning_total(&self, usage: &Usage) -> (u64, Option<CountSource>) {
        // Of the generated tokens: a usage whose reasoning is more than its
        // total (a server's bug) does not make records whose kinds add up
        // to more than was generated.
        if let Some(n) = usage.reasoning {
            return (n.min(self.generated), Some(CountSource::Usage));
        }
        if self.reasoning_bytes == 0 {
            return (0, None);
        }
        match self.generated_source {
            Some(CountSource::Estimated) | None => (
                self.reasoning_bytes.div_ceil(BYTES_PER_TOKEN),
                Some(CountSource::Estimated),
            ),
            Some(source @ (CountSource::PerEvent | CountSource::Events))
                if self.token_events > 0 =>
            {
                (self.reasoning_event_tokens, Some(source))
            }
            Some(CountSource::Usage) if self.token_events > 0 && self.event_tokens > 0 => (
                self.share(self.reasoning_event_tokens, self.event_tokens),
                Some(CountSource::Estimated),
            ),
            // A whole body, no events: the reasoning text's share of the
            // text, of the exact total.
            Some(_) => (
                self.share(self.reasoning_bytes, self.text_bytes.max(1)),
                Some(CountSource::Estimated),
            ),
        }
    }

    /// `part` / `whole` of the generated total, rounded.
    fn share(&self, part: u64, whole: u64) -> u64 {
        (part as f64 / whole as f64 * self.generated as f64).round() as u64
    }

    /// Tokens the stream carried: generated, less hidden reasoning. TPOT and
    /// the per-token ITL are computed over these.
    pub fn streamed(&self) -> u64 {
        self.generated.saturating_sub(self.hidden_reasoning)
    }

    /// How the tokens after the first event are spread over the gaps.
    pub(crate) fn after_first_event(&self) -> Weights {
        if self.all_exact && self.token_events > 0 {
            return Weights::Exact;
        }
        match self.generated_source {
            Some(CountSource::Usage) if self.token_events >= 2 => {
                // Assume the events shared the streamed total evenly, the
                // first included; hidden reasoning is in no gap.
                let streamed = self.streamed();
                let first = streamed / self.token_events;
                Weights::Spread {
                    total: streamed.saturating_sub(first.max(1)),
                }
            }
            _ => Weights::One,
        }
    }

    /// Tokens carried by the first token-bearing event: its exact count,
    /// or its share of a usage total spread over the events
    /// ([`Weights::Spread`]), so that with the gaps' shares they add up to
    /// the tokens streamed.
    pub(crate) fn first_event_tokens(&self) -> u64 {
        match self.after_first_event() {
            Weights::Spread { total } => self.streamed().saturating_sub(total),
            _ => self.first_event_tokens,
        }
    }
}

/// How many tokens each gap stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Weights {
    /// Each event's exact count.
    Exact,
    /// `total` tokens spread evenly over the gaps (usage total, per-event split unknown).
    Spread {
        /// Tokens after the first event.
        total: u64,
    },
    /// One token per event.
    One,
}

/// At most this many gaps are kept per request (8 bytes each); later gaps
/// are counted in [`Gaps::dropped`] and not observed.
pub(crate) const MAX_GAPS: usize = 16 * 1024;

/// Gaps between consecutive token-bearing events, in arrival order.
#[derive(Clone, Debug, Default)]
pub struct Gaps {
    gaps: Vec<Gap>,
    /// Gaps beyond [`MAX_GAPS`], not kept.
    pub dropped: u64,
}

#[derive(Clone, Copy, Debug)]
struct Gap {
    micros: u32,
    /// Exact tokens of the later event; 0 when unknown.
    tokens: u32,
}

// === impl Gaps ===

impl Gaps {
    /// Records a gap before an event carrying `tokens` (if known).
    pub fn push(&mut self, gap: Duration, tokens: Option<u32>) {
        if self.gaps.len() >= MAX_GAPS {
            self.dropped += 1;
            return;
        }
        if self.gaps.capacity() == 0 {
            // Room for a short stream's gaps at once (128 bytes), instead of
            // growing through 4 and 8; a stream without tokens allocates none.
            self.gaps.reserve_exact(16);
        }
        self.gaps.push(Gap {
            micros: u32::try_from(gap.as_micros()).unwrap_or(u32::MAX),
            tokens: tokens.unwrap_or(0),
        });
    }

    /// Number of gaps kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.gaps.len()
    }

    /// Inter-event latencies, in order.
    pub fn inter_event(&self) -> impl Iterator<Item = Duration> + '_ {
        self.gaps
            .iter()
            .map(|g| Duration::from_micros(u64::from(g.micros)))
    }

    /// The tokens of each event after the first, as `weights` give them
    /// (0 for an event whose share of a spread total is none).
    pub(crate) fn tokens(&self, weights: Weights) -> impl Iterator<Item = u64> + '_ {
        self.weighed(weights).map(|(_, tokens)| tokens)
    }

    /// Each gap with the tokens of the event after it.
    fn weighed(&self, weights: Weights) -> impl Iterator<Item = (&Gap, u64)> + '_ {
        let n = self.gaps.len() as u64;
        // A total spread over every gap: the kept gaps' share of it (the
        // tokens of the events past the kept gaps are in none of them).
        let weights = match weights {
            Weights::Spread { total } if self.dropped > 0 => {
                let kept = u128::from(total) * u128::from(n) / u128::from(n + self.dropped);
                Weights::Spread {
                    total: u64::try_from(kept).unwrap_or(total),
                }
            }
            weights => weights,
        };
        self.gaps.iter().enumerate().map(move |(i, gap)| {
            let tokens = match weights {
                Weights::Exact => u64::from(gap.tokens),
                Weights::One => 1,
                Weights::Spread { total } => {
                    // In u128: a server's total may be any u64.
                    let (i, total, n) = (i as u128, u128::from(total), u128::from(n));
                    let share = (i + 1) * total / n - i * total / n;
                    u64::try_from(share).unwrap_or(u64::MAX)
                }
            };
            (gap, tokens)
        })
    }

    /// Inter-token latencies as `(gap / tokens, tokens)` pairs. A gap
    /// whose share of a usage total is none (fewer tokens than events: a
    /// gateway that cuts the text finer than tokens) is the next token's
    /// time too, which it took to come: the latencies add up to the time
    /// from the first event to the last, as TPOT's does.
    pub(crate) fn per_token(&self, weights: Weights) -> impl Iterator<Item = (Duration, u64)> + '_ {
        let mut carried = Duration::ZERO;
        self.weighed(weights).filter_map(move |(gap, tokens)| {
            let gap = carried + Duration::from_micros(u64::from(gap.micros));
            carried = Duration::ZERO;
            // One token an event is the usual case: no division.
            let value = match tokens {
                0 => {
                    carried = gap;
                    return None;
                }
                1 => gap,
                many => gap / u32::try_from(many).unwrap_or(u32::MAX),
            };
            Some((value, tokens))
        })
    }
}
