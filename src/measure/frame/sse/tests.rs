//! Tests of the SSE framer: spec vectors, splits and limits.

use super::*;

pub(crate) mod properties;

/// An event as (type, data), owned so it outlives the sink call.
type Ev = (Vec<u8>, Vec<u8>);

const BIG: usize = 1 << 20;

fn ev(event: &str, data: &str) -> Ev {
    (event.as_bytes().to_vec(), data.as_bytes().to_vec())
}

/// Feeds `chunks` in order to a fresh framer; returns the events and it.
fn feed_all(max: usize, chunks: &[&[u8]]) -> (Vec<Ev>, SseFramer) {
    let mut framer = SseFramer::new(max);
    let mut out = Vec::new();
    for chunk in chunks {
        framer.feed(chunk, &mut |e| {
            out.push((e.event.to_vec(), e.data.to_vec()))
        });
    }
    (out, framer)
}

fn events(input: &str) -> Vec<Ev> {
    feed_all(BIG, &[input.as_bytes()]).0
}

/// The same input fed whole, then byte by byte: both must agree.
fn events_any_split(input: &[u8], max: usize) -> (Vec<Ev>, SseStats) {
    let (whole, framer) = feed_all(max, &[input]);
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let (split, split_framer) = feed_all(max, &bytes);
    assert_eq!(whole, split, "byte-by-byte feeding changed the events");
    assert_eq!(framer.stats(), split_framer.stats());
    (whole, framer.stats())
}

#[test]
fn line_endings_lf_crlf_cr_and_mixed() {
    let want = vec![ev("", "a"), ev("", "b")];
    assert_eq!(events("data: a\n\ndata: b\n\n"), want);
    assert_eq!(events("data: a\r\n\r\ndata: b\r\n\r\n"), want);
    assert_eq!(events("data: a\r\rdata: b\r\r"), want);
    assert_eq!(events("data: a\r\n\rdata: b\n\r\n"), want);
}

#[test]
fn multi_line_data_is_joined_with_lf() {
    assert_eq!(
        events("data: YHOO\ndata: +2\ndata: 10\n\n"),
        vec![ev("", "YHOO\n+2\n10")]
    );
}

#[test]
fn one_leading_space_is_stripped() {
    assert_eq!(events("data:x\n\n"), vec![ev("", "x")]);
    assert_eq!(events("data: x\n\n"), vec![ev("", "x")]);
    assert_eq!(events("data:  x\n\n"), vec![ev("", " x")]);
    assert_eq!(events("data:\n\n"), vec![ev("", "")]);
}

#[test]
fn event_type_last_wins_and_resets_after_dispatch() {
    assert_eq!(
        events("event: add\nevent: remove\ndata: 73857293\n\ndata: next\n\n"),
        vec![ev("remove", "73857293"), ev("", "next")]
    );
}

#[test]
fn anthropic_ping_has_data_so_is_dispatched() {
    let input = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
    assert_eq!(events(input), vec![ev("ping", "{\"type\": \"ping\"}")]);
}

#[test]
fn comments_are_counted_not_dispatched() {
    let (out, stats) = events_any_split(b": keep-alive\n\n:\ndata: x\n: mid\n\n", BIG);
    assert_eq!(out, vec![ev("", "x")]);
    assert_eq!(
        stats,
        SseStats {
            events: 1,
            comments: 3,
            oversized: 0
        }
    );
}

#[test]
fn bom_at_start_is_ignored_even_split() {
    let input = "\u{FEFF}data: x\n\n".as_bytes();
    assert_eq!(feed_all(BIG, &[input]).0, vec![ev("", "x")]);
    assert_eq!(
        feed_all(BIG, &[&input[..1], &input[1..]]).0,
        vec![ev("", "x")]
    );
    assert_eq!(
        feed_all(BIG, &[&input[..2], &input[2..]]).0,
        vec![ev("", "x")]
    );
    let (out, _) = events_any_split(input, BIG);
    assert_eq!(out, vec![ev("", "x")]);
}

#[test]
fn bom_elsewhere_or_incomplete_is_data() {
    // A second mark makes the field name "\u{FEFF}data": unknown, ignored.
    assert_eq!(
        events("\u{FEFF}\u{FEFF}data: x\n\ndata: y\n\n"),
        vec![ev("", "y")]
    );
    assert_eq!(events("data: a\n\n\u{FEFF}data: b\n\n"), vec![ev("", "a")]);
    let (out, _) = events_any_split(b"\xEF\xBBdata: x\n\n", BIG);
    assert!(out.is_empty());
    let (out, _) = events_any_split(b"\xEF\xBB\ndata: x\n\n", BIG);
    assert_eq!(out, vec![ev("", "x")]);
}

