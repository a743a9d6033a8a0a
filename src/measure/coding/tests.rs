use std::io::Write;

use flate2::{
    write::{GzEncoder, ZlibEncoder},
    Compression,
};
use http::{HeaderMap, HeaderValue};

use super::{
    brotli::OUT, Budget, Busy, Coding, Inflate, InflateError, Unsupported, ALLOWANCE, FLATE_HELD,
    RATIO, STEP,
};

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
        (&["br"], Ok(Coding::Brotli)),
        (&["BR"], Ok(Coding::Brotli)),
        (&["br, gzip"], Err(Unsupported)),
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
fn a_budget_caps_what_the_decoders_hold_at_once() {
    let budget: &'static Budget = Box::leak(Box::new(Budget::new(2 * FLATE_HELD)));
    let a = Inflate::within(Coding::Gzip, budget).expect("room");
    let b = Inflate::within(Coding::Deflate, budget).expect("room");
    assert!(a.is_some() && b.is_some());
    assert_eq!(budget.held(), 2 * FLATE_HELD);
    assert_eq!(Inflate::within(Coding::Gzip, budget).err(), Some(Busy));
    assert_eq!(Inflate::within(Coding::Brotli, budget).err(), Some(Busy));
    // identity takes nothing, even with the budget spent.
    assert!(matches!(
        Inflate::within(Coding::Identity, budget),
        Ok(None)
    ));
    drop(a);
    assert_eq!(budget.held(), FLATE_HELD);
    let c = Inflate::within(Coding::Gzip, budget).expect("room after one went");
    drop((b, c));
    assert_eq!(budget.held(), 0);
}

/// A body that inflates a thousandfold (a bomb) comes out in bounded
/// pieces (a gzip step's worth; brotli's [`OUT`]), and only until it passes
/// its bound; then it is read no further. One that inflates as text does
/// is read whole.
#[test]
fn a_bomb_is_read_no_further_than_its_bound() {
    let bombs = [
        (Coding::Gzip, gzip(&vec![b'a'; 16 << 20]), STEP * 1100),
        (Coding::Brotli, br(&vec![b'a'; 64 << 20], 5, 24, 0), OUT),
    ];
    for (coding, body, most) in bombs {
        let mut inflater = Inflate::new(coding).expect("a decoder");
        let (mut total, mut largest) = (0u64, 0usize);
        let mut out = |b: &[u8]| {
            total += b.len() as u64;
            largest = largest.max(b.len());
        };
        assert!(matches!(
            inflater.feed(&body, &mut out),
            Err(InflateError::Bomb)
        ));
        let bound = ALLOWANCE + RATIO * body.len() as u64;
        assert!(total > 0 && total <= bound, "{coding:?}: {total}");
        assert!(largest <= most, "{coding:?}: {largest}");
    }

    // 8 MiB of text, 5 to 10 times smaller compressed: read whole.
    let plain = text(200_000);
    assert!(plain.len() > 4 * ALLOWANCE as usize);
    assert_eq!(
        inflate(Coding::Gzip, &gzip(&plain), 4096),
        (plain.clone(), true)
    );
    assert_eq!(
        inflate(Coding::Brotli, &br(&plain, 5, 22, 0), 4096),
        (plain, true)
    );
}

/// `plain` in brotli at `quality` with a window of 2^`lgwin` bytes, the
/// compressor flushed after every `every` bytes (never when 0).
fn br(plain: &[u8], quality: u32, lgwin: u32, every: usize) -> Vec<u8> {
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
fn brotli_bodies_decode_whole_in_any_pieces() {
    let plain = text(500);
    for (quality, lgwin) in [(0, 10), (4, 16), (5, 22), (11, 24)] {
        for every in [0, 100] {
            let body = br(&plain, quality, lgwin, every);
            for piece in [1, 7, STEP + 1, 4096, body.len()] {
                assert_eq!(
                    inflate(Coding::Brotli, &body, piece),
                    (plain.clone(), true),
                    "q{quality} w{lgwin} every {every} piece {piece}"
                );
            }
        }
    }
    assert_eq!(
        inflate(Coding::Brotli, &br(b"", 5, 22, 0), 3),
        (vec![], true)
    );
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
    let body = br(&plain, 5, 22, 0);
    assert!(
        !inflate(Coding::Brotli, &body[..body.len() / 2], 64).1,
        "cut"
    );
    let mut corrupt = body.clone();
    for b in corrupt.iter_mut().skip(3).step_by(5) {
        *b ^= 0x5a;
    }
    assert!(!inflate(Coding::Brotli, &corrupt, 64).1, "corrupt");
    assert!(
        !inflate(Coding::Brotli, &gzip(&plain), 64).1,
        "gzip said to be br"
    );
    let mut trailing = body.clone();
    trailing.extend_from_slice(b"junk");
    assert!(
        !inflate(Coding::Brotli, &trailing, 64).1,
        "bytes after the stream"
    );
    assert!(
        !inflate(Coding::Brotli, &trailing, trailing.len()).1,
        "in one piece"
    );

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

/// A brotli decoder holds what its stream's window makes it hold: a
/// small window little, a 4 MiB one up to 4 MiB once the stream has
/// produced that much; and no more as the stream goes on.
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
        let mut inflate = Inflate::new(Coding::Brotli).expect("a decoder");
        let (mut largest, mut total) = (0, 0);
        for piece in body.chunks(4096) {
            inflate
                .feed(piece, &mut |b| total += b.len())
                .expect("decode");
            largest = largest.max(inflate.held());
        }
        inflate.finish(&mut |b| total += b.len()).expect("whole");
        assert_eq!(total, plain.len());
        assert!(largest <= most, "window 2^{lgwin}: held {largest} bytes");
        assert!(
            largest >= (1 << lgwin),
            "window 2^{lgwin}: held {largest} bytes, not counted"
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
    assert!(budget.held() <= 512 * 1024);
    drop(inflate);
    assert_eq!(budget.held(), 0);
}
