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

use std::io::{self, Write};

use flate2::write::{MultiGzDecoder, ZlibDecoder};
use http::{header, HeaderMap};

/// Compressed bytes inflated per step. deflate expands by at most about
/// 1,032×, so one step's output is at most about 264 KiB, whatever the
/// body; a usual step's is a few hundred bytes.
const STEP: usize = 256;

/// Capacity of the output buffer kept between steps (bytes): a burst's
/// larger buffer is given back.
const KEEP: usize = 16 * 1024;

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

/// The body could not be inflated (corrupt, truncated, or bytes after a
/// zlib stream's end).
#[derive(Debug, thiserror::Error)]
#[error("the body could not be inflated: {0}")]
pub struct InflateError(#[from] io::Error);

/// Inflates one response body's copy, step by step.
pub struct Inflate {
    decoder: Decoder,
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
    /// An inflater for `coding`; `None` for `identity`.
    pub fn new(coding: Coding) -> Option<Self> {
        let decoder = match coding {
            Coding::Identity => return None,
            Coding::Gzip => Decoder::Gzip(MultiGzDecoder::new(Vec::new())),
            Coding::Deflate => Decoder::Zlib(ZlibDecoder::new(Vec::new())),
        };
        Some(Self { decoder })
    }

    /// Inflates `data`, the body's next compressed bytes, handing each
    /// step's output to `out` as soon as it is inflated.
    pub fn feed(&mut self, data: &[u8], out: &mut impl FnMut(&[u8])) -> Result<(), InflateError> {
        for step in data.chunks(STEP) {
            match &mut self.decoder {
                Decoder::Gzip(d) => {
                    d.write_all(step)?;
                    d.flush()?;
                }
                Decoder::Zlib(d) => {
                    d.write_all(step)?;
                    d.flush()?;
                }
            }
            self.drain(out);
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
        self.drain(out);
        Ok(done?)
    }

    fn drain(&mut self, out: &mut impl FnMut(&[u8])) {
        let buffer = match &mut self.decoder {
            Decoder::Gzip(d) => d.get_mut(),
            Decoder::Zlib(d) => d.get_mut(),
        };
        if !buffer.is_empty() {
            out(buffer);
            buffer.clear();
        }
        if buffer.capacity() > KEEP {
            buffer.shrink_to(KEEP);
        }
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

    use super::{Coding, Inflate, Unsupported, STEP};

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

    /// A body that inflates a thousandfold comes out in steps, never all at
    /// once.
    #[test]
    fn one_step_inflates_to_a_bounded_size() {
        let body = gzip(&vec![b'a'; 16 * 1024 * 1024]);
        let mut inflate = Inflate::new(Coding::Gzip).expect("an inflater");
        let (mut total, mut largest) = (0usize, 0usize);
        let mut out = |b: &[u8]| {
            total += b.len();
            largest = largest.max(b.len());
        };
        inflate.feed(&body, &mut out).expect("inflate");
        inflate.finish(&mut out).expect("finish");
        assert_eq!(total, 16 * 1024 * 1024);
        assert!(largest <= STEP * 1100, "{largest}");
    }
}