#[test]
fn field_without_colon_has_empty_value() {
    assert_eq!(
        events("data\n\ndata\ndata\n\ndata:"),
        vec![ev("", ""), ev("", "\n")]
    );
    assert_eq!(events("event\ndata: x\n\n"), vec![ev("", "x")]);
}

#[test]
fn event_without_data_is_not_dispatched() {
    assert_eq!(events("event: ping\n\n"), vec![]);
    assert_eq!(
        events("event: ping\nid: 3\nretry: 10\n\ndata: x\n\n"),
        vec![ev("", "x")]
    );
}

#[test]
fn unknown_fields_id_and_retry_are_ignored() {
    assert_eq!(
        events("id: 1\nfoo: bar\nretry: 5\ndata: x\nDATA: y\n\n"),
        vec![ev("", "x")]
    );
}

/// llama.cpp's server writes an error in a stream as a field of its own:
/// it is read as the data of an event of type `error`, however split.
#[test]
fn an_error_field_is_an_event_of_type_error() {
    let stream =
        b"data: {\"content\":\"a\"}\n\nerror: {\"code\":500,\"message\":\"m\"}\n\ndata: [DONE]\n\n";
    let (got, stats) = events_any_split(stream, BIG);
    assert_eq!(
        got,
        vec![
            ev("", r#"{"content":"a"}"#),
            ev("error", r#"{"code":500,"message":"m"}"#),
            ev("", "[DONE]"),
        ]
    );
    assert_eq!(stats.events, 3);
}

#[test]
fn unterminated_final_event_is_held_not_dispatched() {
    let (out, framer) = feed_all(BIG, &[b"data: a\n\ndata: b"]);
    assert_eq!(out, vec![ev("", "a")]);
    assert_eq!(framer.pending_bytes(), b"data: b".len());
    let (out, framer) = feed_all(BIG, &[b"data: a\n\nevent: e\ndata: b\n"]);
    assert_eq!(out, vec![ev("", "a")]);
    assert_eq!(framer.pending_bytes(), 2);
    let (_, framer) = feed_all(BIG, &[b"data: a\n\n"]);
    assert_eq!(framer.pending_bytes(), 0);
}

#[test]
fn done_marker_is_an_ordinary_event() {
    assert_eq!(
        events("data: {\"x\":1}\n\ndata: [DONE]\n\n"),
        vec![ev("", "{\"x\":1}"), ev("", "[DONE]")]
    );
}

#[test]
fn splits_inside_name_utf8_and_crlf_change_nothing() {
    let cases: [(&[&[u8]], Vec<Ev>); 4] = [
        (&[b"da", b"ta: x\n\n"], vec![ev("", "x")]),
        (&[b"data: \xC3", b"\xA9t\xC3\xA9\n\n"], vec![ev("", "été")]),
        (&[b"data: a\r", b"\ndata: b\r\n\r\n"], vec![ev("", "a\nb")]),
        (&[b"data: a\r", b"", b"\n\r", b"\n"], vec![ev("", "a")]),
    ];
    for (chunks, want) in cases {
        assert_eq!(feed_all(BIG, chunks).0, want, "{chunks:?}");
        assert_eq!(feed_all(BIG, &[&chunks.concat()]).0, want);
    }
}

#[test]
fn a_data_line_inside_the_chunk_is_not_copied() {
    let chunk = b"event: e\ndata: hello\n\n".to_vec();
    let range = chunk.as_ptr_range();
    let mut framer = SseFramer::new(BIG);
    let mut seen = 0;
    framer.feed(&chunk, &mut |e| {
        assert_eq!(e.data, b"hello");
        assert!(range.contains(&e.data.as_ptr()), "data was copied");
        seen += 1;
    });
    assert_eq!(seen, 1);
}

#[test]
fn buffers_are_reused_across_events() {
    let mut framer = SseFramer::new(BIG);
    let mut n = 0;
    let mut feed = |framer: &mut SseFramer| {
        framer.feed(b"data: abc", &mut |_| n += 1);
        framer.feed(b"def\ndata: 2\n\n", &mut |_| n += 1);
    };
    feed(&mut framer);
    let caps = (framer.line.capacity(), framer.data.capacity());
    for _ in 0..100 {
        feed(&mut framer);
        assert_eq!((framer.line.capacity(), framer.data.capacity()), caps);
    }
    assert_eq!(framer.stats().events, 101);
}

#[test]
fn event_just_over_the_limit_is_skipped_neighbours_pass() {
    // "data: " + 10 bytes = 16 bytes: exactly the limit passes.
    let input = b"data: 0123456789\n\ndata: 0123456789X\ndata: more\n\ndata: after\n\n";
    let (out, stats) = events_any_split(input, 16);
    assert_eq!(out, vec![ev("", "0123456789"), ev("", "after")]);
    assert_eq!(
        stats,
        SseStats {
            events: 2,
            comments: 0,
            oversized: 1
        }
    );
}

#[test]
fn data_accumulated_over_lines_counts_against_the_limit() {
    let input = b"event: e\ndata: aaaa\ndata: bbbb\ndata: cccc\n\ndata: ok\n\n";
    let (out, stats) = events_any_split(input, 16);
    assert_eq!(out, vec![ev("", "ok")]);
    assert_eq!(stats.oversized, 1);
    let (out, _) = events_any_split(input, 20);
    assert_eq!(out, vec![ev("e", "aaaa\nbbbb\ncccc"), ev("", "ok")]);
}

#[test]
fn endless_line_keeps_memory_bounded() {
    let limit = 1 << 20;
    let chunk = vec![b'x'; 1 << 20];
    let mut framer = SseFramer::new(limit);
    framer.feed(b"data: ", &mut |_| panic!("no event expected"));
    for _ in 0..100 {
        framer.feed(&chunk, &mut |_| panic!("no event expected"));
        assert!(framer.pending_bytes() <= limit + 16);
        assert!(framer.line.capacity() <= 2 * limit + 16);
    }
    let mut out = Vec::new();
    framer.feed(b"\n\ndata: ok\n\n", &mut |e| out.push(e.data.to_vec()));
    assert_eq!(out, vec![b"ok".to_vec()]);
    assert_eq!(framer.stats().oversized, 1);
}

#[test]
fn huge_event_of_many_lines_keeps_memory_bounded() {
    let limit = 1 << 20;
    let chunk = b"data: 0123456789abcdef0123456789abcdef\n".repeat(1 << 15);
    let mut framer = SseFramer::new(limit);
    for _ in 0..100 {
        framer.feed(&chunk, &mut |_| panic!("no event expected"));
        assert!(framer.pending_bytes() <= limit);
        assert!(framer.data.capacity() <= 2 * limit + 16);
    }
    assert_eq!(framer.stats().oversized, 1);
}

/// A blank line seen by `feed_ends`: its end as an offset in the whole
/// stream, and the data of the event it dispatched.
type End = (usize, Option<Vec<u8>>);

fn ends_all(max: usize, chunks: &[&[u8]]) -> (Vec<End>, SseStats) {
    let mut framer = SseFramer::new(max);
    let (mut out, mut base) = (Vec::new(), 0);
    for chunk in chunks {
        framer.feed_ends(chunk, &mut |e| {
            out.push((base + e.end, e.event.map(|e| e.data.to_vec())))
        });
        base += chunk.len();
    }
    (out, framer.stats())
}

#[test]
fn every_blank_line_is_an_end_with_its_event_if_any() {
    let input = b": c\n\ndata: a\r\n\r\nevent: e\n\rdata: 0123456789XYZ\n\n";
    let want = vec![(5, None), (16, Some(b"a".to_vec())), (26, None), (47, None)];
    let stats = SseStats {
        events: 1,
        comments: 1,
        oversized: 1,
    };
    assert_eq!(ends_all(16, &[input]), (want.clone(), stats));
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    let split = ends_all(16, &bytes);
    // Byte by byte, the `\n` of a blank `\r\n` comes in the next feed.
    let crlf_end = |(end, event): End| (if end == 16 { 15 } else { end }, event);
    assert_eq!(split, (want.into_iter().map(crlf_end).collect(), stats));
}

#[test]
fn a_blank_cr_at_the_end_of_a_feed_ends_there() {
    let (ends, _) = ends_all(BIG, &[b"data: a\n\r", b"\ndata: b\n\n"]);
    assert_eq!(
        ends,
        vec![(9, Some(b"a".to_vec())), (19, Some(b"b".to_vec()))]
    );
    let (ends, _) = ends_all(BIG, &[b"data: a\n\r\ndata: b\n\n"]);
    assert_eq!(
        ends,
        vec![(10, Some(b"a".to_vec())), (19, Some(b"b".to_vec()))]
    );
}

/// Deterministic binary noise (xorshift), shared with the NDJSON tests.
pub(crate) fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}

#[test]
fn binary_noise_does_not_panic() {
    let noise = noise(1 << 18, 0x2545_f491_4f6c_dd1d);
    for max in [0, 7, 64, BIG] {
        let mut framer = SseFramer::new(max);
        for chunk in noise.chunks(997) {
            framer.feed(chunk, &mut |e| assert!(e.data.len() <= max));
        }
        assert!(framer.pending_bytes() <= max);
    }
}
