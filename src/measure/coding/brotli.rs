//! The `br` decoder: brotli-decompressor (pure Rust, Dropbox's port of
//! Google's decoder), driven one step at a time, its output handed on a
//! buffer at a time, and its memory counted.
//!
//! A brotli stream declares a window of up to 16 MiB, which its decoder
//! holds as a ring buffer grown to what the stream has produced so far: a
//! long stream can hold the whole window, two hundred times a gzip
//! decoder's. Every allocation goes through [`Counted`], so the decoder's
//! memory is known after each step and charged to the process-wide budget.
//! Large-window streams (an extension, up to 1 GiB, that HTTP never uses)
//! are refused as corrupt.

use std::io;

use super::{corrupt, OUT};
use brotli_decompressor::{
    Allocator, BrotliDecompressStream, BrotliResult, BrotliState, SliceWrapper, StandardAlloc,
};

/// An allocator that counts the bytes it has handed out and not taken
/// back. brotli's state holds three (for bytes, for `u32`s and for Huffman
/// tables); the decoder holds their sum. Memory the decoder dropped rather
/// than freed would stay counted: an overcount, never an undercount.
#[derive(Debug, Default)]
pub(super) struct Counted {
    bytes: usize,
}

impl<T: Clone + Default> Allocator<T> for Counted {
    type AllocatedMemory = <StandardAlloc as Allocator<T>>::AllocatedMemory;

    fn alloc_cell(&mut self, len: usize) -> Self::AllocatedMemory {
        self.bytes = self
            .bytes
            .saturating_add(len.saturating_mul(std::mem::size_of::<T>()));
        StandardAlloc::default().alloc_cell(len)
    }

    fn free_cell(&mut self, data: Self::AllocatedMemory) {
        let len = data.slice().len();
        self.bytes = self
            .bytes
            .saturating_sub(len.saturating_mul(std::mem::size_of::<T>()));
    }
}

/// One response's brotli decoder.
pub(super) struct Brotli {
    state: BrotliState<Counted, Counted, Counted>,
    out: Box<[u8]>,
    total_out: usize,
    /// The compressed stream has ended; any byte after it is an error.
    done: bool,
}

impl Brotli {
    pub(super) fn new() -> Self {
        // `new_strict`: large-window streams are refused.
        let state =
            BrotliState::new_strict(Counted::default(), Counted::default(), Counted::default());
        Self {
            state,
            out: vec![0; OUT].into_boxed_slice(),
            total_out: 0,
            done: false,
        }
    }

    /// Bytes this decoder holds: itself, its output buffer, and what its
    /// state has allocated (ring buffer, Huffman tables, context maps).
    pub(super) fn held(&self) -> usize {
        let state = &self.state;
        std::mem::size_of::<Self>()
            + OUT
            + state.alloc_u8.bytes
            + state.alloc_u32.bytes
            + state.alloc_hc.bytes
    }

    /// Decodes `input`, the body's next compressed bytes, handing the
    /// output to `out` at most [`OUT`] bytes at a time. An error from `out`
    /// stops the decoding and is returned.
    pub(super) fn decode<E: From<io::Error>>(
        &mut self,
        input: &[u8],
        out: &mut dyn FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if input.is_empty() {
            return Ok(());
        }
        if self.done {
            return Err(corrupt("bytes after the end of the brotli stream").into());
        }
        let (mut available_in, mut input_offset) = (input.len(), 0);
        loop {
            let (mut available_out, mut output_offset) = (self.out.len(), 0);
            let result = BrotliDecompressStream(
                &mut available_in,
                &mut input_offset,
                input,
                &mut available_out,
                &mut output_offset,
                &mut self.out,
                &mut self.total_out,
                &mut self.state,
            );
            if output_offset > 0 {
                out(&self.out[..output_offset])?;
            }
            match result {
                BrotliResult::NeedsMoreOutput => {}
                BrotliResult::NeedsMoreInput => return Ok(()),
                BrotliResult::ResultSuccess => {
                    self.done = true;
                    return match available_in {
                        0 => Ok(()),
                        _ => Err(corrupt("bytes after the end of the brotli stream").into()),
                    };
                }
                BrotliResult::ResultFailure => return Err(corrupt("not a brotli stream").into()),
            }
        }
    }

    /// The body ended: an error unless the compressed stream did too.
    pub(super) fn finish(&self) -> Result<(), io::Error> {
        match self.done {
            true => Ok(()),
            false => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the body ended before its brotli stream",
            )),
        }
    }
}
