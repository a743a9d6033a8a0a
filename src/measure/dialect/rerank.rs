//! Reranking and pair scoring: `…/v1/rerank`, `/v2/rerank` and `/rerank`,
//! the API Cohere defined and Jina, Voyage, vLLM, Infinity, llama.cpp
//! (also on `/reranking`) and LiteLLM answer, SGLang too in a shape of its
//! own, and vLLM's `/score` and `/v1/score`.
//!
//! The answer is one whole body. vLLM's and Jina's write `id`, `model` and
//! `usage` (`{"prompt_tokens", "total_tokens"}`, older vLLM and Jina only
//! `total_tokens`) before `results`, and each result echoes its document's
//! text; Voyage writes `model` and `usage` after `data`; vLLM's `/score`
//! answers `{"id", "object", "created", "model", "data", "usage"}`;
//! Cohere's own answer has no model and no token count (`meta` bills
//! search units), LiteLLM's Cohere-shaped one `meta.tokens.input_tokens`;
//! SGLang's is a bare array of results, which holds nothing read.
//! Nothing is generated: the input is `usage.prompt_tokens`, else
//! `usage.total_tokens`, which then counts the input alone, else
//! `meta.tokens.input_tokens`.
//!
//! With its documents echoed, a rerank of many long passages is MiBs, so
//! the body is read by its ends, as embeddings are ([`members`]).

use serde::{de::IgnoredAny, Deserialize};

use super::{
    common::{done, name},
    members::{by_ends, whole, Members},
    Name, ParseError, Parsed, Usage,
};

/// The members of an answer read: the results are not.
#[derive(Deserialize)]
struct Body<'a> {
    #[serde(default, borrow, deserialize_with = "name")]
    model: Option<Name<'a>>,
    #[serde(default, borrow, deserialize_with = "name")]
    id: Option<Name<'a>>,
    #[serde(default)]
    usage: Option<Tokens>,
    #[serde(default)]
    meta: Option<Meta>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

/// `usage`.
#[derive(Deserialize)]
struct Tokens {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    total_tokens: Option<u64>,
}

/// Cohere's `meta`, as LiteLLM fills it in.
#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    tokens: Option<MetaTokens>,
}

#[derive(Deserialize)]
struct MetaTokens {
    /// A number, which Cohere's own SDK types as a float (`99.0`).
    #[serde(default)]
    input_tokens: Option<serde_json::Number>,
}

/// A count given as an integer or as a float that is one.
fn count(n: &serde_json::Number) -> Option<u64> {
    n.as_u64().or_else(|| {
        let f = n.as_f64()?;
        (f >= 0.0 && f.fract() == 0.0 && f < u64::MAX as f64).then_some(f as u64)
    })
}

impl<'a> Members<'a> for Body<'a> {
    // Results alone: SGLang's.
    const BARE_ARRAY: bool = true;

    fn parsed(self) -> Parsed<'a> {
        let usage = self.usage.and_then(|u| u.prompt_tokens.or(u.total_tokens));
        let meta = self.meta.and_then(|m| count(&m.tokens?.input_tokens?));
        Parsed {
            usage: usage.or(meta).map(|input| Usage {
                input: Some(input),
                ..Usage::default()
            }),
            model: self.model,
            response_id: self.id,
            error: self.error.is_some(),
            ..done()
        }
    }

    fn or(self, first: Self) -> Self {
        Self {
            model: self.model.or(first.model),
            id: self.id.or(first.id),
            usage: self.usage.or(first.usage),
            meta: self.meta.or(first.meta),
            error: self.error.or(first.error),
        }
    }
}

/// A whole answer.
pub(super) fn body(data: &[u8]) -> Result<Parsed<'_>, ParseError> {
    whole::<Body<'_>>(data)
}

