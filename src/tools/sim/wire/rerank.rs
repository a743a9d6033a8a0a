//! Reranks and pair scores, as vLLM answers them: `/v1/rerank`,
//! `/v2/rerank` and `/rerank` (Cohere's API) with `{"id", "model",
//! "usage", "results"}`, each result a document's `index`, its text echoed
//! and its `relevance_score`, best first; `/v1/score` and `/score` with
//! `{"id", "object", "created", "model", "data", "usage"}`, a score per
//! `text_2` in order. Nothing is generated; the usage counts the prompt's
//! tokens. The scores are drawn from the request's own generator.

use serde_json::{json, Value};

use super::{created, never_streamed, Encoder, Step, Text, Totals};
use crate::tools::{
    rng::Rng,
    sim::{body::Event, request::SimRequest},
};

/// A rerank or score answer being made.
pub(crate) struct Rerank {
    /// `/score`'s shape, not a rerank's.
    score: bool,
    id: String,
    model: String,
    documents: Vec<String>,
    /// Draws the scores.
    rng: Rng,
}

impl Rerank {
    pub(crate) fn new(request: &SimRequest, id: u64, score: bool) -> Self {
        Self {
            score,
            id: format!("{}-sim{id}", if score { "score" } else { "rerank" }),
            model: request.model.clone(),
            documents: request.documents.clone(),
            rng: Rng::keyed(id, request.model.as_bytes()),
        }
    }
}

impl Encoder for Rerank {
    never_streamed!();

    fn body(&self, _: &Text, totals: &Totals) -> Value {
        let mut rng = self.rng.clone();
        let mut scored: Vec<(usize, f64)> =
            (0..self.documents.len()).map(|i| (i, rng.unit())).collect();
        let usage = json!({"prompt_tokens": totals.input, "total_tokens": totals.input});
        if self.score {
            let data: Vec<Value> = scored
                .iter()
                .map(|&(i, score)| json!({"index": i, "object": "score", "score": score}))
                .collect();
            let usage = json!({"prompt_tokens": totals.input, "total_tokens": totals.input,
                               "completion_tokens": 0, "prompt_tokens_details": null});
            return json!({"id": self.id, "object": "list", "created": created(),
                          "model": self.model, "data": data, "usage": usage});
        }
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        let results: Vec<Value> = scored
            .iter()
            .map(|&(i, score)| {
                json!({"index": i, "document": {"text": self.documents[i], "multi_modal": null},
                       "relevance_score": score})
            })
            .collect();
        json!({"id": self.id, "model": self.model, "usage": usage, "results": results})
    }
}
