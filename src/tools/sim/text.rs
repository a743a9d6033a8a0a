//! Made-up token text: a small word list walked by a seeded xorshift, so
//! the same seed and request always give the same words.

/// Words the simulator "generates"; each is one token.
const WORDS: [&str; 16] = [
    " the", " model", " token", " clock", " fast", " slow", " queue", " batch", " decode",
    " prefill", " stream", " event", " latency", " server", " proxy", " time",
];

/// A xorshift64 generator: tiny, deterministic, good enough for text.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for one request: the configured seed mixed with the
    /// request body's FNV-1a hash, so concurrency does not change the text.
    pub(crate) fn for_request(seed: u64, body: &[u8]) -> Self {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in body {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
        // splitmix64 of both, so seeds differing in one bit differ everywhere.
        let mut z = hash ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Self((z ^ (z >> 31)) | 1)
    }

    /// The next pseudo-random value.
    pub(crate) fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A uniform draw in 0..1.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// The next token's text.
    pub(crate) fn word(&mut self) -> &'static str {
        WORDS[(self.next_u64() % WORDS.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn same_seed_and_body_same_words() {
        let words = |seed| {
            let mut rng = Rng::for_request(seed, b"{\"prompt\":\"hi\"}");
            (0..8).map(|_| rng.word()).collect::<String>()
        };
        assert_eq!(words(7), words(7));
        assert_ne!(words(7), words(8));
    }
}
