//! Made-up token text: a small word list walked by the request's seeded
//! generator, so the same seed and request always give the same words.

use crate::tools::rng::Rng;

/// Words the simulator "generates"; each is one token.
const WORDS: [&str; 16] = [
    " the", " model", " token", " clock", " fast", " slow", " queue", " batch", " decode",
    " prefill", " stream", " event", " latency", " server", " proxy", " time",
];

/// The next token's text.
pub(crate) fn word(rng: &mut Rng) -> &'static str {
    WORDS[rng.below(WORDS.len())]
}

#[cfg(test)]
mod tests {
    use super::word;
    use crate::tools::rng::Rng;

    #[test]
    fn same_seed_and_body_same_words() {
        let words = |seed| {
            let mut rng = Rng::keyed(seed, b"{\"prompt\":\"hi\"}");
            (0..8).map(|_| word(&mut rng)).collect::<String>()
        };
        assert_eq!(words(7), words(7));
        assert_ne!(words(7), words(8));
    }
}
