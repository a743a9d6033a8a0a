use std::io::Write;

use flate2::{
    write::{GzEncoder, ZlibEncoder},
    Compression,
};
use proptest::prelude::*;

use super::{tests::ZstdEncoder, Coding, Inflate, OUT};

/// The most one `out` call may be handed (bytes): for gzip and deflate one
/// step's worth of the densest deflate, with room to spare; for brotli and
/// zstd their output buffer's.
fn most_per_call(coding: Coding) -> usize {
    match coding {
        Coding::Brotli | Coding::Zstd => OUT,
        _ => 300 * 1024,
    }
}

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
    if coding == Coding::Zstd {
        // Levels 1 to 10, windows 2^10 to 2^19.
        let mut e = ZstdEncoder::new(level as i32 + 1, 10 + level);
        let (mut body, mut from) = (Vec::new(), 0);
        for cut in cuts {
            body.extend(e.write(&plain[from..cut]));
            body.extend(e.flush(false));
            from = cut;
        }
        body.extend(e.flush(true));
        return body;
    }
    let flate = Compression::new(level);
    let mut gzip = GzEncoder::new(Vec::new(), flate);
    let mut zlib = ZlibEncoder::new(Vec::new(), flate);
    // brotli's qualities 0 to 9 (10 and 11 are too slow to run often
    // here), its windows 2^10 to 2^24.
    let mut br = ::brotli::CompressorWriter::new(Vec::new(), 4096, level, 10 + level * 14 / 9);
    let mut from = 0;
    for cut in cuts {
        let part = &plain[from..cut];
        from = cut;
        let encoder: &mut dyn Write = match coding {
            Coding::Gzip => &mut gzip,
            Coding::Brotli => &mut br,
            _ => &mut zlib,
        };
        encoder
            .write_all(part)
            .and_then(|()| encoder.flush())
            .expect("compress");
    }
    match coding {
        Coding::Gzip => gzip.finish().expect("compress"),
        Coding::Brotli => br.into_inner(),
        _ => zlib.finish().expect("compress"),
    }
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
    prop_oneof![
        Just(Coding::Gzip),
        Just(Coding::Deflate),
        Just(Coding::Brotli),
        Just(Coding::Zstd)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// A gzip, zlib, brotli or zstd body, flushed or not, cut anywhere, inflates to
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
        prop_assert!(largest <= most_per_call(coding), "{:?} {}", coding, largest);
    }

    /// Whatever bytes come (random, after a valid gzip, zlib, brotli or zstd start,
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
            1 if coding == Coding::Brotli => compress(coding, 5, b"data: {}", &[])[..2].to_vec(),
            1 if coding == Coding::Zstd => compress(coding, 5, b"data: {}", &[])[..6].to_vec(),
            1 => vec![0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0x00, 0xff],
            2 => vec![0x78, 0x9c],
            // A bomb: 4 MiB of one byte, about 4 KiB compressed.
            _ => compress(coding, 5, &vec![b'a'; 4 << 20], &[]),
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
        prop_assert!(largest <= most_per_call(coding), "{:?} {}", coding, largest);
    }
}
