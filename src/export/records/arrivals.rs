//! When a request's tokens arrived, in a form whose size does not grow
//! with the stream: token-bearing events counted in [`BINS`] equal bins
//! from `t0` to the end of the response. A 16k-token stream and a 3-token
//! one both take 64 small numbers in the record; `report --request-id`
//! draws them as a sparkline.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::ms;
use crate::measure::timeline::Timeline;

/// Bins from `t0` to the end of the response.
pub const BINS: usize = 64;

/// Token-bearing events per bin (the record's `token_arrivals`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Arrivals {
    /// Width of each bin (ms): E2E / 64. Bin `i` holds the events that
    /// arrived in `[i · bin_ms, (i + 1) · bin_ms)` after `t0`; an event at
    /// the very end falls in the last bin.
    pub bin_ms: f64,
    /// Token-bearing events per bin, [`BINS`] entries. Their sum is the
    /// events whose arrival is known: all of them, unless the stream had
    /// more gaps than the per-request buffer keeps (`itl_dropped` > 0).
    pub events: Vec<u32>,
}

impl Arrivals {
    /// The arrivals of a finished timeline; `None` without a token-bearing
    /// event or an end. Each event's offset is the first token's plus the
    /// gaps kept before it (each gap exact to the microsecond).
    pub fn of(t: &Timeline) -> Option<Self> {
        let first = t.ttft()?;
        let span = t.e2e()?.max(first);
        let bin = |offset: Duration| match span.as_nanos() {
            0 => BINS - 1,
            span => {
                let i = offset.as_nanos().saturating_mul(BINS as u128) / span;
                usize::try_from(i).unwrap_or(BINS).min(BINS - 1)
            }
        };
        let mut events = vec![0u32; BINS];
        let mut at = first;
        events[bin(at)] += 1;
        for gap in t.gaps.inter_event() {
            at += gap;
            let count = &mut events[bin(at)];
            *count = count.saturating_add(1);
        }
        Some(Self {
            bin_ms: ms(span) / BINS as f64,
            events,
        })
    }

    /// Events placed in the bins.
    pub fn total(&self) -> u64 {
        self.events.iter().map(|&n| u64::from(n)).sum()
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::measure::{
        dialect::{Dialect, Parsed},
        timeline::Outcome,
    };

    fn timeline(tokens_at_ms: &[u64], end_ms: u64) -> Timeline {
        let t0 = Instant::now();
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        let token = Parsed {
            output_bytes: 3,
            ..Parsed::default()
        };
        for &at in tokens_at_ms {
            t.record(&token, t0 + Duration::from_millis(at));
        }
        t.finish(Outcome::Ok, t0 + Duration::from_millis(end_ms));
        t
    }

    #[test]
    fn events_land_in_the_bin_of_their_offset_from_t0() {
        // 640 ms: bins of 10 ms. Tokens at 100, 105, 200, 639 and at the
        // very end (640 ms, which belongs to the last bin).
        let a = Arrivals::of(&timeline(&[100, 105, 200, 639, 640], 640)).expect("arrivals");
        assert_eq!(a.bin_ms, 10.0);
        assert_eq!(a.events.len(), BINS);
        let nonzero: Vec<(usize, u32)> = a
            .events
            .iter()
            .enumerate()
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (i, n))
            .collect();
        assert_eq!(nonzero, [(10, 2), (20, 1), (63, 2)]);
        assert_eq!(a.total(), 5);
    }

    #[test]
    fn a_long_stream_stays_64_bins() {
        // 16 Ki events 1 ms apart: every one placed, the record still small.
        let at: Vec<u64> = (0..16 * 1024).collect();
        let a = Arrivals::of(&timeline(&at, 16 * 1024)).expect("arrivals");
        assert_eq!(a.events.len(), BINS);
        assert_eq!(a.total(), 16 * 1024);
        assert!(a.events.iter().all(|&n| n == 256), "{:?}", a.events);
        let json = serde_json::to_string(&a).expect("json");
        assert!(json.len() < 400, "{} bytes: {json}", json.len());
    }

    #[test]
    fn no_token_no_arrivals() {
        assert_eq!(Arrivals::of(&timeline(&[], 50)), None);
    }

    #[test]
    fn a_zero_length_request_puts_its_token_in_the_last_bin() {
        let a = Arrivals::of(&timeline(&[0], 0)).expect("arrivals");
        assert_eq!((a.bin_ms, a.events[BINS - 1], a.total()), (0.0, 1, 1));
    }
}
