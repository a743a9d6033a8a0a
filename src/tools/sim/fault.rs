//! Fault injection: what `x-sim-fault` (or the `fault` setting) asks the
//! simulator to break, e.g. `status=500`, `abort=3`, `stall=200`, `malformed`.

use std::{str::FromStr, time::Duration};

/// Faults to inject into one response; several may be combined with commas.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fault {
    /// Answer at once with this status and a JSON error body (429 or 5xx).
    pub status: Option<u16>,
    /// Close the connection abruptly after this many events; a whole
    /// (non-streamed) body is cut halfway, whatever the number.
    pub abort_after: Option<u64>,
    /// Pause this long after the first token-bearing event; a whole body
    /// comes that much later.
    pub stall: Option<Duration>,
    /// Send one event of invalid JSON halfway through the stream; a whole
    /// body is sent as only its first half, which is not valid JSON.
    pub malformed: bool,
    /// Apply the other items to this share of requests only (0 to 1),
    /// drawn from the seeded generator and the request's sequence number.
    pub rate: Option<f64>,
}

/// A fault spec that does not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FaultError {
    /// Not one of `status=N`, `abort=N`, `stall=MS`, `malformed`, `rate=F`.
    #[error("unknown fault {0:?} (expected status=N, abort=N, stall=MS, malformed or rate=F)")]
    Unknown(String),
    /// The number does not parse or is out of range.
    #[error("bad number in fault {0:?}")]
    Number(String),
}

impl Fault {
    /// Whether the fault applies to a request whose seeded draw is `draw`
    /// (uniform in 0..1): always, unless a `rate` says otherwise.
    pub fn applies(&self, draw: f64) -> bool {
        self.rate.is_none_or(|rate| draw < rate)
    }
}

impl FromStr for Fault {
    type Err = FaultError;

    fn from_str(spec: &str) -> Result<Self, FaultError> {
        let mut fault = Fault::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=').unwrap_or((part, ""));
            let number = || {
                value
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| FaultError::Number(part.to_owned()))
            };
            match key.trim() {
                "status" => {
                    let status = number()?;
                    if !(400..=599).contains(&status) {
                        return Err(FaultError::Number(part.to_owned()));
                    }
                    fault.status = Some(status as u16);
                }
                "abort" => fault.abort_after = Some(number()?),
                "stall" => fault.stall = Some(Duration::from_millis(number()?)),
                "malformed" if value.is_empty() => fault.malformed = true,
                "rate" => {
                    let rate: f64 = value.trim().parse().unwrap_or(f64::NAN);
                    if !(0.0..=1.0).contains(&rate) {
                        return Err(FaultError::Number(part.to_owned()));
                    }
                    fault.rate = Some(rate);
                }
                _ => return Err(FaultError::Unknown(part.to_owned())),
            }
        }
        Ok(fault)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Fault, FaultError};

    #[test]
    fn parses_combined_faults() {
        let fault: Fault = "abort=3, stall=250,malformed".parse().expect("valid");
        assert_eq!(
            fault,
            Fault {
                status: None,
                abort_after: Some(3),
                stall: Some(Duration::from_millis(250)),
                malformed: true,
                rate: None,
            }
        );
        let some: Fault = "status=500,rate=0.25".parse().expect("valid");
        assert_eq!((some.status, some.rate), (Some(500), Some(0.25)));
        assert!("rate=1.5".parse::<Fault>().is_err());
        assert_eq!(
            "status=429".parse::<Fault>().expect("valid").status,
            Some(429)
        );
    }

    #[test]
    fn rejects_nonsense() {
        assert!(matches!(
            "explode".parse::<Fault>(),
            Err(FaultError::Unknown(_))
        ));
        assert!(matches!(
            "status=200".parse::<Fault>(),
            Err(FaultError::Number(_))
        ));
        assert!(matches!(
            "abort=x".parse::<Fault>(),
            Err(FaultError::Number(_))
        ));
    }
}
