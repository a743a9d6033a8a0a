//! brotli: its bodies, windows and budget.

use std::io::Write;

use super::*;

/// `plain` in brotli at `quality` with a window of 2^`lgwin` bytes, the
/// compressor flushed after every `every` bytes (never when 0).
pub(super) fn br(plain: &[u8], quality: u32, lgwin: u32, every: usize) -> Vec<u8> {
    let mut e = ::brotli::CompressorWriter::new(Vec::new(), 4096, quality, lgwin);
    let pieces = plain.chunks(if every == 0 {
        plain.len().max(1)
    } else {
        every
    });
    for piece in pieces {
        e.write_all(piece).expect("compress");
        if every > 0 {
            e.flush().expect("flush");
        }
    }
    e.into_inner()
}

#[test]
fn a_flushed_brotli_event_comes_out_with_its_own_frame() {
    let mut e = ::brotli::CompressorWriter::new(Vec::new(), 4096, 5, 22);
    let mut inflate = Inflate::new(Coding::Brotli).expect("a decoder");
    let mut sent = 0;
    for i in 0..50 {
        let event = format!("data: {{\"i\":{i}}}\n\n");
        e.write_all(event.as_bytes()).expect("compress");
        e.flush().expect("flush");
        let frame = e.get_ref()[sent..].to_vec();
        sent += frame.len();
        let mut out = Vec::new();
        inflate
            .feed(&frame, &mut |b| out.extend_from_slice(b))
            .expect("decode");
        assert_eq!(out, event.as_bytes(), "event {i}");
    }
}

#[test]
fn corrupt_cut_trailing_or_large_window_brotli_fails_without_panicking() {
    let plain = text(200);
    broken_variants_fail(Coding::Brotli, &br(&plain, 5, 22, 0));
    // A large-window stream (up to 1 GiB of window, never used over HTTP)
    // is refused, not decoded into a ring buffer that large.
    let params = ::brotli::enc::BrotliEncoderParams {
        large_window: true,
        lgwin: 26,
        quality: 5,
        ..Default::default()
    };
    let mut large = Vec::new();
    ::brotli::BrotliCompress(&mut &plain[..], &mut large, &params).expect("compress");
    assert!(!inflate(Coding::Brotli, &large, 64).1, "a large window");
}

#[test]
fn a_brotli_decoder_holds_its_window_and_no_more() {
    // 12 MiB of events that do not repeat within a small window.
    let plain: Vec<u8> = (0..300_000u64)
        .flat_map(|i| {
            let n = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
            format!("data: {{\"n\":{n},\"i\":{i}}}\n\n").into_bytes()
        })
        .collect();
    for (lgwin, most) in [(16, 200 * 1024), (22, (4 << 20) + 300 * 1024)] {
        let body = br(&plain, 4, lgwin, 64 * 1024);
        let largest = most_held(Coding::Brotli, &body, plain.len());
        assert!(
            ((1 << lgwin)..=most).contains(&largest),
            "window 2^{lgwin}: held {largest} bytes"
        );
    }
}

/// A brotli stream whose decoder outgrows the budget is read no further,
/// and what it held is given back.
#[test]
fn a_brotli_decoder_that_outgrows_the_budget_stops() {
    let budget: &'static Budget = Box::leak(Box::new(Budget::new(512 * 1024)));
    let plain = text(100_000);
    let body = br(&plain, 4, 22, 16 * 1024);
    let mut inflate = Inflate::within(Coding::Brotli, budget)
        .expect("room")
        .expect("a decoder");
    let mut total = 0;
    let stopped = body
        .chunks(1024)
        .map(|piece| inflate.feed(piece, &mut |b| total += b.len()))
        .find_map(Result::err);
    assert!(
        matches!(stopped, Some(InflateError::Budget(Busy))),
        "{stopped:?}"
    );
    assert!(total > 0 && total < plain.len());
    // Its ring buffer was refused before it was made: what it holds is
    // within the budget (but for its tables, made regardless).
    assert!(
        inflate.held() <= 512 * 1024 + 64 * 1024,
        "{}",
        inflate.held()
    );
    drop(inflate);
    assert_eq!(budget.held(), 0, "all given back");
}

/// A hostile brotli stream (a 16 MiB window, one metablock as long, a
/// copy of one byte) against a budget with 1 MiB left: the ring buffer the
/// decoder would grow past it is refused before it is allocated, and the
/// body is read no further; every byte charged is given back.
#[test]
fn a_wide_brotli_window_is_refused_before_it_is_allocated() {
    let budget: &'static Budget = Box::leak(Box::new(Budget::new(1 << 20)));
    let body = br(&vec![b'a'; 32 << 20], 5, 24, 0);
    for piece in [STEP, body.len()] {
        let mut inflate = Inflate::within(Coding::Brotli, budget)
            .expect("room")
            .expect("a decoder");
        let mut total = 0;
        let stopped = body
            .chunks(piece)
            .map(|piece| inflate.feed(piece, &mut |b| total += b.len()))
            .find_map(Result::err);
        assert!(
            matches!(
                stopped,
                Some(InflateError::Budget(Busy) | InflateError::Bomb)
            ),
            "{stopped:?}"
        );
        assert!(
            inflate.held() <= (1 << 20) + 64 * 1024,
            "{}",
            inflate.held()
        );
        assert!(total <= 2 << 20, "{total}");
        drop(inflate);
        assert_eq!(budget.held(), 0, "all given back");
    }
}
