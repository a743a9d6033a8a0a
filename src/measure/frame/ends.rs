//! The ends of a whole body too large to keep: its first and last bytes.
//!
//! An embeddings answer is a list of vectors, each a few KiB of numbers (or
//! base64), and a batch's body is often MiBs, past `max_event_bytes`. What
//! is read of it (the model, the token usage) lies outside the vectors, at
//! the body's start (vLLM writes `id` and `model` first) or at its end
//! (OpenAI writes `model` and `usage` last). So only its ends are kept, a
//! cap of a few KiB each, whatever the body's size; a body that fits in
//! both is kept whole. What is kept depends on the body alone, not on the
//! pieces it arrived in: its first `cap` bytes and its last `cap`.

/// The first and the last bytes of a body, each up to `cap`.
#[derive(Debug)]
pub struct BodyEnds {
    cap: usize,
    /// The first `cap` bytes (fewer while the body is shorter).
    head: Vec<u8>,
    /// What came after the head, at least its last `cap` bytes: bytes are
    /// dropped from its front only once it holds `2 × cap`, so that each
    /// piece costs a copy of itself and no more (amortized).
    tail: Vec<u8>,
    /// Bytes of the body so far.
    len: u64,
}

/// What a [`BodyEnds`] holds at the body's end.
#[derive(Debug, PartialEq, Eq)]
pub enum Ends<'a> {
    /// Every byte of the body, in order.
    Whole(&'a mut [u8]),
    /// Its start and its end, with bytes between them missing: `cap`
    /// bytes each.
    Cut {
        /// The body's first bytes.
        head: &'a mut [u8],
        /// The body's last bytes.
        tail: &'a mut [u8],
    },
}

// === impl BodyEnds ===

impl BodyEnds {
    /// Keeps up to `cap` bytes at each end (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            head: Vec::new(),
            tail: Vec::new(),
            len: 0,
        }
    }

    /// The body's next bytes.
    pub fn feed(&mut self, mut data: &[u8]) {
        self.len += data.len() as u64;
        let room = self.cap - self.head.len();
        if room > 0 {
            let (head, rest) = data.split_at(room.min(data.len()));
            self.head.extend_from_slice(head);
            data = rest;
        }
        if data.is_empty() {
            return;
        }
        if data.len() >= self.cap {
            // The piece alone fills the tail: what was kept before goes.
            self.tail.clear();
            self.tail.extend_from_slice(&data[data.len() - self.cap..]);
            return;
        }
        if self.tail.len() + data.len() > 2 * self.cap {
            let cut = self.tail.len() + data.len() - self.cap;
            self.tail.drain(..cut);
        }
        self.tail.extend_from_slice(data);
    }

    /// What was kept: the whole body (made contiguous, once) when it is
    /// at most `2 × cap` bytes, else its first and last `cap` bytes.
    pub fn ends(&mut self) -> Ends<'_> {
        if self.len > 2 * self.cap as u64 {
            let last = self.tail.len() - self.cap;
            return Ends::Cut {
                head: &mut self.head,
                tail: &mut self.tail[last..],
            };
        }
        if !self.tail.is_empty() {
            self.head.append(&mut self.tail);
        }
        Ends::Whole(&mut self.head)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::{BodyEnds, Ends};

    fn kept(ends: &mut BodyEnds) -> (Vec<u8>, Option<Vec<u8>>) {
        match ends.ends() {
            Ends::Whole(body) => (body.to_vec(), None),
            Ends::Cut { head, tail } => (head.to_vec(), Some(tail.to_vec())),
        }
    }

    #[test]
    fn a_body_within_both_ends_is_kept_whole() {
        let mut ends = BodyEnds::new(5);
        for piece in [&b"{\"a\""[..], b":", b"123", b"}"] {
            ends.feed(piece);
        }
        assert_eq!(kept(&mut ends), (b"{\"a\":123}".to_vec(), None));
    }

    #[test]
    fn a_longer_body_keeps_its_first_and_last_bytes() {
        let mut ends = BodyEnds::new(4);
        ends.feed(b"0123456789");
        ends.feed(b"abcdefgh");
        assert_eq!(kept(&mut ends), (b"0123".to_vec(), Some(b"efgh".to_vec())));
    }

    proptest! {
        #![proptest_config(super::super::proptest_config(512))]

        /// However the body is cut into pieces, a body of at most `2 × cap`
        /// bytes is kept whole, and a longer one as exactly its first `cap`
        /// bytes and its last `cap`.
        #[test]
        fn the_ends_are_the_bodys_whatever_its_pieces(
            body in proptest::collection::vec(any::<u8>(), 0..200),
            cap in 1usize..24,
            cuts in proptest::collection::vec(0usize..200, 0..12),
        ) {
            let mut ends = BodyEnds::new(cap);
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(body.len())).collect();
            cuts.sort_unstable();
            let mut at = 0;
            for cut in cuts.into_iter().chain([body.len()]) {
                ends.feed(&body[at..cut]);
                at = cut;
            }
            let want = match body.len() <= 2 * cap {
                true => (body.clone(), None),
                false => (body[..cap].to_vec(), Some(body[body.len() - cap..].to_vec())),
            };
            prop_assert_eq!(kept(&mut ends), want);
        }
    }
}
