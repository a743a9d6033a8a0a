//! A response's content coding, undone on the copy the measurement reads.
//!
//! Remote APIs compress what their clients accept, and the official SDKs
//! accept compression: the OpenAI Python SDK's httpx sends
//! `Accept-Encoding: gzip, deflate`, and OpenAI answers a whole
//! (non-streamed) response with a gzip body (one is among the recorded
//! fixtures). Without this, every such request would reach the metrics with
//! no token counts. The bytes the client gets are the upstream's, untouched;
//! only the measurement's copy is inflated.
//!
//! The copy is inflated as it comes, in small steps, and each step's output
//! is handed on at once: an event is read at the arrival of the frame that
//! completed it (a server that flushes its compressor per event is timed
//! per event; one that does not is timed as its client can read it), and
//! whatever ratio a hostile body reaches, one step inflates to a bounded
//! size. gzip (`gzip`, `x-gzip`, several members) and `deflate` (zlib, as
//! RFC 9110 defines it) are inflated; anything else (`br`, `zstd`, stacked
//! codings) is left unread and counted as before (`unparsed_encoding`).

use std::{
    io::{self, Write},
    sync::atomic::{AtomicUsize, Ordering::Relaxed},
};

use flate2::write::{MultiGzDecoder, ZlibDecoder};
use http::{header, HeaderMap};

/// Compressed bytes inflated per step. deflate expands by at most about
/// 1,032×, so one step's output is at most about 264 KiB, whatever the
/// body; a usual step's is a few hundred bytes.
const STEP: usize = 256;

/// Capacity of the output buffer kept between steps (bytes): a burst's
/// larger buffer is given back.
const KEEP: usize = 16 * 1024;

/// Inflated bytes a body may reach whatever its ratio (1 MiB)...
const ALLOWANCE: u64 = 1024 * 1024;
/// ...and past that, per compressed byte. Text and JSON compress 3 to 20
/// times (a stream flushed per event less); a body past this is a bomb,
/// whose reading would cost a thousand times its bytes in CPU on the
/// connection's thread, delaying its frames. It is read no further.
const RATIO: u64 = 64;

/// A response's content coding, as far as the measurement is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// None (or only `identity`).
    Identity,
    /// `gzip` or `x-gzip`.
    Gzip,
    /// `deflate`: the zlib format.
    Deflate,
}

/// A coding the measurement does not undo: `br`, `zstd`, `compress`, an
/// unknown one, or several stacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("content coding not inflated")]
pub struct Unsupported;

impl Coding {
    /// The coding `Content-Encoding` names (all its fields and values, in
    /// order, `identity` ignored, case-insensitive).
    pub fn of(headers: &HeaderMap) -> Result<Self, Unsupported> {
        let mut found = Self::Identity;
        let values = headers.get_all(header::CONTENT_ENCODING);
        for value in values {
            let value = value.to_str().map_err(|_| Unsupported)?;
            for token in value.split(',').map(str::trim).filter(|t| !t.is_empty()) {
                let coding = if token.eq_ignore_ascii_case("identity") {
                    continue;
                } else if token.eq_ignore_ascii_case("gzip") || token.eq_ignore_ascii_case("x-gzip")
                {
                    Self::Gzip
                } else if token.eq_ignore_ascii_case("deflate") {
                    Self::Deflate
                } else {
                    return Err(Unsupported);
                };
                if found != Self::Identity {
                    return Err(Unsupported);
                }
                found = coding;
            }
        }
        Ok(found)
    }
}

/// Why a body's copy is inflated no further.
#[derive(Debug, thiserror::Error)]
pub enum InflateError {
    /// Corrupt, truncated, or bytes after a zlib stream's end.
    #[error("the body could not be inflated: {0}")]
    Corrupt(#[from] io::Error),
    /// It inflated past [`ALLOWANCE`] and [`RATIO`] times its compressed
    /// bytes.
    #[error("the body inflates more than {RATIO} times its size")]
    Bomb,
}

/// Inflaters alive at once, at most, across the process: each holds about
/// 80 KiB (flate2's window and buffers), so that a proxy whose every
/// response were compressed stays within about 40 MiB for them (an idle
/// stream holds about 10 KiB). A compressed response beyond it is timed
/// but not read, and counted (`unparsed_encoding`). Whole bodies hold one
/// only while they arrive; streams for their whole length.
pub static INFLATERS: Budget = Budget::new(512);

/// A cap on inflaters alive at once.
#[derive(Debug)]
pub struct Budget {
    alive: AtomicUsize,
    most: usize,
}

/// The cap was reached: the response is not inflated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("too many compressed responses are being read")]
pub struct Busy;

impl Budget {
    /// At most `most` alive at once.
    pub const fn new(most: usize) -> Self {
        Self {
            alive: AtomicUsize::new(0),
            most,
        }
    }

