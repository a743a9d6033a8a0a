//! What is known of a request before it ends: the clocks that stop early
//! ([`Milestone`]), so sinks can observe them as they happen, and where the
//! request is now ([`Stage`]), for the gauge of requests in each stage.

use std::time::Duration;

use super::{Phase, Timeline};

/// A clock that stops before the request ends. Each is handed to the sinks
/// once, as soon as it stopped and the request's model label is settled
/// (see [`Timeline::model_settled`]); [`Timeline::delivered`] says which
/// were, so the end observes only the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Milestone {
    /// A new upstream connection was paid for (or a pooled one used): the
    /// `upstream_connect` phase.
    UpstreamConnect,
    /// The request body was fully sent upstream: `request_upload`.
    RequestUpload,
    /// The response head arrived: `time_to_response_headers`.
    ResponseHeaders,
    /// The first token-bearing event arrived: TTFT and
    /// `headers_to_first_token`.
    FirstToken,
    /// The first non-reasoning token arrived: TTFO.
    FirstOutput,
}

impl Milestone {
    /// Every milestone, in the order a request reaches them.
    pub const ALL: [Milestone; 5] = [
        Self::UpstreamConnect,
        Self::RequestUpload,
        Self::ResponseHeaders,
        Self::FirstToken,
        Self::FirstOutput,
    ];

    /// The phase this milestone ends, if it ends one.
    pub fn phase(self) -> Option<Phase> {
        match self {
            Self::UpstreamConnect => Some(Phase::UpstreamConnect),
            Self::RequestUpload => Some(Phase::RequestUpload),
            Self::ResponseHeaders => Some(Phase::TimeToResponseHeaders),
            Self::FirstToken => Some(Phase::HeadersToFirstToken),
            Self::FirstOutput => None,
        }
    }

    /// The milestone that ends `phase`, if the phase ends early.
    pub fn of_phase(phase: Phase) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.phase() == Some(phase))
    }

    /// The `t0`-relative latency this milestone stops, if it is one
    /// (TTFT, TTFO); phases come from [`Timeline::phases`].
    pub fn latency(self, t: &Timeline) -> Option<Duration> {
        match self {
            Self::FirstToken => t.ttft(),
            Self::FirstOutput => t.ttfo(),
            _ => None,
        }
    }

    fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of [`Milestone`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Milestones(u8);

impl Milestones {
    /// Whether `milestone` is in the set.
    pub fn contains(self, milestone: Milestone) -> bool {
        self.0 & milestone.bit() != 0
    }

    /// The set with `milestone` added.
    #[must_use]
    pub fn with(self, milestone: Milestone) -> Self {
        Self(self.0 | milestone.bit())
    }

    /// The milestones of `self` that are not in `other`.
    #[must_use]
    pub fn without(self, other: Self) -> Self {
        Self(self.0 & !other.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The milestones in the set, in order.
    pub fn iter(self) -> impl Iterator<Item = Milestone> {
        Milestone::ALL
            .into_iter()
            .filter(move |m| self.contains(*m))
    }
}

/// Where an in-flight request is now; it only moves forward, in this order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stage {
    /// The request body is still coming from the client.
    Upload,
    /// The request is upstream; no response head yet.
    WaitingHeaders,
    /// An event stream's head arrived; no token yet: queueing or prefill.
    WaitingFirstToken,
    /// Only reasoning tokens so far.
    Reasoning,
    /// Answer tokens are streaming; or, for a response that is not a read
    /// event stream, its body is being received.
    Streaming,
}

impl Stage {
    /// Every stage, in order.
    pub const ALL: [Stage; 5] = [
        Self::Upload,
        Self::WaitingHeaders,
        Self::WaitingFirstToken,
        Self::Reasoning,
        Self::Streaming,
    ];

    /// The `phase` label value of `tokenclock_requests_in_phase`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Upload => "upload",
            Self::WaitingHeaders => "waiting_headers",
            Self::WaitingFirstToken => "waiting_first_token",
            Self::Reasoning => "reasoning",
            Self::Streaming => "streaming",
        }
    }

    /// The stage at position `index` of [`Stage::ALL`].
    pub fn from_index(index: u8) -> Option<Self> {
        Self::ALL.get(usize::from(index)).copied()
    }

    /// Where a request whose response head arrived is, given the milestones
    /// it reached; `None` before the head (the upload decides then).
    pub fn after_head(reached: Milestones, streamed: bool) -> Option<Self> {
        if reached.contains(Milestone::FirstOutput) {
            Some(Self::Streaming)
        } else if reached.contains(Milestone::FirstToken) {
            Some(Self::Reasoning)
        } else if reached.contains(Milestone::ResponseHeaders) {
            Some(if streamed {
                Self::WaitingFirstToken
            } else {
                Self::Streaming
            })
        } else {
            None
        }
    }
}

