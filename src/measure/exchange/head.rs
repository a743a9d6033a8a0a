//! What a response head reports about the request, before its body: which
//! of Hugging Face's routers answered ([`Router`]), and the timings and
//! counts those routers send as headers.
//!
//! TGI's router sends its queue and inference time (`x-queue-time`,
//! `x-inference-time`, ms); TEI's sends the same two, and the tokens of
//! the inputs it ran (`x-compute-tokens`), which its native answers (bare
//! arrays of vectors or scores) carry nowhere else. The values are TEI's
//! own: for a batch, the tokens of all its inputs, and the queue and
//! inference times averaged over its inputs.

use http::HeaderMap;

use crate::measure::dialect::{Router, ServerTimings, Usage};

/// What the head reported.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Reported {
    /// The server's own phases.
    pub(super) server: ServerTimings,
    /// TEI's count of the input tokens; nothing is generated.
    pub(super) usage: Option<Usage>,
}

impl Router {
    /// Which router answered, as `headers` tell.
    pub(crate) fn of(headers: &HeaderMap) -> Self {
        if !headers.contains_key("x-compute-type") {
            Self::Other
        } else if headers.contains_key("x-compute-tokens") {
            Self::Tei
        } else {
            Self::Tgi
        }
    }
}

/// What `headers`, of an answer `router` wrote, report. TGI's inference
/// time spans its prefill and decode, and is given as decode, where most
/// of a generation's time goes; TEI's is one forward pass over the inputs,
/// which generates nothing: prefill. Any other server's head is read as
/// TGI's (a gateway in front of TGI may drop `x-compute-type`).
pub(super) fn reported(headers: &HeaderMap, router: Router) -> Reported {
    // `try_`: a value past `Duration`'s range (`1e30`), negative or not a
    // number is no timing, not a panic in the request's task.
    let ms = |name: &str| {
        let value = headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()?;
        std::time::Duration::try_from_secs_f64(value / 1e3).ok()
    };
    let (queue, inference) = (ms("x-queue-time"), ms("x-inference-time"));
    match router {
        Router::Tei => Reported {
            server: ServerTimings {
                queue,
                prefill: inference,
                ..ServerTimings::default()
            },
            usage: headers
                .get("x-compute-tokens")
                .and_then(|v| v.to_str().ok()?.trim().parse::<u64>().ok())
                .map(|input| Usage {
                    input: Some(input),
                    output: Some(0),
                    ..Usage::default()
                }),
        },
        Router::Tgi | Router::Other => Reported {
            server: ServerTimings {
                queue,
                decode: inference,
                ..ServerTimings::default()
            },
            usage: None,
        },
    }
}
