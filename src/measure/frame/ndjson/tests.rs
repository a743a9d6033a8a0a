//! Tests of the NDJSON framer: lines, splits, limits, and split-invariance properties against a reference.

use proptest::prelude::*;

use super::*;
use crate::measure::frame::sse::tests::{noise, properties::split};

const BIG: usize = 1 << 20;

/// Feeds `chunks` in order to a fresh framer, then finishes if asked;
/// returns the lines and the framer.
fn feed_all(max: usize, chunks: &[&[u8]], finish: bool) -> (Vec<Vec<u8>>, NdjsonFramer) {
    let mut framer = NdjsonFramer::new(max);
    let mut out = Vec::new();
    for chunk in chunks {
        framer.feed(chunk, &mut |l| out.push(l.to_vec()));
    }
    if finish {
        framer.finish(&mut |l| out.push(l.to_vec()));
    }
    (out, framer)
}

fn lines(input: &str) -> Vec<String> {
    let (out, _) = feed_all(BIG, &[input.as_bytes()], true);
    out.into_iter()
        .map(|l| String::from_utf8(l).expect("test input is UTF-8"))
        .collect()
}

#[test]
fn lines_are_split_on_lf_and_lose_a_trailing_cr() {
    assert_eq!(
        lines("{\"a\":1}\n{\"b\":2}\r\n{\"c\":\"x\ry\"}\n"),
        ["{\"a\":1}", "{\"b\":2}", "{\"c\":\"x\ry\"}"]
    );
    assert_eq!(lines("a\r\r\n"), ["a\r"]);
}

#[test]
fn blank_and_whitespace_only_lines_are_skipped() {
    assert_eq!(lines("\n\r\n  \t\r\n{}\n \n"), ["{}"]);
    let (_, framer) = feed_all(BIG, &[b"\n \n{}\n"], true);
    assert_eq!(
        framer.stats(),
        NdjsonStats {
            lines: 1,
            oversized: 0
        }
    );
}

#[test]
fn finish_emits_a_last_line_without_lf() {
    let (out, framer) = feed_all(BIG, &[b"{\"a\":1}\n{\"done\":", b"true}\r"], false);
    assert_eq!(out, [b"{\"a\":1}".to_vec()]);
    assert_eq!(framer.pending_bytes(), b"{\"done\":true}\r".len());
    let (out, framer) = feed_all(BIG, &[b"{\"a\":1}\n{\"done\":", b"true}\r"], true);
    assert_eq!(out, [b"{\"a\":1}".to_vec(), b"{\"done\":true}".to_vec()]);
    assert_eq!(framer.pending_bytes(), 0);
    assert_eq!(lines("{}\n  "), ["{}"]);
}

#[test]
fn splits_anywhere_change_nothing() {
    let input = "{\"msg\":\"été\"}\r\n\n{\"n\":2}\r\n{\"last\":true}".as_bytes();
    let want = feed_all(BIG, &[input], true).0;
    assert_eq!(want.len(), 3);
    for cut in 0..=input.len() {
        let (out, _) = feed_all(BIG, &[&input[..cut], &input[cut..]], true);
        assert_eq!(out, want, "cut at {cut}");
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(feed_all(BIG, &bytes, true).0, want);
}

#[test]
fn a_line_inside_the_chunk_is_not_copied() {
    let chunk = b"{\"a\":1}\r\n".to_vec();
    let range = chunk.as_ptr_range();
    let mut framer = NdjsonFramer::new(BIG);
    let mut seen = 0;
    framer.feed(&chunk, &mut |line| {
        assert_eq!(line, b"{\"a\":1}");
        assert!(range.contains(&line.as_ptr()), "line was copied");
        seen += 1;
    });
    assert_eq!(seen, 1);
}

#[test]
fn line_just_over_the_limit_is_skipped_neighbours_pass() {
    let input = b"0123456789\r\n0123456789X\r\nafter\n0123456789X";
    for cut in 0..=input.len() {
        let (out, framer) = feed_all(10, &[&input[..cut], &input[cut..]], true);
        assert_eq!(out, [b"0123456789".to_vec(), b"after".to_vec()]);
        assert_eq!(
            framer.stats(),
            NdjsonStats {
                lines: 2,
                oversized: 2
            }
        );
    }
}

#[test]
fn endless_line_keeps_memory_bounded() {
    let limit = 1 << 20;
    let chunk = vec![b'x'; 1 << 20];
    let mut framer = NdjsonFramer::new(limit);
    for _ in 0..100 {
        framer.feed(&chunk, &mut |_| panic!("no line expected"));
        assert!(framer.pending_bytes() <= limit + 1);
        assert!(framer.line.capacity() <= 2 * limit + 16);
    }
    let mut out = Vec::new();
    framer.feed(b"\n{}\n", &mut |l| out.push(l.to_vec()));
    assert_eq!(out, [b"{}".to_vec()]);
    assert_eq!(
        framer.stats(),
        NdjsonStats {
            lines: 1,
            oversized: 1
        }
    );
}

#[test]
fn binary_noise_does_not_panic() {
    let noise = noise(1 << 18, 0x9e37_79b9_7f4a_7c15);
    for max in [0, 7, 64, BIG] {
        let mut framer = NdjsonFramer::new(max);
        for chunk in noise.chunks(991) {
            framer.feed(chunk, &mut |l| assert!(l.len() <= max));
        }
        assert!(framer.pending_bytes() <= max + 1);
        framer.finish(&mut |l| assert!(l.len() <= max));
    }
}

/// Obviously-correct framing of a whole, finished stream.
fn reference(input: &[u8], max: usize) -> (Vec<Vec<u8>>, NdjsonStats) {
    let mut out = Vec::new();
    let mut stats = NdjsonStats::default();
    for line in input.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() > max {
            stats.oversized += 1;
        } else if !line.iter().all(u8::is_ascii_whitespace) {
            stats.lines += 1;
            out.push(line.to_vec());
        }
    }
    (out, stats)
}

fn arb_stream() -> impl Strategy<Value = Vec<u8>> {
    let line = prop_oneof![
        3 => "\\{\"[a-z]{0,4}\":\"[a-zé \r]{0,12}\"\\}".prop_map(String::into_bytes),
        1 => "[ \t\r]{0,3}".prop_map(String::into_bytes),
        1 => prop::collection::vec(any::<u8>(), 0..16),
    ];
    let ending = prop_oneof![Just(&b"\n"[..]), Just(&b"\r\n"[..]), Just(&b""[..])];
    prop::collection::vec((line, ending), 0..30).prop_map(|lines| {
        lines
            .into_iter()
            .flat_map(|(line, end)| [line, end.to_vec()])
            .flatten()
            .collect()
    })
}

proptest! {
    #![proptest_config(crate::measure::frame::proptest_config(256))]

    #[test]
    fn any_split_gives_the_lines_of_the_reference(
        input in arb_stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
        max in prop_oneof![Just(BIG), 0usize..24],
    ) {
        let (want, want_stats) = reference(&input, max);
        let (whole, framer) = feed_all(max, &[&input], true);
        prop_assert_eq!(&whole, &want);
        prop_assert_eq!(framer.stats(), want_stats);
        let (pieces, split_framer) = feed_all(max, &split(&input, &cuts), true);
        prop_assert_eq!(&pieces, &want);
        prop_assert_eq!(split_framer.stats(), want_stats);
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        prop_assert_eq!(feed_all(max, &bytes, true).0, want);
    }
}
