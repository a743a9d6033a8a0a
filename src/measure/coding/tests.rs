use std::io::Write;

use flate2::{
    write::{GzEncoder, ZlibEncoder},
    Compression,
};
use http::{HeaderMap, HeaderValue};

mod brotli;
mod zstd;

pub(crate) use self::zstd::ZstdEncoder;
use self::{
    brotli::br,
    zstd::{zst, Flush},
};
use super::{
    decode_whole, Budget, Busy, Coding, Inflate, InflateError, Unsupported, ALLOWANCE, FLATE_HELD,
    OUT, RATIO, STEP,
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
        (&["zstd"], Ok(Coding::Zstd)),
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
        (
            Coding::Zstd,
            zst(&vec![b'a'; 64 << 20], 19, 23, Flush::Never),
            OUT,
        ),
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

/// `body`, a valid `coding` body, cut, corrupted, followed by junk, and
/// gzip said to be `coding`: each fails without panicking.
fn broken_variants_fail(coding: Coding, body: &[u8]) {
    assert!(
        !inflate(coding, &body[..body.len() / 2], 64).1,
        "{coding:?} cut"
    );
    let mut corrupt = body.to_vec();
    for b in corrupt.iter_mut().skip(6).step_by(5) {
        *b ^= 0x5a;
    }
    assert!(!inflate(coding, &corrupt, 64).1, "{coding:?} corrupt");
    let gzipped = gzip(&text(200));
    assert!(
        !inflate(coding, &gzipped, 64).1,
        "gzip said to be {coding:?}"
    );
    let mut trailing = body.to_vec();
    trailing.extend_from_slice(b"junk");
    for piece in [64, trailing.len()] {
        assert!(
            !inflate(coding, &trailing, piece).1,
            "{coding:?} junk after, {piece}"
        );
    }
}

/// Decodes `body` in 4 KiB pieces: the most its decoder held meanwhile,
/// after checking that it decoded to `len` bytes.
fn most_held(coding: Coding, body: &[u8], len: usize) -> usize {
    let mut inflate = Inflate::new(coding).expect("a decoder");
    let (mut largest, mut total) = (0, 0);
    for piece in body.chunks(4096) {
        inflate
            .feed(piece, &mut |b| total += b.len())
            .expect("decode");
        largest = largest.max(inflate.held());
    }
    inflate.finish(&mut |b| total += b.len()).expect("whole");
    assert_eq!(total, len, "{coding:?}");
    largest
}

/// A brotli decoder holds what its stream's window makes it hold: a
/// small window little, a 4 MiB one up to 4 MiB once the stream has
/// produced that much; and no more as the stream goes on.
#[test]
fn brotli_and_zstd_bodies_decode_whole_in_any_pieces() {
    let plain = text(500);
    let mut bodies = Vec::new();
    for (quality, lgwin) in [(0, 10), (4, 16), (5, 22), (11, 24)] {
        for every in [0, 100] {
            let body = br(&plain, quality, lgwin, every);
            bodies.push((
                Coding::Brotli,
                format!("q{quality} w{lgwin} every {every}"),
                body,
            ));
        }
    }
    for (level, log) in [(1, 10), (3, 17), (19, 23)] {
        for flush in [Flush::Never, Flush::Every(100), Flush::Frames(333)] {
            let body = zst(&plain, level, log, flush);
            bodies.push((
                Coding::Zstd,
                format!("level {level} 2^{log} {flush:?}"),
                body,
            ));
        }
    }
    for (coding, how, body) in bodies {
        for piece in [1, 7, STEP + 1, 4096, body.len()] {
            let decoded = inflate(coding, &body, piece);
            assert_eq!(
                decoded,
                (plain.clone(), true),
                "{coding:?} {how} piece {piece}"
            );
        }
    }
    let empty = [
        (Coding::Brotli, br(b"", 5, 22, 0)),
        (Coding::Zstd, zst(b"", 3, 20, Flush::Never)),
    ];
    for (coding, body) in empty {
        assert_eq!(inflate(coding, &body, 3), (vec![], true), "{coding:?}");
    }
}

/// An empty body (a `204`'s, a `HEAD`'s) said to be compressed holds no
/// stream to end: nothing read, nothing wrong.
#[test]
fn an_empty_compressed_body_is_no_error() {
    for coding in [Coding::Gzip, Coding::Deflate, Coding::Brotli, Coding::Zstd] {
        let mut inflate = Inflate::new(coding).expect("a decoder");
        let mut out = Vec::new();
        inflate
            .feed(b"", &mut |b| out.extend_from_slice(b))
            .expect("nothing");
        assert!(
            inflate.finish(&mut |b| out.extend_from_slice(b)).is_ok(),
            "{coding:?}"
        );
        assert!(out.is_empty());
    }
}

/// A whole small body (a request's copy) decodes to its plaintext if it
/// decodes whole within the cap, else to nothing.
#[test]
fn a_whole_body_decodes_within_its_cap_or_not_at_all() {
    let plain = text(40);
    let bodies = [
        (Coding::Identity, plain.clone()),
        (Coding::Gzip, gzip(&plain)),
        (Coding::Deflate, zlib(&plain)),
        (Coding::Brotli, br(&plain, 5, 22, 0)),
        (Coding::Zstd, zst(&plain, 3, 20, Flush::Never)),
    ];
    for (coding, body) in bodies {
        let whole = decode_whole(coding, body.clone(), plain.len());
        assert_eq!(whole.as_deref(), Some(&plain[..]), "{coding:?}");
        if coding != Coding::Identity {
            let short = decode_whole(coding, body.clone(), plain.len() - 1);
            assert_eq!(short, None, "{coding:?} past its cap");
            let cut = decode_whole(coding, body[..body.len() - 3].to_vec(), plain.len());
            assert_eq!(cut, None, "{coding:?} cut");
        }
    }
    // A bomb stops at the cap: a few bytes past it, not its 64 MiB.
    let bomb = zst(&vec![b'a'; 64 << 20], 19, 23, Flush::Never);
    assert_eq!(decode_whole(Coding::Zstd, bomb, 1 << 20), None);
}
