//! vLLM's other pooling routes, in the shape of its embeddings answer
//! (`{"id", "object": "list", "created", "model", "data", "usage"}`):
//! `/classify` and `/v1/classify`, a sequence classifier's label and
//! probabilities per input (`{"index", "label", "probs", "num_classes"}`),
//! and `/pooling`, the pooler's output per input (`{"index", "object":
//! "pooling", "data"}`, here a vector of `dimensions` numbers). Nothing is
//! generated; the usage counts the prompt's tokens, as vLLM's does.

use serde_json::{json, Value};

use super::{created, embeddings::number, never_streamed, Encoder, Step, Text, Totals};
use crate::tools::{
    rng::Rng,
    sim::{
        body::Event,
        request::{SimRequest, Vectors},
    },
};

/// The labels of the simulated classifier, as a two-class model's
/// `id2label` names them.
const LABELS: [&str; 2] = ["negative", "positive"];

/// A classification or pooling answer being made.
pub(crate) struct Pooling {
    /// `/classify`'s shape, not `/pooling`'s.
    classify: bool,
    id: String,
    model: String,
    vectors: Vectors,
    /// Draws the numbers.
    rng: Rng,
}

impl Pooling {
    pub(crate) fn new(request: &SimRequest, id: u64, classify: bool) -> Self {
        Self {
            classify,
            id: format!("{}-sim{id}", if classify { "classify" } else { "pool" }),
            model: request.model.clone(),
            vectors: request.vectors,
            rng: Rng::keyed(id, request.model.as_bytes()),
        }
    }

    /// One input's answer.
    fn item(&self, index: usize, rng: &mut Rng) -> Value {
        if self.classify {
            let positive = rng.unit();
            let probs = [1.0 - positive, positive];
            let label = LABELS[usize::from(positive >= 0.5)];
            return json!({"index": index, "label": label, "probs": probs,
                          "num_classes": probs.len()});
        }
        let data: Vec<f32> = (0..self.vectors.dimensions).map(|_| number(rng)).collect();
        json!({"index": index, "object": "pooling", "data": data})
    }
}

impl Encoder for Pooling {
    never_streamed!();

    fn body(&self, _: &Text, totals: &Totals) -> Value {
        let mut rng = self.rng.clone();
        let data: Vec<Value> = (0..self.vectors.count)
            .map(|i| self.item(i, &mut rng))
            .collect();
        let usage = json!({"prompt_tokens": totals.input, "total_tokens": totals.input,
                           "completion_tokens": 0, "prompt_tokens_details": null});
        json!({"id": self.id, "object": "list", "created": created(),
               "model": self.model, "data": data, "usage": usage})
    }
}