    /// Inflaters alive now.
    pub fn alive(&self) -> usize {
        self.alive.load(Relaxed)
    }

    fn take(&'static self) -> Option<Slot> {
        self.alive
            .fetch_update(Relaxed, Relaxed, |n| (n < self.most).then_some(n + 1))
            .ok()
            .map(|_| Slot(self))
    }
}

/// One inflater's place in a [`Budget`], given back when it is dropped.
struct Slot(&'static Budget);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.alive.fetch_sub(1, Relaxed);
    }
}

/// Inflates one response body's copy, step by step.
pub struct Inflate {
    decoder: Decoder,
    /// Compressed bytes taken and inflated bytes handed on so far.
    compressed: u64,
    inflated: u64,
    /// Its place in a budget, if it was made within one.
    _slot: Option<Slot>,
}

enum Decoder {
    Gzip(MultiGzDecoder<Vec<u8>>),
    Zlib(ZlibDecoder<Vec<u8>>),
}

impl std::fmt::Debug for Inflate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let coding = match self.decoder {
            Decoder::Gzip(_) => Coding::Gzip,
            Decoder::Zlib(_) => Coding::Deflate,
        };
        f.debug_struct("Inflate").field("coding", &coding).finish()
    }
}

impl Inflate {
    /// An inflater for `coding` outside any budget (the tests'); `None`
    /// for `identity`. The proxy's are made [`Inflate::within`] one.
    fn new(coding: Coding) -> Option<Self> {
        let decoder = match coding {
            Coding::Identity => return None,
            Coding::Gzip => Decoder::Gzip(MultiGzDecoder::new(Vec::new())),
            Coding::Deflate => Decoder::Zlib(ZlibDecoder::new(Vec::new())),
        };
        Some(Self {
            decoder,
            compressed: 0,
            inflated: 0,
            _slot: None,
        })
    }

    /// An inflater for `coding` within `budget`; `Ok(None)` for `identity`,
    /// `Busy` when the budget is spent.
    pub fn within(coding: Coding, budget: &'static Budget) -> Result<Option<Self>, Busy> {
        if coding == Coding::Identity {
            return Ok(None);
        }
        let slot = budget.take().ok_or(Busy)?;
        Ok(Self::new(coding).map(|inflate| Self {
            _slot: Some(slot),
            ..inflate
        }))
    }

    /// Inflates `data`, the body's next compressed bytes, handing each
    /// step's output to `out` as soon as it is inflated.
    pub fn feed(&mut self, data: &[u8], out: &mut impl FnMut(&[u8])) -> Result<(), InflateError> {
        for step in data.chunks(STEP) {
            self.compressed += step.len() as u64;
            let decoder: &mut dyn Write = match &mut self.decoder {
                Decoder::Gzip(d) => d,
                Decoder::Zlib(d) => d,
            };
            decoder.write_all(step)?;
            decoder.flush()?;
            self.drain(out)?;
        }
        Ok(())
    }

    /// The body ended: hands on what is left, and fails if the compressed
    /// stream did not end (the body was cut).
    pub fn finish(&mut self, out: &mut impl FnMut(&[u8])) -> Result<(), InflateError> {
        let done = match &mut self.decoder {
            Decoder::Gzip(d) => d.try_finish(),
            Decoder::Zlib(d) => d.try_finish(),
        };
        self.drain(out)?;
        Ok(done?)
    }

    /// Hands on what the last step inflated, unless the body has inflated
    /// past its bound ([`ALLOWANCE`], [`RATIO`]).
    fn drain(&mut self, out: &mut impl FnMut(&[u8])) -> Result<(), InflateError> {
        let buffer = match &mut self.decoder {
            Decoder::Gzip(d) => d.get_mut(),
            Decoder::Zlib(d) => d.get_mut(),
        };
        self.inflated += buffer.len() as u64;
        let bomb = self.inflated > ALLOWANCE + RATIO * self.compressed;
        if !bomb && !buffer.is_empty() {
            out(buffer);
        }
        buffer.clear();
        if buffer.capacity() > KEEP {
            buffer.shrink_to(KEEP);
        }
        if bomb {
            return Err(InflateError::Bomb);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::{
        write::{GzEncoder, ZlibEncoder},
        Compression,
    };
    use http::{HeaderMap, HeaderValue};

    use super::{Budget, Busy, Coding, Inflate, InflateError, Unsupported, ALLOWANCE, RATIO, STEP};

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append("content-encoding", HeaderValue::from_str(v).expect("value"));
        }
        map
    }

