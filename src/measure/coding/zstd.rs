//! The `zstd` decoder: Facebook's libzstd (the reference decoder, built
//! from source and linked statically), driven one step at a time, its
//! output handed on a buffer at a time, and its memory read after each
//! step.
//!
//! Servers stream zstd two ways, and both are read event by event: one
//! frame flushed after each event (`ZSTD_e_flush`), or one whole frame per
//! event, one after another (AWS's streamed responses, as LiteLLM users
//! found). libzstd hands on what it has decoded at once; a pure-Rust
//! decoder (ruzstd) holds back the last window's worth until a frame ends,
//! which would time a one-frame stream's events at its end.
//!
//! A frame declares a window, which the decoder holds: up to 8 MiB here
//! (RFC 8878 §3.1.1.1.2 asks HTTP decoders to support 8 MB and lets them
//! refuse more); a frame that asks for more is refused as corrupt.

use std::io;

use zstd_safe::{DCtx, DParameter, InBuffer, OutBuffer};

use super::{corrupt, ended, OUT};

/// The largest window accepted: 2^23 bytes (8 MiB).
const WINDOW_LOG_MAX: u32 = 23;

/// One response's zstd decoder.
pub(super) struct Zstd {
    dctx: DCtx<'static>,
    out: Box<[u8]>,
    /// The last frame has ended and all its output was handed on: the
    /// body may end here (or another frame may follow).
    ended: bool,
}

impl Zstd {
    pub(super) fn new() -> Self {
        let mut dctx = DCtx::create();
        // Only fails for a value out of range, which this is not; then
        // libzstd's own limit (2^27) would stand.
        let _ = dctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG_MAX));
        Self {
            dctx,
            out: vec![0; OUT].into_boxed_slice(),
            ended: false,
        }
    }

    /// Bytes this decoder holds: itself, its output buffer, and libzstd's
    /// context with its window and buffers.
    pub(super) fn held(&self) -> usize {
        std::mem::size_of::<Self>() + OUT + self.dctx.sizeof()
    }

    /// Decodes `input`, the body's next compressed bytes, handing the
    /// output to `out` at most [`OUT`] bytes at a time. An error from `out`
    /// stops the decoding and is returned.
    pub(super) fn decode<E: From<io::Error>>(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut at = 0;
        loop {
            let mut source = InBuffer::around(&input[at..]);
            let mut target = OutBuffer::around(&mut self.out[..]);
            let hint = self
                .dctx
                .decompress_stream(&mut target, &mut source)
                .map_err(|code| corrupt(zstd_safe::get_error_name(code)))?;
            let (read, written) = (source.pos(), target.pos());
            at += read;
            if written > 0 {
                out(&self.out[..written])?;
            }
            // 0: a frame ended and all of it was handed on.
            self.ended = hint == 0;
            if at == input.len() && written < OUT {
                // The input is used up, and what it decoded handed on
                // (a full buffer may have more behind it).
                return Ok(());
            }
            if read == 0 && written == 0 {
                // No progress: cannot happen with room in the buffer;
                // guarded against regardless, never to loop.
                return Err(corrupt("the zstd decoder made no progress").into());
            }
        }
    }

    /// The body ended: an error unless its last frame did too.
    pub(super) fn finish(&self) -> Result<(), io::Error> {
        ended(self.ended, "the body ended inside a zstd frame")
    }
}
