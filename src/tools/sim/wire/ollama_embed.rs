//! Ollama's own embeddings, `/api/embed`: one whole answer, `{"model",
//! "embeddings", "total_duration", "load_duration", "prompt_eval_count"}`,
//! a vector per input (`input`, a string or a list) and nothing
//! generated; the durations in ns (the load none: the model is loaded),
//! the count the prompt's tokens.

use serde_json::{json, Value};

use super::{embeddings::number, never_streamed, Encoder, Step, Text, Totals};
use crate::tools::{
    rng::Rng,
    sim::{
        body::Event,
        request::{SimRequest, Vectors},
    },
};

/// An Ollama embeddings answer being made.
pub(crate) struct OllamaEmbed {
    model: String,
    vectors: Vectors,
    /// Draws the numbers.
    rng: Rng,
}

impl OllamaEmbed {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        Self {
            model: request.model.clone(),
            vectors: request.vectors,
            rng: Rng::keyed(id, request.model.as_bytes()),
        }
    }
}

impl Encoder for OllamaEmbed {
    never_streamed!();

    fn body(&self, _: &Text, totals: &Totals) -> Value {
        let mut rng = self.rng.clone();
        let embeddings: Vec<Vec<f32>> = (0..self.vectors.count)
            .map(|_| {
                (0..self.vectors.dimensions)
                    .map(|_| number(&mut rng))
                    .collect()
            })
            .collect();
        let total = (totals.queue + totals.prefill).as_nanos() as u64;
        json!({"model": self.model, "embeddings": embeddings, "total_duration": total,
               "load_duration": 0, "prompt_eval_count": totals.input})
    }
}
