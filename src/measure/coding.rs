//! A response's content coding, undone on the copy the measurement reads.
//!
//! Remote APIs compress what their clients accept, and the official SDKs
//! accept compression: the OpenAI Python SDK's httpx sends
//! `Accept-Encoding: gzip, deflate` (and `br` too once the `brotli`
//! package is installed, as aiohttp's `speedups` extra does; httpx and
//! aiohttp add `zstd` once a zstd package is), and OpenAI answers a whole
//! (non-streamed) response compressed (a gzip one is among the recorded
//! fixtures; clients have reported brotli ones, and brotli streams from
//! OpenAI's own backend; LiteLLM's, zstd streams from AWS). Without this,
//! every such request would reach the metrics with no token counts. The
//! bytes the client gets are the upstream's, untouched; only the
//! measurement's copy is decoded. [`decode_whole`] does the same for a
//! request body's copy (OpenAI's Codex client sends zstd ones).
//!
//! The copy is decoded as it comes, in small steps, and each step's output
//! is handed on at once: an event is read at the arrival of the frame that
//! completed it (a server that flushes its compressor per event is timed
//! per event; one that does not is timed as its client can read it), and
//! whatever ratio a hostile body reaches, it is handed on in bounded
//! pieces and read no further than its bound. gzip (`gzip`, `x-gzip`,
//! several members), `deflate` (zlib, as RFC 9110 defines it), `br` and
//! `zstd` are decoded; anything else (`compress`, stacked codings) is left
//! unread and counted as before (`unparsed_encoding`). What the decoders
//! hold is capped across the process ([`FLATE`], [`WINDOWED`]).

mod brotli;
mod budget;
mod zstd;

use std::io::{self, Write};

use flate2::write::{MultiGzDecoder, ZlibDecoder};
use http::{header, HeaderMap};

use self::brotli::Brotli;
use self::budget::Charge;
pub use self::budget::{Budget, Busy, FLATE, WINDOWED};
use self::zstd::Zstd;

/// Compressed bytes decoded per step. deflate expands by at most about
/// 1,032×, so one step's output is at most about 264 KiB, whatever the
/// body; a usual step's is a few hundred bytes. brotli and zstd can
/// expand far more, so theirs is handed on [`OUT`] bytes at a time.
const STEP: usize = 256;

/// What a brotli or zstd step hands on per call, at most (bytes): however
/// far a few compressed bytes expand, the bomb bound is checked at least
/// this often.
const OUT: usize = 16 * 1024;

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

/// What a gzip or deflate decoder holds (bytes): flate2's 32 KiB window
/// and its state and buffers, measured at about 80 KiB.
const FLATE_HELD: usize = 80 * 1024;

/// A response's content coding, as far as the measurement is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// None (or only `identity`).
    Identity,
    /// `gzip` or `x-gzip`.
    Gzip,
    /// `deflate`: the zlib format.
    Deflate,
    /// `br`: brotli (RFC 7932).
    Brotli,
    /// `zstd`: Zstandard (RFC 8878).
    Zstd,
}