/// An answer of which only `head`, its first bytes, and `tail`, its last,
/// were kept: the members complete in each, read as [`body`] reads them.
pub(super) fn ends<'a>(head: &'a mut [u8], tail: &'a mut [u8]) -> Result<Parsed<'a>, ParseError> {
    by_ends::<Body<'a>>(head, tail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::frame::ends::{BodyEnds, Ends};

    /// What [`body`] reads whole, and [`ends`] from the ends a 4 KiB
    /// `BodyEnds` keeps: the model, the id and the input tokens.
    fn both(answer: &str) -> [(Option<String>, Option<String>, Option<u64>); 2] {
        let seen = |p: Parsed<'_>| {
            let text = |n: Option<Name<'_>>| n.and_then(|n| n.to_text().map(str::to_owned));
            (
                text(p.model),
                text(p.response_id),
                p.usage.and_then(|u| u.input),
            )
        };
        let whole = seen(body(answer.as_bytes()).expect("whole"));
        let mut kept = BodyEnds::new(4096);
        kept.feed(answer.as_bytes());
        let cut = match kept.ends() {
            Ends::Whole(body) => seen(super::body(body).expect("whole")),
            Ends::Cut { head, tail } => seen(ends(head, tail).expect("ends")),
        };
        [whole, cut]
    }

    /// `n` results, each echoing a passage of about 1 KB.
    fn results(n: usize) -> String {
        let passage = "tide pools hold anemones, \\\"hermit\\\" crabs } and ] limpets; ".repeat(16);
        (0..n)
            .map(|i| {
                format!(
                    r#"{{"index":{i},"document":{{"text":"{passage}"}},"relevance_score":0.{i}}}"#
                )
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn each_servers_answer_reads_its_model_and_input() {
        let many = results(200);
        let vllm = format!(
            r#"{{"id":"rerank-9f2","model":"BAAI/bge-reranker-v2-m3","usage":{{"prompt_tokens":5120,"total_tokens":5120}},"results":[{many}]}}"#
        );
        let jina = format!(
            r#"{{"model":"jina-reranker-v2-base-multilingual","usage":{{"total_tokens":815}},"results":[{many}]}}"#
        );
        let voyage = format!(
            r#"{{"object":"list","data":[{many}],"model":"rerank-2","usage":{{"total_tokens":702}}}}"#
        );
        let score = r#"{"id":"score-a1","object":"list","created":1764990000,"model":"BAAI/bge-reranker-v2-m3","data":[{"index":0,"object":"score","score":0.99}],"usage":{"prompt_tokens":21,"total_tokens":21,"completion_tokens":0,"prompt_tokens_details":null}}"#;
        let litellm = format!(
            r#"{{"id":"b4c","results":[{many}],"meta":{{"billed_units":{{"search_units":1,"total_tokens":99}},"tokens":{{"input_tokens":99,"output_tokens":0}}}}}}"#
        );
        let cohere = format!(
            r#"{{"id":"07734bd2","results":[{many}],"meta":{{"api_version":{{"version":"2"}},"billed_units":{{"search_units":1}}}}}}"#
        );
        let model = |m: &str| Some(m.to_owned());
        let cases = [
            (
                vllm.as_str(),
                model("BAAI/bge-reranker-v2-m3"),
                model("rerank-9f2"),
                Some(5120),
            ),
            (
                jina.as_str(),
                model("jina-reranker-v2-base-multilingual"),
                None,
                Some(815),
            ),
            (voyage.as_str(), model("rerank-2"), None, Some(702)),
            (
                score,
                model("BAAI/bge-reranker-v2-m3"),
                model("score-a1"),
                Some(21),
            ),
            (litellm.as_str(), None, model("b4c"), Some(99)),
            (cohere.as_str(), None, model("07734bd2"), None),
        ];
        for (answer, model, id, input) in cases {
            let want = (model, id, input);
            assert_eq!(both(answer), [want.clone(), want], "{}", &answer[..60]);
        }
        assert!(vllm.len() > 200_000, "read by its ends");
    }

    #[test]
    fn sglangs_bare_array_holds_nothing_and_garbage_is_unreadable() {
        let sglang =
            r#"[{"score":0.98,"document":"hermit crabs","index":1,"meta_info":{"id":"a"}}]"#;
        assert_eq!(body(sglang.as_bytes()), Ok(done()));
        let (mut head, mut tail) = (b"[{\"score\":0".to_vec(), b"0.5}]".to_vec());
        assert_eq!(ends(&mut head, &mut tail), Ok(done()));
        for bad in ["not json", r#"{"model":"#, "[1,"] {
            assert_eq!(body(bad.as_bytes()).err(), Some(ParseError::Json), "{bad}");
        }
        let (mut head, mut tail) = (b"{\"model\":\"m\",".to_vec(), b"0.5}]".to_vec());
        assert_eq!(ends(&mut head, &mut tail).err(), Some(ParseError::Json));
    }

    #[test]
    fn a_float_count_in_cohere_s_meta_is_read() {
        let litellm = r#"{"id":"b4c","results":[],"meta":{"tokens":{"input_tokens":99.0}}}"#;
        let p = body(litellm.as_bytes()).expect("read");
        assert_eq!(p.usage.and_then(|u| u.input), Some(99));
        let odd = r#"{"results":[],"meta":{"tokens":{"input_tokens":9.5}}}"#;
        assert_eq!(body(odd.as_bytes()).expect("read").usage, None);
    }
}