    #[test]
    fn the_coding_is_read_from_every_content_encoding_field() {
        let cases: &[(&[&str], Result<Coding, Unsupported>)] = &[
            (&[], Ok(Coding::Identity)),
            (&["identity"], Ok(Coding::Identity)),
            (&["gzip"], Ok(Coding::Gzip)),
            (&["GZip"], Ok(Coding::Gzip)),
            (&["x-gzip"], Ok(Coding::Gzip)),
            (&[" deflate "], Ok(Coding::Deflate)),
            (&["identity, gzip"], Ok(Coding::Gzip)),
            (&["identity", "gzip"], Ok(Coding::Gzip)),
            (&["br"], Err(Unsupported)),
            (&["zstd"], Err(Unsupported)),
            (&["compress"], Err(Unsupported)),
            (&["gzip, gzip"], Err(Unsupported)),
            (&["deflate", "gzip"], Err(Unsupported)),
            (&["gzip, br"], Err(Unsupported)),
        ];
        for (values, expected) in cases {
            assert_eq!(Coding::of(&headers(values)), *expected, "{values:?}");
        }
        let mut opaque = HeaderMap::new();
        opaque.insert(
            "content-encoding",
            HeaderValue::from_bytes(b"gz\xffip").expect("value"),
        );
        assert_eq!(Coding::of(&opaque), Err(Unsupported));
    }

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).expect("compress");
        e.finish().expect("compress")
    }

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut e = ZlibEncoder::new(Vec::new(), Compression::default());
        e.write_all(data).expect("compress");
        e.finish().expect("compress")
    }

    /// Inflates `body` fed in pieces of `piece` bytes: what came out, and
    /// whether it ended well.
    fn inflate(coding: Coding, body: &[u8], piece: usize) -> (Vec<u8>, bool) {
        let mut inflate = Inflate::new(coding).expect("an inflater");
        let mut out = Vec::new();
        let mut ok = true;
        for chunk in body.chunks(piece.max(1)) {
            ok &= inflate
                .feed(chunk, &mut |b| out.extend_from_slice(b))
                .is_ok();
        }
        ok &= inflate.finish(&mut |b| out.extend_from_slice(b)).is_ok();
        (out, ok)
    }

    fn text(n: usize) -> Vec<u8> {
        (0..n)
            .flat_map(|i| format!("data: {{\"n\":{i},\"t\":\" word\"}}\n\n").into_bytes())
            .collect()
    }

    #[test]
    fn gzip_and_zlib_bodies_inflate_whole_in_any_pieces() {
        let plain = text(500);
        for (coding, body) in [
            (Coding::Gzip, gzip(&plain)),
            (Coding::Deflate, zlib(&plain)),
        ] {
            for piece in [1, 7, STEP - 1, STEP + 1, 4096, body.len()] {
                assert_eq!(
                    inflate(coding, &body, piece),
                    (plain.clone(), true),
                    "{coding:?} {piece}"
                );
            }
        }
    }

    #[test]
    fn several_gzip_members_inflate_as_one_body() {
        let (a, b) = (text(3), text(40));
        let mut body = gzip(&a);
        body.extend(gzip(&b));
        assert_eq!(inflate(Coding::Gzip, &body, 100), ([a, b].concat(), true));
    }

    /// A compressor flushed after each event (what a streaming server
    /// does): each event comes out with the frame that carried it, not with
    /// a later one.
    #[test]
    fn a_flushed_event_comes_out_with_its_own_frame() {
        let mut e = GzEncoder::new(Vec::new(), Compression::default());
        let mut inflate = Inflate::new(Coding::Gzip).expect("an inflater");
        for i in 0..50 {
            let event = format!("data: {{\"i\":{i}}}\n\n");
            let before = e.get_ref().len();
            e.write_all(event.as_bytes()).expect("compress");
            e.flush().expect("sync flush");
            let frame = e.get_ref()[before..].to_vec();
            let mut out = Vec::new();
            inflate
                .feed(&frame, &mut |b| out.extend_from_slice(b))
                .expect("inflate");
            assert_eq!(out, event.as_bytes(), "event {i}");
        }
    }

    #[test]
    fn corrupt_or_cut_bodies_fail_without_panicking() {
        let plain = text(200);
        let body = gzip(&plain);
        let (_, ok) = inflate(Coding::Gzip, &body[..body.len() / 2], 64);
        assert!(!ok, "a cut body");
        let mut corrupt = body.clone();
        for b in corrupt.iter_mut().skip(20).step_by(7) {
            *b ^= 0x5a;
        }
        assert!(!inflate(Coding::Gzip, &corrupt, 64).1, "a corrupt body");
        assert!(!inflate(Coding::Gzip, b"not gzip at all", 4).1);
        assert!(
            !inflate(Coding::Deflate, &gzip(&plain), 64).1,
            "gzip said to be deflate"
        );
        let mut trailing = zlib(&plain);
        trailing.extend_from_slice(b"junk");
        assert!(
            !inflate(Coding::Deflate, &trailing, 64).1,
            "bytes after the stream"
        );
    }

    #[test]
    fn a_budget_caps_the_inflaters_alive_at_once() {
        let budget: &'static Budget = Box::leak(Box::new(Budget::new(2)));
        let a = Inflate::within(Coding::Gzip, budget).expect("a slot");
        let b = Inflate::within(Coding::Deflate, budget).expect("a slot");
        assert!(a.is_some() && b.is_some());
        assert_eq!(budget.alive(), 2);
        assert_eq!(Inflate::within(Coding::Gzip, budget).err(), Some(Busy));
        // identity takes no place, even with the budget spent.
        assert!(matches!(
            Inflate::within(Coding::Identity, budget),
            Ok(None)
        ));
        drop(a);
        assert_eq!(budget.alive(), 1);
        let c = Inflate::within(Coding::Gzip, budget).expect("a slot after one went");
        drop((b, c));
        assert_eq!(budget.alive(), 0);
    }

    /// A body that inflates a thousandfold (a bomb) comes out in bounded
    /// steps, and only until it passes its bound; then it is read no
    /// further. One that inflates as text does is read whole.
    #[test]
    fn a_bomb_is_read_no_further_than_its_bound() {
        let body = gzip(&vec![b'a'; 16 * 1024 * 1024]);
        let mut inflater = Inflate::new(Coding::Gzip).expect("an inflater");
        let (mut total, mut largest) = (0u64, 0usize);
        let mut out = |b: &[u8]| {
            total += b.len() as u64;
            largest = largest.max(b.len());
        };
        assert!(matches!(
            inflater.feed(&body, &mut out),
            Err(InflateError::Bomb)
        ));
        assert!(
            total > 0 && total <= ALLOWANCE + RATIO * body.len() as u64,
            "{total}"
        );
        assert!(largest <= STEP * 1100, "{largest}");

        // 8 MiB of text, 5 to 10 times smaller compressed: read whole.
        let plain = text(200_000);
        assert!(plain.len() > 4 * ALLOWANCE as usize);
        assert_eq!(inflate(Coding::Gzip, &gzip(&plain), 4096), (plain, true));
    }
}

