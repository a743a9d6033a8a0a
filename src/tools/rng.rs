//! The one seeded random source of the tools (SplitMix64): the load
//! generator's arrivals and workload mixes, the simulator's text, output
//! lengths and fault draws. Same seed, same sequence; no dependency.

/// SplitMix64's increment (2^64 / φ): consecutive states never repeat
/// before 2^64 steps.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// 2^53: the `f64` mantissa, so every draw below is exact.
const MANTISSA: f64 = (1u64 << 53) as f64;

/// SplitMix64: fast, seedable, good enough for arrivals, mixes and made-up
/// text (not for anything secret).
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator from `seed`; the same seed gives the same sequence.
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// A generator for one `key` (a request body, a request id): `seed`
    /// mixed with the key's FNV-1a hash, so the sequence depends on the
    /// seed and the key only, never on the order keys arrive in.
    pub(crate) fn keyed(seed: u64, key: &[u8]) -> Self {
        let hash = key.iter().fold(0xCBF2_9CE4_8422_2325_u64, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01B3)
        });
        Self(mix(hash ^ seed.wrapping_mul(GOLDEN)))
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN);
        mix(self.0)
    }

    /// Uniform in [0, 1): compare with a probability, `draw < p`, so
    /// `p = 1` always holds and `p = 0` never does.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / MANTISSA
    }

    /// An exponential draw with mean `mean`, in the unit of `mean`: the gap
    /// of a Poisson process (`mean` = 1 / rate), or a length that is
    /// mostly short and sometimes long.
    pub(crate) fn exponential(&mut self, mean: f64) -> f64 {
        // Uniform in (0, 1]: never 0, so `ln` is finite.
        let open = ((self.next_u64() >> 11) + 1) as f64 / MANTISSA;
        -open.ln() * mean
    }

    /// An index into `weights`, each picked in proportion to its weight;
    /// 0 when every weight is 0.
    pub(crate) fn weighted(&mut self, weights: &[u32]) -> usize {
        let total: u64 = weights.iter().map(|&w| u64::from(w)).sum();
        if total == 0 {
            return 0;
        }
        let mut pick = self.next_u64() % total;
        for (i, &w) in weights.iter().enumerate() {
            if pick < u64::from(w) {
                return i;
            }
            pick -= u64::from(w);
        }
        0
    }

    /// An index below `len`, uniform; 0 when `len` is 0.
    pub(crate) fn below(&mut self, len: usize) -> usize {
        (self.next_u64() % len.max(1) as u64) as usize
    }
}

/// SplitMix64's finaliser: every input bit reaches every output bit.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_sequence() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..10 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn same_seed_and_key_same_sequence() {
        let draws = |seed, key: &[u8]| {
            let mut rng = Rng::keyed(seed, key);
            [rng.next_u64(), rng.next_u64()]
        };
        assert_eq!(draws(7, b"body"), draws(7, b"body"));
        assert_ne!(draws(7, b"body"), draws(8, b"body"));
        assert_ne!(draws(7, b"body"), draws(7, b"bodz"));
    }

    #[test]
    fn exponential_mean_is_the_mean() {
        let mut rng = Rng::new(1);
        let n = 20_000;
        let mean: f64 = (0..n).map(|_| rng.exponential(0.02)).sum::<f64>() / n as f64;
        assert!((mean - 0.02).abs() < 0.001, "{mean}");
    }

    #[test]
    fn unit_stays_in_zero_to_one() {
        let mut rng = Rng::new(5);
        assert!((0..10_000)
            .map(|_| rng.unit())
            .all(|u| (0.0..1.0).contains(&u)));
    }

    #[test]
    fn weighted_follows_weights() {
        let mut rng = Rng::new(3);
        let mut counts = [0u32; 3];
        for _ in 0..10_000 {
            counts[rng.weighted(&[1, 0, 3])] += 1;
        }
        assert_eq!(counts[1], 0);
        assert!((7_000..8_000).contains(&counts[2]), "{counts:?}");
    }
}
