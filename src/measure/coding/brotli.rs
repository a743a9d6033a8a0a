//! The `br` decoder: brotli-decompressor (pure Rust, Dropbox's port of
//! Google's decoder), driven one step at a time, its output handed on a
//! buffer at a time, and its memory charged to the budget as it allocates.
//!
//! A brotli stream declares a window of up to 16 MiB, which its decoder
//! holds as a ring buffer grown to what the stream has produced so far: a
//! long stream can hold the whole window, two hundred times a gzip
//! decoder's. Every allocation goes through [`Counted`], which charges it
//! to the decoders' budget before it is made, and refuses a ring buffer
//! the budget cannot hold (the decoder then fails, and the body is read no
//! further): a few hostile bytes cannot make it allocate 16 MiB first and
//! be counted after. Large-window streams (an extension, up to 1 GiB, that
//! HTTP never uses) are refused as corrupt.

use std::{
    io,
    panic::{catch_unwind, AssertUnwindSafe},
    sync::{
        atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed},
        Arc,
    },
};

use super::{budget::Budget, corrupt, ended, Busy, OUT};
use brotli_decompressor::{
    Allocator, BrotliDecompressStream, BrotliResult, BrotliState, SliceWrapper, StandardAlloc,
};

/// Byte allocations from this size up are ring buffers (the others, context
/// maps and modes, are at most 16 KiB), which the decoder checks and fails
/// on when refused; smaller ones, and the Huffman tables, it does not
/// check, so they are always made (and charged).
const RING: usize = 64 * 1024;

/// One decoder's memory: what its allocators hold, charged to `budget`
/// until they free it, or until the last of them is dropped.
#[derive(Debug)]
struct Account {
    bytes: AtomicUsize,
    budget: Option<&'static Budget>,
    /// A ring buffer was refused: the decoder's failure is the budget's.
    refused: AtomicBool,
}

impl Drop for Account {
    fn drop(&mut self) {
        if let Some(budget) = self.budget {
            budget.release(*self.bytes.get_mut());
        }
    }
}

/// brotli's allocator: the standard one, counting what it holds in the
/// decoder's [`Account`] and charging it to the budget. brotli's state
/// holds three (for bytes, for `u32`s and for Huffman tables), sharing one
/// account; memory the decoder dropped rather than freed is given back
/// when the account goes, with the state.
#[derive(Clone, Debug)]
pub(super) struct Counted(Arc<Account>);

impl<T: Clone + Default> Allocator<T> for Counted {
    type AllocatedMemory = <StandardAlloc as Allocator<T>>::AllocatedMemory;

    fn alloc_cell(&mut self, len: usize) -> Self::AllocatedMemory {
        let bytes = len.saturating_mul(std::mem::size_of::<T>());
        let account = &self.0;
        if let Some(budget) = account.budget {
            let ring = std::mem::size_of::<T>() == 1 && bytes >= RING;
            if !ring {
                budget.force(bytes);
            } else if budget.grow(bytes).is_err() {
                account.refused.store(true, Relaxed);
                return StandardAlloc::default().alloc_cell(0);
            }
        }
        account.bytes.fetch_add(bytes, Relaxed);
        StandardAlloc::default().alloc_cell(len)
    }

    fn free_cell(&mut self, data: Self::AllocatedMemory) {
        let bytes = data.slice().len().saturating_mul(std::mem::size_of::<T>());
        self.0.bytes.fetch_sub(bytes, Relaxed);
        if let Some(budget) = self.0.budget {
            budget.release(bytes);
        }
    }
}

/// One response's brotli decoder.
pub(super) struct Brotli {
    state: BrotliState<Counted, Counted, Counted>,
    account: Arc<Account>,
    out: Box<[u8]>,
    total_out: usize,
    /// The compressed stream has ended; any byte after it is an error.
    done: bool,
}

impl Brotli {
    /// A decoder whose allocations are charged to `budget` (none: the
    /// tests', counted only).
    pub(super) fn new(budget: Option<&'static Budget>) -> Self {
        let account = Arc::new(Account {
            bytes: AtomicUsize::new(0),
            budget,
            refused: AtomicBool::new(false),
        });
        let counted = Counted(account.clone());
        // `new_strict`: large-window streams are refused.
        let state = BrotliState::new_strict(counted.clone(), counted.clone(), counted);
        Self {
            state,
            account,
            out: vec![0; OUT].into_boxed_slice(),
            total_out: 0,
            done: false,
        }
    }

    /// Bytes the decoder holds besides its allocations: itself and its
    /// output buffer (charged by whoever made it).
    pub(super) fn fixed() -> usize {
        std::mem::size_of::<Self>()
            + std::mem::size_of::<BrotliState<Counted, Counted, Counted>>()
            + OUT
    }

    /// Bytes this decoder holds: [`Brotli::fixed`] and what its state has
    /// allocated (ring buffer, Huffman tables, context maps).
    #[cfg(test)]
    pub(super) fn held(&self) -> usize {
        Self::fixed() + self.account.bytes.load(Relaxed)
    }

    /// Decodes `input`, the body's next compressed bytes, handing the
    /// output to `out` at most [`OUT`] bytes at a time. An error from `out`
    /// stops the decoding and is returned.
    pub(super) fn decode<E: From<io::Error> + From<Busy>>(
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
            let consumed = input_offset;
            // A panic in the decoder (its slices are bounds-checked) must
            // not take the connection down: the body is read no further.
            let result = catch_unwind(AssertUnwindSafe(|| {
                BrotliDecompressStream(
                    &mut available_in,
                    &mut input_offset,
                    input,
                    &mut available_out,
                    &mut output_offset,
                    &mut self.out,
                    &mut self.total_out,
                    &mut self.state,
                )
            }))
            .map_err(|_| {
                super::PANICS.fetch_add(1, Relaxed);
                corrupt("the brotli decoder failed")
            })?;
            if output_offset > 0 {
                out(&self.out[..output_offset])?;
            }
            match result {
                BrotliResult::NeedsMoreOutput if output_offset == 0 && input_offset == consumed => {
                    // No progress: never seen; guarded against, never to loop.
                    return Err(corrupt("the brotli decoder made no progress").into());
                }
                BrotliResult::NeedsMoreOutput => {}
                BrotliResult::NeedsMoreInput => return Ok(()),
                BrotliResult::ResultSuccess => {
                    self.done = true;
                    return match available_in {
                        0 => Ok(()),
                        _ => Err(corrupt("bytes after the end of the brotli stream").into()),
                    };
                }
                BrotliResult::ResultFailure if self.account.refused.load(Relaxed) => {
                    return Err(Busy.into())
                }
                BrotliResult::ResultFailure => return Err(corrupt("not a brotli stream").into()),
            }
        }
    }

    /// The body ended: an error unless the compressed stream did too.
    pub(super) fn finish(&self) -> Result<(), io::Error> {
        ended(self.done, "the body ended before its brotli stream")
    }
}
