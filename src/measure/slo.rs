//! Goodput: judging each finished request against SLOs fixed before traffic.
//!
//! A request meets an SLO when it ended `ok` and met every objective the SLO
//! sets. A missing figure is a missed objective (a non-streamed response has
//! no TTFT to meet a TTFT objective with), as in AIPerf.

use std::time::Duration;

use crate::measure::{
    dialect::Dialect,
    timeline::{Outcome, Timeline},
};

/// The objectives of one SLO; a request meets it when it ended `ok` and
/// met every objective set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Limits {
    /// Longest TTFT.
    pub ttft: Option<Duration>,
    /// Longest TTFO.
    pub ttfo: Option<Duration>,
    /// Longest TPOT.
    pub tpot: Option<Duration>,
    /// Longest E2E.
    pub e2e: Option<Duration>,
}

/// A validated SLO.
#[derive(Clone, Debug)]
pub struct Slo {
    /// The `slo` label value.
    pub name: String,
    /// Model globs it applies to; empty: every model.
    pub models: Vec<String>,
    /// Endpoints it applies to; empty: every endpoint.
    pub endpoints: Vec<Dialect>,
    /// Its objectives.
    pub limits: Limits,
}

/// The `slo` label of requests judged against their own header limits.
pub(crate) const REQUEST_SLO: &str = "request";

/// One objective of an SLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Objective {
    /// Time to first token.
    Ttft,
    /// Time to first output token.
    Ttfo,
    /// Time per output token.
    Tpot,
    /// End to end.
    E2e,
}

impl Objective {
    /// Every objective.
    pub const ALL: [Objective; 4] = [Self::Ttft, Self::Ttfo, Self::Tpot, Self::E2e];

    /// The `objective` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ttft => "ttft",
            Self::Ttfo => "ttfo",
            Self::Tpot => "tpot",
            Self::E2e => "e2e",
        }
    }

    fn limit(self, limits: &Limits) -> Option<Duration> {
        match self {
            Self::Ttft => limits.ttft,
            Self::Ttfo => limits.ttfo,
            Self::Tpot => limits.tpot,
            Self::E2e => limits.e2e,
        }
    }

    fn measured(self, t: &Timeline) -> Option<Duration> {
        match self {
            Self::Ttft => t.ttft(),
            Self::Ttfo => t.ttfo(),
            Self::Tpot => t.tpot(),
            Self::E2e => t.e2e(),
        }
    }
}

/// A request judged against one SLO.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Judgement<'a> {
    /// The SLO's name (`request` for header limits).
    pub slo: &'a str,
    /// Whether the request met it.
    pub met: bool,
    /// The objectives it missed (empty when only the outcome failed it).
    pub violated: Vec<Objective>,
}

/// Judges `t` against `limits`.
pub(crate) fn judge<'a>(slo: &'a str, limits: &Limits, t: &Timeline) -> Judgement<'a> {
    let violated: Vec<Objective> = Objective::ALL
        .into_iter()
        .filter(|o| {
            o.limit(limits)
                .is_some_and(|limit| o.measured(t).is_none_or(|m| m > limit))
        })
        .collect();
    Judgement {
        slo,
        met: t.outcome == Outcome::Ok && violated.is_empty(),
        violated,
    }
}

/// Every SLO that applies to `t`, judged: the configured ones whose model
/// globs and endpoints match, then its own header limits, if any. A
/// WebSocket session (`101`) is not a request with latencies to meet (it
/// lasts minutes and has no first token): no configured SLO judges it,
/// whatever endpoint its path is, only its handshake's own header limits.
pub(crate) fn judge_all<'a>(slos: &'a [Slo], t: &'a Timeline) -> Vec<Judgement<'a>> {
    let model = t.model.as_deref().unwrap_or_default();
    let session = t.status == Some(http::StatusCode::SWITCHING_PROTOCOLS);
    let mut out: Vec<_> = slos
        .iter()
        .filter(|_| !session)
        .filter(|s| s.endpoints.is_empty() || s.endpoints.contains(&t.dialect))
        .filter(|s| s.models.is_empty() || s.models.iter().any(|g| glob(g, model)))
        .map(|s| judge(&s.name, &s.limits, t))
        .collect();
    if let Some(limits) = &t.request_slo {
        out.push(judge(REQUEST_SLO, limits, t));
    }
    out
}

