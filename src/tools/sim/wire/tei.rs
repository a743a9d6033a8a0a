//! Text Embeddings Inference's `/embed`: a bare array of vectors, one per
//! input (`inputs`, a string or a list), and nothing generated; what
//! there is to know comes in the head, as TEI's router writes it on every
//! answer (`ResponseMetadata`): TGI's `x-compute-type`, the tokens it ran
//! (`x-compute-tokens`, the prompt's) and its times in ms (`x-queue-time`
//! the queue, `x-inference-time` the prefill, `x-total-time` both).

use serde_json::Value;

use super::{embeddings::number, never_streamed, Encoder, Step, Text, Totals};
use crate::tools::{
    rng::Rng,
    sim::{
        body::Event,
        request::{SimRequest, Vectors},
    },
};

/// A TEI answer being made.
pub(crate) struct Tei {
    vectors: Vectors,
    /// Draws the numbers.
    rng: Rng,
}

impl Tei {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        Self {
            vectors: request.vectors,
            rng: Rng::keyed(id, request.model.as_bytes()),
        }
    }
}

impl Encoder for Tei {
    never_streamed!();

    fn body(&self, _: &Text, _: &Totals) -> Value {
        let mut rng = self.rng.clone();
        (0..self.vectors.count)
            .map(|_| {
                (0..self.vectors.dimensions)
                    .map(|_| Value::from(number(&mut rng)))
                    .collect::<Value>()
            })
            .collect()
    }

    fn head(&self, totals: &Totals) -> Vec<(&'static str, String)> {
        let ms = |d: std::time::Duration| d.as_millis().to_string();
        let total = ms(totals.queue + totals.prefill);
        vec![
            ("x-compute-type", "gpu+optimized".to_owned()),
            ("x-compute-time", total.clone()),
            ("x-compute-characters", (totals.input * 4).to_string()),
            ("x-compute-tokens", totals.input.to_string()),
            ("x-total-time", total),
            ("x-tokenization-time", "0".to_owned()),
            ("x-queue-time", ms(totals.queue)),
            ("x-inference-time", ms(totals.prefill)),
        ]
    }
}
