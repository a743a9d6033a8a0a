//! The memory all decoders may hold at once, across the process.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

/// Memory the gzip and deflate decoders hold, at most, across the process
/// (bytes): 40 MiB, about 500 at once, each holding about 80 KiB (flate2's
/// window and buffers) for as long as it lives. Whole bodies hold a decoder
/// only while they arrive; streams for their whole length. A compressed
/// response that finds its budget spent is timed but not read, and counted
/// (`unparsed_encoding`).
pub static FLATE: Budget = Budget::new(40 * 1024 * 1024);

/// Memory the brotli and zstd decoders hold, at most, across the process
/// (bytes): 64 MiB. Each holds what its stream's window makes it hold: a
/// brotli decoder its ring buffer, grown with the stream up to its window
/// (16 MiB at most), charged before it is allocated (one the budget cannot
/// hold is refused, and the body read no further); a zstd decoder its
/// frame's window (8 MiB at most), charged once the step that started the
/// frame is done. A budget of its own, so that a few wide windows cannot
/// leave gzip responses unread.
pub static WINDOWED: Budget = Budget::new(64 * 1024 * 1024);

/// A cap on the bytes decoders hold at once.
#[derive(Debug)]
pub struct Budget {
    held: AtomicUsize,
    most: usize,
}

/// The budget cannot hold what a decoder needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the decoders' memory budget is spent")]
pub struct Busy;

impl Budget {
    /// At most `most` bytes held at once.
    pub const fn new(most: usize) -> Self {
        Self {
            held: AtomicUsize::new(0),
            most,
        }
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Relaxed)
    }

    /// Takes `bytes` from the budget, if it has them.
    pub(super) fn reserve(&'static self, bytes: usize) -> Result<Charge, Busy> {
        self.grow(bytes)?;
        Ok(Charge {
            budget: self,
            bytes,
        })
    }

    /// Takes `by` more bytes, past the cap if need be: for allocations a
    /// decoder cannot do without (brotli's tables, a few hundred KiB).
    pub(super) fn force(&self, by: usize) {
        self.held.fetch_add(by, Relaxed);
    }

    /// Gives back `by` bytes.
    pub(super) fn release(&self, by: usize) {
        self.held.fetch_sub(by, Relaxed);
    }

    /// Takes `by` more bytes, if the budget has them.
    pub(super) fn grow(&self, by: usize) -> Result<(), Busy> {
        self.held
            .fetch_update(Relaxed, Relaxed, |n| {
                n.checked_add(by).filter(|&after| after <= self.most)
            })
            .map(drop)
            .map_err(|_| Busy)
    }
}

/// What one decoder holds of a [`Budget`], given back when it is dropped.
#[derive(Debug)]
pub(super) struct Charge {
    budget: &'static Budget,
    bytes: usize,
}

impl Charge {
    /// The decoder holds `bytes` now. Growth the budget cannot hold is
    /// refused (the charge stays as it was); shrinking always succeeds.
    pub(super) fn resize(&mut self, bytes: usize) -> Result<(), Busy> {
        if bytes > self.bytes {
            self.budget.grow(bytes - self.bytes)?;
        } else {
            self.budget.held.fetch_sub(self.bytes - bytes, Relaxed);
        }
        self.bytes = bytes;
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.held.fetch_sub(self.bytes, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(most: usize) -> &'static Budget {
        Box::leak(Box::new(Budget::new(most)))
    }

    #[test]
    fn charges_are_held_until_dropped_and_never_past_the_cap() {
        let budget = budget(100);
        let a = budget.reserve(60).expect("room");
        assert_eq!(budget.reserve(41).err(), Some(Busy));
        let mut b = budget.reserve(40).expect("room");
        assert_eq!(budget.held(), 100);
        assert_eq!(b.resize(41), Err(Busy));
        assert_eq!(budget.held(), 100, "a refused growth takes nothing");
        b.resize(10).expect("shrinking");
        assert_eq!(budget.held(), 70);
        b.resize(40).expect("room again");
        drop(a);
        assert_eq!(budget.held(), 40);
        drop(b);
        assert_eq!(budget.held(), 0);
        assert_eq!(budget.reserve(usize::MAX).err(), Some(Busy));
    }

    #[test]
    fn threads_racing_never_hold_more_than_the_cap() {
        let budget = budget(1000);
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        if let Ok(mut charge) = budget.reserve(100 + i % 200) {
                            assert!(budget.held() <= 1000);
                            let _ = charge.resize(300);
                            assert!(budget.held() <= 1000);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("no panic");
        }
        assert_eq!(budget.held(), 0);
    }
}
