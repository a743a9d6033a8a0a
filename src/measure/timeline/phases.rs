//! The phases of a request as seen from the proxy: what lets a user say
//! "lower TTFT came from less queueing, not a faster kernel".

use std::time::Duration;

use super::Timeline;

/// One phase of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Opening a new upstream connection (0 on a pooled one).
    UpstreamConnect,
    /// `t0` → request body fully sent upstream.
    RequestUpload,
    /// `t0` → upstream response head.
    TimeToResponseHeaders,
    /// Response head → first token: queueing, prefill and the first decode
    /// step, as seen over the wire.
    HeadersToFirstToken,
    /// First token → first non-reasoning token.
    Reasoning,
    /// First token → last token.
    Decode,
    /// Last token → end of the stream.
    Tail,
    /// Total time the client did not take bytes as fast as they came.
    DeliveryStall,
}

impl Phase {
    /// Every phase, in order.
    pub const ALL: [Phase; 8] = [
        Self::UpstreamConnect,
        Self::RequestUpload,
        Self::TimeToResponseHeaders,
        Self::HeadersToFirstToken,
        Self::Reasoning,
        Self::Decode,
        Self::Tail,
        Self::DeliveryStall,
    ];

    /// The `phase` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UpstreamConnect => "upstream_connect",
            Self::RequestUpload => "request_upload",
            Self::TimeToResponseHeaders => "time_to_response_headers",
            Self::HeadersToFirstToken => "headers_to_first_token",
            Self::Reasoning => "reasoning",
            Self::Decode => "decode",
            Self::Tail => "tail",
            Self::DeliveryStall => "delivery_stall",
        }
    }
}

/// The duration of each phase that was observed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phases([Option<Duration>; 8]);

impl Phases {
    /// The phases of a timeline. A phase whose two ends were not both seen
    /// is absent, never zero.
    pub fn of(t: &Timeline) -> Self {
        let span = |from: Option<_>, to: Option<_>| match (from, to) {
            (Some(from), Some(to)) => {
                Some(tokio::time::Instant::saturating_duration_since(&to, from))
            }
            _ => None,
        };
        let start = Some(t.start);
        Self([
            t.connect,
            span(start, t.request_sent),
            span(start, t.response_head),
            span(t.response_head, t.first_token),
            span(t.first_token, t.first_output),
            span(t.first_token, t.last_token),
            span(t.last_token, t.end),
            // Measured while an upstream's answer was handed to the client:
            // none came (tokenclock's own `502`/`504`, a client gone before
            // the head), none was measured, which is not a stall of 0.
            t.response_head.and(t.end).map(|_| t.delivery_stall),
        ])
    }

    /// The duration of `phase`, if observed.
    pub fn get(&self, phase: Phase) -> Option<Duration> {
        self.0[phase as usize]
    }

    /// Every observed phase with its duration.
    pub fn iter(&self) -> impl Iterator<Item = (Phase, Duration)> + '_ {
        Phase::ALL
            .into_iter()
            .filter_map(|p| self.get(p).map(|d| (p, d)))
    }
}