/// Shell-style matching: `*` any run, `?` one character.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use tokio::time::Instant;

    use super::*;
    use crate::measure::dialect::{Dialect, Parsed};

    fn timeline(ttft_ms: u64, tokens: u64, gap_ms: u64) -> Timeline {
        let t0 = Instant::now();
        let mut t = Timeline::new(t0, Dialect::OpenAiChat);
        let token = Parsed {
            output_bytes: 1,
            ..Parsed::default()
        };
        for i in 0..tokens {
            t.record(&token, t0 + Duration::from_millis(ttft_ms + gap_ms * i));
        }
        t.request.model = Some("llama-3-8b".into());
        let end = t0 + Duration::from_millis(ttft_ms + gap_ms * tokens);
        t.finish(Outcome::Ok, end);
        t
    }

    fn limits(ttft: u64, tpot: u64) -> Limits {
        Limits {
            ttft: Some(Duration::from_millis(ttft)),
            tpot: Some(Duration::from_millis(tpot)),
            ..Limits::default()
        }
    }

    #[test]
    fn met_only_when_ok_and_every_objective_is_met() {
        let t = timeline(400, 10, 40);
        assert!(judge("a", &limits(500, 50), &t).met);
        let slow = judge("a", &limits(300, 50), &t);
        assert!(!slow.met);
        assert_eq!(slow.violated, vec![Objective::Ttft]);
        assert_eq!(
            judge("a", &limits(300, 30), &t).violated,
            vec![Objective::Ttft, Objective::Tpot]
        );
        let mut failed = timeline(100, 10, 10);
        failed.outcome = Outcome::UpstreamError;
        let j = judge("a", &limits(500, 50), &failed);
        assert!(!j.met && j.violated.is_empty());
    }

    #[test]
    fn a_missing_figure_misses_its_objective() {
        let t = timeline(100, 1, 10); // one token: no TPOT
        assert_eq!(
            judge("a", &limits(500, 50), &t).violated,
            vec![Objective::Tpot]
        );
    }

    #[test]
    fn slos_apply_by_model_glob_and_endpoint_and_header_limits_add_one() {
        let slo = |name: &str, models: &[&str], endpoints: Vec<Dialect>| Slo {
            name: name.into(),
            models: models.iter().map(|m| m.to_string()).collect(),
            endpoints,
            limits: limits(500, 50),
        };
        let slos = vec![
            slo("all", &[], vec![]),
            slo("llama", &["llama-*"], vec![]),
            slo("qwen", &["qwen*"], vec![]),
            slo("anthropic", &[], vec![Dialect::Anthropic]),
        ];
        let mut t = timeline(400, 10, 40);
        t.request_slo = Some(limits(100, 50));
        let names: Vec<_> = judge_all(&slos, &t)
            .iter()
            .map(|j| (j.slo, j.met))
            .collect();
        assert_eq!(
            names,
            vec![("all", true), ("llama", true), ("request", false)]
        );
    }

    /// A WebSocket session lasts minutes: no configured SLO judges it (nor
    /// counts it against goodput), whatever its path's endpoint; its
    /// handshake's SLO headers do.
    #[test]
    fn a_websocket_session_is_judged_only_by_its_own_slo_headers() {
        let slo = |name: &str, endpoints: Vec<Dialect>| Slo {
            name: name.into(),
            models: vec![],
            endpoints,
            limits: limits(500, 50),
        };
        let slos = vec![
            slo("all", vec![]),
            slo("responses", vec![Dialect::OpenAiResponses]),
        ];
        let mut t = timeline(400, 10, 40);
        // A session on the Responses API's path keeps that endpoint.
        t.dialect = Dialect::OpenAiResponses;
        let names = |t: &Timeline| -> Vec<String> {
            judge_all(&slos, t)
                .iter()
                .map(|j| j.slo.to_owned())
                .collect()
        };
        assert_eq!(names(&t), ["all", "responses"]);
        t.status = Some(http::StatusCode::SWITCHING_PROTOCOLS);
        assert!(names(&t).is_empty());
        t.request_slo = Some(limits(500, 50));
        assert_eq!(names(&t), ["request"]);
    }

    #[test]
    fn globs() {
        assert!(glob("*", ""));
        assert!(glob("llama-*", "llama-3-8b"));
        assert!(glob("*-8b", "llama-3-8b"));
        assert!(glob("l?ama*b", "llama-3-8b"));
        assert!(!glob("qwen*", "llama"));
        assert!(!glob("llama", "llama-3"));
        assert!(glob("a*b*c", "aXXbYYc"));
    }
}