#[cfg(test)]
mod props {
    use std::io::Write;

    use flate2::{
        write::{GzEncoder, ZlibEncoder},
        Compression,
    };
    use proptest::prelude::*;

    use super::{Coding, Inflate};

    /// The most one `out` call may be handed (bytes): one step's worth of
    /// the densest deflate, with room to spare.
    const MOST_PER_CALL: usize = 300 * 1024;

    /// Plaintext that compresses the way events do: runs of random bytes,
    /// some repeated many times.
    fn plaintext() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(
            (prop::collection::vec(any::<u8>(), 0..64), 1usize..200),
            0..24,
        )
        .prop_map(|runs| {
            runs.into_iter()
                .flat_map(|(run, times)| {
                    std::iter::repeat_n(run, times)
                        .flatten()
                        .collect::<Vec<_>>()
                })
                .collect()
        })
    }

    /// `plain` compressed with `coding` at `level`, the compressor
    /// sync-flushed after each of the byte offsets in `flushes`.
    fn compress(coding: Coding, level: u32, plain: &[u8], flushes: &[usize]) -> Vec<u8> {
        let mut cuts: Vec<usize> = flushes.iter().map(|f| f % (plain.len() + 1)).collect();
        cuts.sort_unstable();
        cuts.push(plain.len());
        let level = Compression::new(level);
        let mut gzip = GzEncoder::new(Vec::new(), level);
        let mut zlib = ZlibEncoder::new(Vec::new(), level);
        let mut from = 0;
        for cut in cuts {
            let part = &plain[from..cut];
            from = cut;
            match coding {
                Coding::Gzip => gzip.write_all(part).and_then(|()| gzip.flush()),
                _ => zlib.write_all(part).and_then(|()| zlib.flush()),
            }
            .expect("compress");
        }
        match coding {
            Coding::Gzip => gzip.finish(),
            _ => zlib.finish(),
        }
        .expect("compress")
    }

    /// `body` cut at the offsets in `cuts` (taken modulo its length).
    fn pieces<'a>(body: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
        at.sort_unstable();
        at.push(body.len());
        let mut from = 0;
        at.into_iter()
            .map(|to| {
                let piece = &body[from..to];
                from = to;
                piece
            })
            .collect()
    }

    /// Feeds `body` in `pieces` as the reader does (it stops at the first
    /// error), finishing it or dropping it mid-stream: what came out,
    /// whether it all went well, and the most one `out` call was handed.
    fn run(coding: Coding, body: &[u8], cuts: &[usize], finish: bool) -> (Vec<u8>, bool, usize) {
        let mut inflate = Inflate::new(coding).expect("an inflater");
        let (mut plain, mut largest) = (Vec::new(), 0);
        let mut out = |b: &[u8]| {
            largest = largest.max(b.len());
            plain.extend_from_slice(b);
        };
        for piece in pieces(body, cuts) {
            if inflate.feed(piece, &mut out).is_err() {
                drop(inflate);
                return (plain, false, largest);
            }
        }
        let ok = !finish || inflate.finish(&mut out).is_ok();
        drop(inflate);
        (plain, ok, largest)
    }

    fn coding() -> impl Strategy<Value = Coding> {
        prop_oneof![Just(Coding::Gzip), Just(Coding::Deflate)]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// A gzip or zlib body, flushed or not, cut anywhere, inflates to
        /// exactly its plaintext.
        #[test]
        fn a_body_in_any_pieces_inflates_to_its_plaintext(
            coding in coding(),
            level in 0u32..=9,
            plain in plaintext(),
            flushes in prop::collection::vec(any::<usize>(), 0..8),
            cuts in prop::collection::vec(any::<usize>(), 0..40),
        ) {
            let body = compress(coding, level, &plain, &flushes);
            let (out, ok, largest) = run(coding, &body, &cuts, true);
            prop_assert!(ok);
            prop_assert_eq!(out, plain);
            prop_assert!(largest <= MOST_PER_CALL, "{}", largest);
        }

        /// Whatever bytes come (random, after a valid gzip or zlib header,
        /// or a valid body of a bomb with bytes flipped, cut or followed by
        /// junk), in any pieces, finished or dropped, nothing panics and no
        /// `out` call is handed more than one step's worth.
        #[test]
        fn hostile_bytes_never_panic_and_come_out_in_bounded_steps(
            coding in coding(),
            start in 0u8..4,
            noise in prop::collection::vec(any::<u8>(), 0..2048),
            flips in prop::collection::vec((any::<usize>(), 1u8..=255), 0..4),
            cut in any::<usize>(),
            cuts in prop::collection::vec(any::<usize>(), 0..16),
            finish in any::<bool>(),
        ) {
            let mut body = match start {
                0 => Vec::new(),
                1 => vec![0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0xff],
                2 => vec![0x78, 0x9c],
                // A bomb: 4 MiB of one byte, about 4 KiB compressed.
                _ => compress(coding, 9, &vec![b'a'; 4 << 20], &[]),
            };
            if start == 3 {
                for (at, x) in &flips {
                    let at = at % body.len();
                    body[at] ^= x;
                }
                body.truncate(cut % (body.len() + 1));
                body.extend_from_slice(&noise[..noise.len().min(16)]);
            } else {
                body.extend_from_slice(&noise);
            }
            let (_, _, largest) = run(coding, &body, &cuts, finish);
            prop_assert!(largest <= MOST_PER_CALL, "{}", largest);
        }
    }
}