/// Panics caught in a decoder (a bug in it: the body was read no further,
/// the connection went on). Counted so that the fuzz targets, which must
/// see every panic, fail on one the proxy survives.
pub static PANICS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A coding the measurement does not undo: `compress`, an unknown one, or
/// several stacked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("content coding not decoded")]
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
                } else if token.eq_ignore_ascii_case("br") {
                    Self::Brotli
                } else if token.eq_ignore_ascii_case("zstd") {
                    Self::Zstd
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

/// Why a body's copy is decoded no further.
#[derive(Debug, thiserror::Error)]
pub enum InflateError {
    /// Corrupt, truncated, or bytes after the compressed stream's end.
    #[error("the body could not be decoded: {0}")]
    Corrupt(#[from] io::Error),
    /// It decoded past [`ALLOWANCE`] and [`RATIO`] times its compressed
    /// bytes.
    #[error("the body decodes to more than {RATIO} times its size")]
    Bomb,
    /// Its decoder grew past what the budget could hold.
    #[error(transparent)]
    Budget(#[from] Busy),
}

/// Decodes one response body's copy, step by step.
pub struct Inflate {
    decoder: Decoder,
    /// Compressed bytes taken and decoded bytes handed on so far.
    compressed: u64,
    inflated: u64,
    /// What it holds of a budget, if it was made within one.
    charge: Option<Charge>,
}

enum Decoder {
    Gzip(MultiGzDecoder<Vec<u8>>),
    Zlib(ZlibDecoder<Vec<u8>>),
    Brotli(Box<Brotli>),
    Zstd(Box<Zstd>),
}

impl std::fmt::Debug for Inflate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let coding = match self.decoder {
            Decoder::Gzip(_) => Coding::Gzip,
            Decoder::Zlib(_) => Coding::Deflate,
            Decoder::Brotli(_) => Coding::Brotli,
            Decoder::Zstd(_) => Coding::Zstd,
        };
        f.debug_struct("Inflate").field("coding", &coding).finish()
    }
}

impl Inflate {
    /// A decoder for `coding` outside any budget (the tests'); `None` for
    /// `identity`. The proxy's are made [`Inflate::budgeted`].
    #[cfg(test)]
    fn new(coding: Coding) -> Option<Self> {
        Self::with(coding, None).ok().flatten()
    }

    /// A decoder for `coding` within the process's budget for it
    /// ([`FLATE`] or [`WINDOWED`]); `Ok(None)` for `identity`, `Busy` when
    /// the budget cannot hold it.
    pub fn budgeted(coding: Coding) -> Result<Option<Self>, Busy> {
        let budget = match coding {
            Coding::Identity => return Ok(None),
            Coding::Gzip | Coding::Deflate => &FLATE,
            Coding::Brotli | Coding::Zstd => &WINDOWED,
        };
        Self::within(coding, budget)
    }

    /// A decoder for `coding` within `budget`; `Ok(None)` for `identity`,
    /// `Busy` when the budget cannot hold it.
    pub fn within(coding: Coding, budget: &'static Budget) -> Result<Option<Self>, Busy> {
        Self::with(coding, Some(budget))
    }

    fn with(coding: Coding, budget: Option<&'static Budget>) -> Result<Option<Self>, Busy> {
        let (decoder, fixed) = match coding {
            Coding::Identity => return Ok(None),
            Coding::Gzip => (Decoder::Gzip(MultiGzDecoder::new(Vec::new())), FLATE_HELD),
            Coding::Deflate => (Decoder::Zlib(ZlibDecoder::new(Vec::new())), FLATE_HELD),
            // Its allocations charge the budget themselves.
            Coding::Brotli => (
                Decoder::Brotli(Box::new(Brotli::new(budget))),
                Brotli::fixed(),
            ),
            Coding::Zstd => {
                let zstd = Zstd::new();
                let held = zstd.held();
                (Decoder::Zstd(Box::new(zstd)), held)
            }
        };
        let charge = budget.map(|b| b.reserve(fixed)).transpose()?;
        Ok(Some(Self {
            decoder,
            compressed: 0,
            inflated: 0,
            charge,
        }))
    }

    /// Bytes the decoder holds.
    #[cfg(test)]
    fn held(&self) -> usize {
        match &self.decoder {
            Decoder::Gzip(_) | Decoder::Zlib(_) => FLATE_HELD,
            Decoder::Brotli(b) => b.held(),
            Decoder::Zstd(z) => z.held(),
        }
    }

    /// Decodes `data`, the body's next compressed bytes, handing each
    /// step's output to `out` as soon as it is decoded.
    pub fn feed(&mut self, data: &[u8], out: &mut impl FnMut(&[u8])) -> Result<(), InflateError> {
        for step in data.chunks(STEP) {
            self.compressed += step.len() as u64;
            let (inflated, compressed) = (&mut self.inflated, self.compressed);
            let mut pass_on = |plain: &[u8]| pass(inflated, compressed, plain, out);
            // brotli and zstd hand their output on as they go. brotli
            // charges what it allocates as it does; libzstd allocates its
            // frame's window when the frame starts (malloc'd, touched as it
            // fills), charged once the step that started it is done.
            match &mut self.decoder {
                Decoder::Brotli(b) => b.decode(step, &mut pass_on)?,
                Decoder::Zstd(z) => {
                    z.decode(step, &mut pass_on)?;
                    if let Some(charge) = &mut self.charge {
                        charge.resize(z.held())?;
                    }
                }
                Decoder::Gzip(d) => flate(d, step)?,
                Decoder::Zlib(d) => flate(d, step)?,
            }
            self.drain(out)?;
        }
        Ok(())
    }

    /// The body ended: hands on what is left, and fails if the compressed
    /// stream did not end (the body was cut).
    pub fn finish(&mut self, out: &mut impl FnMut(&[u8])) -> Result<(), InflateError> {
        if self.compressed == 0 {
            // An empty body (a `204`, a `HEAD`'s) holds no stream to end.
            return Ok(());
        }
        let done = match &mut self.decoder {
            Decoder::Gzip(d) => d.try_finish(),
            Decoder::Zlib(d) => d.try_finish(),
            Decoder::Brotli(b) => b.finish(),
            Decoder::Zstd(z) => z.finish(),
        };
        self.drain(out)?;
        Ok(done?)
    }

    /// Hands on what the last flate step inflated.
    fn drain(&mut self, out: &mut impl FnMut(&[u8])) -> Result<(), InflateError> {
        let buffer = match &mut self.decoder {
            Decoder::Gzip(d) => d.get_mut(),
            Decoder::Zlib(d) => d.get_mut(),
            Decoder::Brotli(_) | Decoder::Zstd(_) => return Ok(()),
        };
        let passed = pass(&mut self.inflated, self.compressed, buffer, out);
        buffer.clear();
        if buffer.capacity() > KEEP {
            buffer.shrink_to(KEEP);
        }
        passed
    }
}

/// A whole small body (a request's captured copy) decoded as `coding`
/// says: `None` if it does not decode whole, decodes to more than `cap`
/// bytes, or the budget cannot hold its decoder. Decoding stops as soon as
/// the output passes `cap`.
pub fn decode_whole(coding: Coding, body: Vec<u8>, cap: usize) -> Option<Vec<u8>> {
    let mut inflate = match Inflate::budgeted(coding) {
        Ok(Some(inflate)) => inflate,
        Ok(None) => return Some(body),
        Err(Busy) => return None,
    };
    let mut plain = Vec::new();
    let over = std::cell::Cell::new(false);
    let mut keep = |b: &[u8]| match plain.len() + b.len() <= cap {
        true => plain.extend_from_slice(b),
        false => over.set(true),
    };
    for piece in body.chunks(4 * STEP) {
        if inflate.feed(piece, &mut keep).is_err() || over.get() {
            return None;
        }
    }
    inflate.finish(&mut keep).ok()?;
    (!over.get()).then_some(plain)
}

/// Writes `step` to a flate decoder and flushes it, whose output
/// [`Inflate::drain`] then hands on.
fn flate(decoder: &mut dyn Write, step: &[u8]) -> Result<(), InflateError> {
    decoder.write_all(step)?;
    decoder.flush()?;
    Ok(())
}

/// A body's copy that cannot be decoded.
fn corrupt(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// `Ok` if the compressed stream `ended`, else the error of a body cut
/// short of it.
fn ended(ended: bool, what: &'static str) -> io::Result<()> {
    match ended {
        true => Ok(()),
        false => Err(io::Error::new(io::ErrorKind::UnexpectedEof, what)),
    }
}

/// Hands `plain` on to `out`, unless the body, `inflated` bytes so far from
/// `compressed`, has decoded past its bound ([`ALLOWANCE`], [`RATIO`]).
fn pass(
    inflated: &mut u64,
    compressed: u64,
    plain: &[u8],
    out: &mut impl FnMut(&[u8]),
) -> Result<(), InflateError> {
    *inflated += plain.len() as u64;
    if *inflated > ALLOWANCE + RATIO * compressed {
        return Err(InflateError::Bomb);
    }
    if !plain.is_empty() {
        out(plain);
    }
    Ok(())
}

#[cfg(test)]
mod props;
#[cfg(test)]
pub(crate) mod tests;
