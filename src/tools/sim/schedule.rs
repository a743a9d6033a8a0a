//! Exact schedule mode: `x-sim-schedule: ttft_ms=450,gap_ms=25,tokens=120,per_event=1,reasoning_ms=0,yield=0`
//! bypasses the queue model so timing tests know what to expect.

use std::{str::FromStr, time::Duration};

/// When each event of a scheduled response is sent, relative to arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schedule {
    /// Arrival → first token.
    pub ttft: Duration,
    /// Between events; zero sends as fast as the socket accepts.
    pub gap: Duration,
    /// Tokens in the whole response.
    pub tokens: u64,
    /// Tokens per event.
    pub per_event: u64,
    /// Events within this long after the first token are reasoning.
    pub reasoning: Duration,
    /// With no gap, yield to the connection between events (`yield=1`), so
    /// each event leaves in its own write, as from a server that writes
    /// token by token. Without it, back-to-back events pile up while the
    /// connection writes, and leave several to a write.
    pub yield_each: bool,
}

impl Default for Schedule {
    fn default() -> Self {
        Self {
            ttft: Duration::ZERO,
            gap: Duration::ZERO,
            tokens: 16,
            per_event: 1,
            reasoning: Duration::ZERO,
            yield_each: false,
        }
    }
}

/// A schedule that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "bad x-sim-schedule item {0:?} (keys: ttft_ms, gap_ms, tokens, per_event, reasoning_ms, yield)"
)]
pub struct ScheduleError(String);

impl Schedule {
    /// Events in the response.
    pub fn events(&self) -> u64 {
        self.tokens.div_ceil(self.per_event)
    }

    /// Arrival → event `i` (0-based): absolute offsets, so timer lateness
    /// does not accumulate.
    pub fn offset(&self, i: u64) -> Duration {
        self.ttft + self.gap * u32::try_from(i).unwrap_or(u32::MAX)
    }

    /// Whether event `i` carries reasoning tokens.
    pub(crate) fn is_reasoning(&self, i: u64) -> bool {
        self.offset(i) - self.ttft < self.reasoning
    }
}

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(spec: &str) -> Result<Self, ScheduleError> {
        let mut s = Schedule::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let bad = || ScheduleError(part.to_owned());
            let (key, value) = part.split_once('=').ok_or_else(bad)?;
            let n: u64 = value.trim().parse().map_err(|_| bad())?;
            match key.trim() {
                "ttft_ms" => s.ttft = Duration::from_millis(n),
                "gap_ms" => s.gap = Duration::from_millis(n),
                "tokens" if n > 0 => s.tokens = n,
                "per_event" if n > 0 => s.per_event = n,
                "reasoning_ms" => s.reasoning = Duration::from_millis(n),
                "yield" if n <= 1 => s.yield_each = n == 1,
                _ => return Err(bad()),
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Schedule;

    #[test]
    fn parses_and_places_events() {
        let s: Schedule = "ttft_ms=450,gap_ms=25,tokens=120,per_event=4,reasoning_ms=50"
            .parse()
            .expect("valid");
        assert_eq!(s.events(), 30);
        assert_eq!(s.offset(0), Duration::from_millis(450));
        assert_eq!(s.offset(2), Duration::from_millis(500));
        assert!(s.is_reasoning(1) && !s.is_reasoning(2));
        assert!(!s.yield_each);
        assert!("yield=1".parse::<Schedule>().expect("valid").yield_each);
        assert!("yield=2".parse::<Schedule>().is_err());
        assert!("tokens=0".parse::<Schedule>().is_err());
        assert!("ttft=1".parse::<Schedule>().is_err());
    }
}