// === impl Timeline ===

impl Timeline {
    /// The milestones this request has reached so far. Cheap: a handful of
    /// field checks, so it may run per frame.
    pub fn reached(&self) -> Milestones {
        let mut set = Milestones::default();
        for (milestone, known) in [
            (Milestone::UpstreamConnect, self.connect.is_some()),
            (Milestone::RequestUpload, self.request_sent.is_some()),
            (Milestone::ResponseHeaders, self.response_head.is_some()),
            (Milestone::FirstToken, self.first_token.is_some()),
            // Whitespace alone may yet turn out to be reasoning's.
            (
                Milestone::FirstOutput,
                self.first_output.is_some() && !self.inline.blank(),
            ),
        ] {
            if known {
                set = set.with(milestone);
            }
        }
        set
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::dialect::Dialect;

    #[test]
    fn a_timeline_reaches_milestones_as_its_instants_are_set() {
        let t0 = tokio::time::Instant::now();
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        assert!(t.reached().is_empty());
        t.response_head = Some(t0);
        t.first_token = Some(t0);
        let reached = t.reached();
        assert_eq!(
            reached.iter().collect::<Vec<_>>(),
            [Milestone::ResponseHeaders, Milestone::FirstToken]
        );
        let delivered = Milestones::default().with(Milestone::ResponseHeaders);
        assert_eq!(
            reached.without(delivered).iter().collect::<Vec<_>>(),
            [Milestone::FirstToken]
        );
    }

    #[test]
    fn each_early_phase_has_the_milestone_that_ends_it() {
        for phase in Phase::ALL {
            let early = matches!(
                phase,
                Phase::UpstreamConnect
                    | Phase::RequestUpload
                    | Phase::TimeToResponseHeaders
                    | Phase::HeadersToFirstToken
            );
            let milestone = Milestone::of_phase(phase);
            assert_eq!(milestone.is_some(), early, "{phase:?}");
            assert_eq!(milestone.and_then(Milestone::phase), early.then_some(phase));
        }
    }

    #[test]
    fn the_stage_after_the_head_follows_the_first_tokens() {
        let head = Milestones::default().with(Milestone::ResponseHeaders);
        let first = head.with(Milestone::FirstToken);
        assert_eq!(Stage::after_head(Milestones::default(), true), None);
        assert_eq!(
            Stage::after_head(head, true),
            Some(Stage::WaitingFirstToken)
        );
        assert_eq!(Stage::after_head(head, false), Some(Stage::Streaming));
        assert_eq!(Stage::after_head(first, true), Some(Stage::Reasoning));
        assert_eq!(
            Stage::after_head(first.with(Milestone::FirstOutput), true),
            Some(Stage::Streaming)
        );
        for (i, stage) in Stage::ALL.into_iter().enumerate() {
            assert_eq!(stage as usize, i);
            assert_eq!(Stage::from_index(i as u8), Some(stage));
        }
        assert_eq!(Stage::from_index(u8::MAX), None);
    }
}
