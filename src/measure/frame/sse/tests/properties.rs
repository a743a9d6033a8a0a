//! Split-invariance properties of the SSE framer, checked against a reference framer.

use proptest::prelude::*;

use super::{ends_all, feed_all, End, Ev, BIG};
use crate::measure::frame::sse::{SseStats, BOM};

/// Obviously-correct framing of a whole stream, with the same limit rule:
/// an event is dropped when its data and type plus a line of it (not a
/// comment) exceed `max`.
fn reference(input: &[u8], max: usize) -> (Vec<Ev>, SseStats) {
    let input = input.strip_prefix(&BOM[..]).unwrap_or(input);
    let (mut lines, mut start, mut i) = (Vec::new(), 0, 0);
    while i < input.len() {
        let end = i;
        i += 1;
        match input[end] {
            b'\n' => {}
            b'\r' if input.get(i) == Some(&b'\n') => i += 1,
            b'\r' => {}
            _ => continue,
        }
        lines.push(&input[start..end]);
        start = i;
    }
    let tail = &input[start..];
    let mut r = Reference {
        max,
        ..Reference::default()
    };
    lines.into_iter().for_each(|line| r.line(line));
    if !r.skipping && !tail.is_empty() && tail[0] != b':' && r.size() + tail.len() > max {
        r.stats.oversized += 1;
    }
    (r.out, r.stats)
}

#[derive(Default)]
struct Reference {
    max: usize,
    out: Vec<Ev>,
    stats: SseStats,
    data: Option<Vec<u8>>,
    event: Vec<u8>,
    skipping: bool,
}

impl Reference {
    fn size(&self) -> usize {
        self.data.as_ref().map_or(0, Vec::len) + self.event.len()
    }

    fn line(&mut self, line: &[u8]) {
        if line.is_empty() {
            if let (false, Some(data)) = (self.skipping, self.data.take()) {
                self.out.push((self.event.clone(), data));
                self.stats.events += 1;
            }
            (self.skipping, self.data) = (false, None);
            self.event.clear();
        } else if self.skipping {
        } else if line[0] == b':' {
            self.stats.comments += 1;
        } else if self.size() + line.len() > self.max {
            (self.skipping, self.data) = (true, None);
            self.event.clear();
            self.stats.oversized += 1;
        } else {
            let (name, value) = match line.iter().position(|&b| b == b':') {
                Some(c) => (
                    &line[..c],
                    line[c + 1..].strip_prefix(b" ").unwrap_or(&line[c + 1..]),
                ),
                None => (line, &[][..]),
            };
            // llama.cpp's `error` field: the data of an event of that type.
            if name == b"error" {
                self.event = b"error".to_vec();
            }
            match (name, &mut self.data) {
                (b"data" | b"error", Some(data)) => {
                    data.push(b'\n');
                    data.extend_from_slice(value);
                }
                (b"data" | b"error", None) => self.data = Some(value.to_vec()),
                (b"event", _) => self.event = value.to_vec(),
                _ => {}
            }
        }
    }
}

fn arb_line() -> impl Strategy<Value = Vec<u8>> {
    let bytes = || prop::collection::vec(any::<u8>(), 0..12);
    let text = || "[a-z é{}\":,\\[\\]]{0,12}";
    prop_oneof![
        4 => text().prop_map(|v| format!("data: {v}").into_bytes()),
        1 => text().prop_map(|v| format!("data:{v}").into_bytes()),
        2 => bytes().prop_map(|v| [&b"data: "[..], &v].concat()),
        2 => "[a-z_]{0,8}".prop_map(|v| format!("event: {v}").into_bytes()),
        1 => "[0-9]{1,3}".prop_map(|v| format!("id: {v}").into_bytes()),
        1 => text().prop_map(|v| format!("error: {v}").into_bytes()),
        1 => text().prop_map(|v| format!(":{v}").into_bytes()),
        1 => Just(b"data".to_vec()),
        4 => Just(Vec::new()),
        1 => bytes(),
    ]
}

/// A stream of lines with random endings, maybe a BOM first and maybe an
/// unterminated last line.
fn arb_stream() -> impl Strategy<Value = Vec<u8>> {
    let ending = prop_oneof![Just(&b"\n"[..]), Just(&b"\r\n"[..]), Just(&b"\r"[..])];
    let lines = prop::collection::vec((arb_line(), ending), 0..40);
    (any::<bool>(), lines, prop::option::of(arb_line())).prop_map(|(bom, lines, last)| {
        let mut out = if bom { BOM.to_vec() } else { Vec::new() };
        for (line, end) in lines {
            out.extend_from_slice(&line);
            out.extend_from_slice(end);
        }
        out.extend(last.unwrap_or_default());
        out
    })
}

/// Splits `input` at the given cut points (shared with the NDJSON tests).
pub(crate) fn split<'a>(input: &'a [u8], cuts: &[prop::sample::Index]) -> Vec<&'a [u8]> {
    let mut at: Vec<usize> = cuts.iter().map(|c| c.index(input.len() + 1)).collect();
    at.sort_unstable();
    at.push(input.len());
    let mut start = 0;
    at.into_iter()
        .map(|end| {
            let piece = &input[start..end];
            start = end;
            piece
        })
        .collect()
}

proptest! {
    #![proptest_config(crate::measure::frame::proptest_config(256))]

    #[test]
    fn any_split_gives_the_events_of_the_reference(
        input in arb_stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
        max in prop_oneof![Just(BIG), 0usize..40],
    ) {
        let (want, want_stats) = reference(&input, max);
        let (whole, framer) = feed_all(max, &[&input]);
        prop_assert_eq!(&whole, &want);
        prop_assert_eq!(framer.stats(), want_stats);
        let (pieces, split_framer) = feed_all(max, &split(&input, &cuts));
        prop_assert_eq!(&pieces, &want);
        prop_assert_eq!(split_framer.stats(), want_stats);
        prop_assert_eq!(split_framer.pending_bytes(), framer.pending_bytes());
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        prop_assert_eq!(feed_all(max, &bytes).0, want);
    }
}

/// `ends` with the end of every blank `\r\n` line after its `\n`: fed a
/// byte at a time (or cut between the two), the `\r` ends the line in its
/// own feed, and the end is reported there.
fn after_crlf(ends: Vec<End>, input: &[u8]) -> Vec<End> {
    ends.into_iter()
        .map(|(end, event)| {
            let split_crlf = end > 0 && input[end - 1] == b'\r' && input.get(end) == Some(&b'\n');
            (end + usize::from(split_crlf), event)
        })
        .collect()
}

proptest! {
    #![proptest_config(crate::measure::frame::proptest_config(256))]

    /// Fed a byte at a time, no event is whole in one feed, so every one
    /// goes line by line; fed in larger pieces, `data: …` events go the
    /// short way (`whole_data_event`). Both give the same ends, events and
    /// counts.
    #[test]
    fn whole_events_end_where_line_by_line_ones_do(
        input in arb_stream(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..24),
        max in prop_oneof![Just(BIG), 0usize..40],
    ) {
        let bytes: Vec<&[u8]> = input.chunks(1).collect();
        let (want, want_stats) = ends_all(max, &bytes);
        let want = after_crlf(want, &input);
        for pieces in [vec![&input[..]], split(&input, &cuts)] {
            let (ends, stats) = ends_all(max, &pieces);
            prop_assert_eq!(after_crlf(ends, &input), want.clone());
            prop_assert_eq!(stats, want_stats);
        }
    }
}
