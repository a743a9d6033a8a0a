//! Embeddings, `/v1/embeddings` and `/embeddings`: one whole answer with a
//! vector per input and nothing generated, in the two orders servers write
//! it: for a model named `text-embedding…`, OpenAI's (`data` first, then
//! `model` and `usage`); for any other, vLLM's (`id`, `created` and
//! `model` before `data`). Each vector holds `dimensions` numbers (as
//! text, or little-endian float32s in base64 when asked), drawn from the
//! request's own generator; the usage counts the prompt's tokens.

use serde_json::{json, Value};

use super::{created, never_streamed, Encoder, Step, Text, Totals};
use crate::tools::{
    rng::Rng,
    sim::{
        body::Event,
        request::{SimRequest, Vectors},
    },
};

/// An embeddings answer being made.
pub(crate) struct Embeddings {
    openai: bool,
    id: String,
    model: String,
    vectors: Vectors,
    /// Draws the numbers.
    rng: Rng,
}

impl Embeddings {
    pub(crate) fn new(request: &SimRequest, id: u64) -> Self {
        Self {
            openai: request.model.starts_with("text-embedding"),
            id: format!("embd-sim{id}"),
            model: request.model.clone(),
            vectors: request.vectors,
            rng: Rng::keyed(id, request.model.as_bytes()),
        }
    }

    /// One vector.
    fn vector(&self, rng: &mut Rng) -> Value {
        let numbers = (0..self.vectors.dimensions).map(|_| number(rng));
        match self.vectors.base64 {
            true => Value::from(base64(
                &numbers.flat_map(f32::to_le_bytes).collect::<Vec<_>>(),
            )),
            false => numbers.map(Value::from).collect(),
        }
    }
}

impl Encoder for Embeddings {
    never_streamed!();

    fn body(&self, _: &Text, totals: &Totals) -> Value {
        let mut rng = self.rng.clone();
        let data: Vec<Value> = (0..self.vectors.count)
            .map(|i| json!({"object": "embedding", "index": i, "embedding": self.vector(&mut rng)}))
            .collect();
        let usage = json!({"prompt_tokens": totals.input, "total_tokens": totals.input});
        match self.openai {
            true => json!({"object": "list", "data": data, "model": self.model, "usage": usage}),
            false => json!({"id": self.id, "object": "list", "created": created(),
                            "model": self.model, "data": data, "usage": usage}),
        }
    }
}

/// One number of a vector, in `[-0.1, 0.1)` as a normalized embedding's
/// numbers are.
pub(super) fn number(rng: &mut Rng) -> f32 {
    (rng.unit() as f32 - 0.5) / 5.0
}

/// Standard base64 with padding (RFC 4648).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            let sextet = (n >> (18 - 6 * i)) & 63;
            out.push(match i <= chunk.len() {
                true => char::from(ALPHABET[sextet as usize]),
                false => '=',
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_is_rfc_4648s() {
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(base64(&[0xfb, 0xff, 0xbf]), "+/+/");
    }
}
