//! The body decoder: chunks gathered per read, partial chunks handed on,
//! hyper's limits, the same result however the bytes are cut; and the
//! size lines written.

use bytes::{Bytes, BytesMut};
use http::HeaderMap;
use proptest::prelude::*;

use super::*;

/// Feeds `wire` to a decoder in the given read sizes; returns the frames'
/// data, the trailers, and whether the end was reached.
fn decode_in_reads(
    framing: Framing,
    wire: &[u8],
    reads: &[usize],
    limit: usize,
) -> Result<(Vec<Bytes>, Option<HeaderMap>, bool), ChunkedError> {
    let mut decoder = Decoder::new(framing);
    let mut buf = BytesMut::new();
    let (mut frames, mut at, mut reads) = (Vec::new(), 0, reads.iter().cycle());
    loop {
        let (data, decoded) = decoder.decode(&mut buf, limit);
        if !data.is_empty() {
            frames.push(data);
        }
        match decoded {
            Decoded::End(trailers) => return Ok((frames, trailers, true)),
            Decoded::Failed(e) => return Err(e),
            Decoded::Full => {}
            Decoded::More if at == wire.len() => return Ok((frames, None, false)),
            Decoded::More => {
                let n = (*reads.next().unwrap_or(&1)).clamp(1, wire.len() - at);
                buf.extend_from_slice(&wire[at..at + n]);
                at += n;
            }
        }
    }
}

#[test]
fn the_chunks_of_one_read_leave_as_one_frame() {
    let wire = b"6\r\ndata: \r\n3\r\nabc\r\n2\r\n\n\n\r\n0\r\n\r\n";
    let (frames, trailers, ended) =
        decode_in_reads(Framing::Chunked, wire, &[wire.len()], 64 * 1024).expect("valid");
    assert_eq!(frames, [Bytes::from_static(b"data: abc\n\n")]);
    assert!(trailers.is_none() && ended);
}

#[test]
fn one_chunk_leaves_without_a_copy() {
    let mut buf = BytesMut::from(&b"5\r\nhello\r\n"[..]);
    let start = buf.as_ptr() as usize;
    let (data, _) = Decoder::new(Framing::Chunked).decode(&mut buf, 1024);
    assert_eq!(&data[..], b"hello");
    assert_eq!(
        data.as_ptr() as usize,
        start + 3,
        "a slice of the read buffer"
    );
}

#[test]
fn a_partial_chunk_leaves_as_far_as_it_came() {
    let mut decoder = Decoder::new(Framing::Chunked);
    let mut buf = BytesMut::from(&b"A\r\n0123"[..]);
    let (data, decoded) = decoder.decode(&mut buf, 1024);
    assert_eq!(
        (&data[..], matches!(decoded, Decoded::More)),
        (&b"0123"[..], true)
    );
    buf.extend_from_slice(b"456789\r\n0\r\n\r\nNEXT");
    let (data, decoded) = decoder.decode(&mut buf, 1024);
    assert_eq!(&data[..], b"456789");
    assert!(matches!(decoded, Decoded::End(None)));
    assert_eq!(&buf[..], b"NEXT", "what follows the body stays");
}

#[test]
fn trailers_and_extensions_are_read() {
    let wire = b"4;name=value\r\nabcd\r\n4 ; x\r\nefgh\r\n0\r\nx-checksum: 9\r\nx-more: 1\r\n\r\n";
    let (frames, trailers, ended) =
        decode_in_reads(Framing::Chunked, wire, &[3], 1024).expect("valid");
    assert_eq!(frames.concat(), b"abcdefgh");
    let trailers = trailers.expect("trailers");
    assert_eq!(
        (
            trailers["x-checksum"].as_bytes(),
            trailers["x-more"].as_bytes()
        ),
        (&b"9"[..], &b"1"[..])
    );
    assert!(ended);
}

#[test]
fn malformed_chunked_bodies_fail() {
    for wire in [
        &b"x\r\nabc\r\n"[..],
        b"3\nabc\r\n",
        b"3\r\nabcX\r\n",
        b"11111111111111111\r\n",
        b"3 x\r\nabc\r\n",
        b"\r\n",
    ] {
        let result = decode_in_reads(Framing::Chunked, wire, &[1], 1024);
        assert!(
            result.is_err(),
            "{:?}: {:?}",
            String::from_utf8_lossy(wire),
            result.map(|r| r.0)
        );
    }
}

#[test]
fn chunk_sizes_may_have_leading_zeros_and_long_extensions() {
    let ext = "x".repeat(8 * 1024);
    let wire = format!("00000000000000000000003;e={ext}\r\nabc\r\n0000\r\n\r\n");
    let (frames, _, ended) =
        decode_in_reads(Framing::Chunked, wire.as_bytes(), &[100], 1024).expect("valid");
    assert_eq!(frames.concat(), b"abc");
    assert!(ended);
}

/// A body that ends exactly at the frame limit ends with that frame (its
/// connection goes back to the pool), not one decode later.
#[test]
fn a_body_that_fills_the_limit_ends_with_it() {
    let mut decoder = Decoder::new(Framing::Length(4));
    let mut buf = BytesMut::from(&b"abcd"[..]);
    let (data, decoded) = decoder.decode(&mut buf, 4);
    assert_eq!(&data[..], b"abcd");
    assert!(matches!(decoded, Decoded::End(None)), "{decoded:?}");
    let mut decoder = Decoder::new(Framing::Chunked);
    let mut buf = BytesMut::from(&b"4\r\nabcd\r\n0\r\n\r\n"[..]);
    let (data, decoded) = decoder.decode(&mut buf, 4);
    assert_eq!(&data[..], b"abcd");
    assert!(matches!(decoded, Decoded::Full), "{decoded:?}");
    let (data, decoded) = decoder.decode(&mut buf, 4);
    assert!(data.is_empty() && matches!(decoded, Decoded::End(None)));
}

#[test]
fn no_frame_is_over_the_limit_whatever_one_read_brought() {
    for framing in [Framing::Length(10), Framing::Chunked, Framing::Close] {
        let wire: &[u8] = match framing {
            Framing::Chunked => b"a\r\n0123456789\r\n0\r\n\r\n",
            _ => b"0123456789",
        };
        let mut decoder = Decoder::new(framing);
        let mut buf = BytesMut::from(wire);
        let mut frames = Vec::new();
        for _ in 0..4 {
            let (data, _) = decoder.decode(&mut buf, 4);
            frames.push(data);
        }
        assert_eq!(frames, ["0123", "4567", "89", ""], "{framing:?}");
    }
}

#[test]
fn a_length_body_ends_at_its_length_and_a_close_body_never() {
    let (frames, _, ended) =
        decode_in_reads(Framing::Length(5), b"helloEXTRA", &[2], 1024).expect("valid");
    assert_eq!(frames.concat(), b"hello");
    assert!(ended);
    let (frames, _, ended) =
        decode_in_reads(Framing::Close, b"until the end", &[4], 1024).expect("valid");
    assert_eq!(frames.concat(), b"until the end");
    assert!(!ended, "only the connection's close ends it");
}

proptest! {
    /// Any data, in any chunking (with extensions), read in any sizes and
    /// gathered up to any limit, decodes to the same bytes and ends.
    #[test]
    fn chunked_bodies_decode_to_their_data(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 0..20),
        reads in proptest::collection::vec(1usize..700, 1..8),
        limit in 1usize..2000,
        ext in any::<bool>(),
    ) {
        let mut wire = Vec::new();
        for chunk in &chunks {
            wire.extend_from_slice(format!("{:x}{}\r\n", chunk.len(), if ext { ";e=1" } else { "" }).as_bytes());
            wire.extend_from_slice(chunk);
            wire.extend_from_slice(b"\r\n");
        }
        wire.extend_from_slice(b"0\r\n\r\n");
        let (frames, trailers, ended) = decode_in_reads(Framing::Chunked, &wire, &reads, limit).expect("valid");
        prop_assert_eq!(frames.concat(), chunks.concat());
        prop_assert!(frames.iter().all(|f| f.len() <= limit), "a frame over the limit");
        prop_assert!(trailers.is_none());
        prop_assert!(ended);
    }
}

proptest! {
    /// A read that brings one whole chunk at a time (a paced event's)
    /// hands over exactly that chunk's data, and the body then ends as
    /// any other: the one-chunk path and the general one agree.
    #[test]
    fn whole_chunks_read_one_at_a_time_are_handed_over_one_at_a_time(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..300), 1..12),
        limit in 1usize..400,
        upper in any::<bool>(),
    ) {
        let mut decoder = Decoder::new(Framing::Chunked);
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for chunk in &chunks {
            let line = if upper { format!("{:X}\r\n", chunk.len()) } else { format!("{:x}\r\n", chunk.len()) };
            buf.extend_from_slice(line.as_bytes());
            buf.extend_from_slice(chunk);
            buf.extend_from_slice(b"\r\n");
            loop {
                let (data, decoded) = decoder.decode(&mut buf, limit);
                prop_assert!(data.len() <= limit);
                got.extend_from_slice(&data);
                match decoded {
                    Decoded::More => break,
                    Decoded::Full => {}
                    other => prop_assert!(false, "{other:?}"),
                }
            }
            prop_assert!(buf.is_empty(), "the chunk was taken whole");
        }
        prop_assert_eq!(got, chunks.concat());
        buf.extend_from_slice(b"0\r\n\r\n");
        let (data, decoded) = decoder.decode(&mut buf, limit);
        prop_assert!(data.is_empty() && matches!(decoded, Decoded::End(None)));
    }
}

proptest! {
    /// Where the one-pass reader reads a chunk-size line, the general one
    /// reads the same size and the line ends where it says; lines of
    /// bytes a size line is made of, in any order.
    #[test]
    fn a_plain_size_line_reads_as_the_general_reader_reads_it(
        line in proptest::collection::vec(proptest::sample::select(b"0aF9g \t;\r\n".to_vec()), 0..24),
    ) {
        if let Some((size, len)) = plain_size_line(&line) {
            prop_assert_eq!(memchr::memchr(b'\n', &line), Some(len - 1));
            prop_assert_eq!(chunk_size(&line[..len]).ok(), Some(size));
        }
    }

    /// Every size a server writes in hex, either case, with or without
    /// leading zeros, up to 16 digits, is read by the one pass.
    #[test]
    fn plain_size_lines_take_the_one_pass(size in any::<u64>(), upper in any::<bool>(), zeros in 0usize..4) {
        let hex = if upper { format!("{size:X}") } else { format!("{size:x}") };
        let line = format!("{}{hex}\r\nrest", "0".repeat(zeros.min(16 - hex.len())));
        let len = line.len() - "rest".len();
        prop_assert_eq!(plain_size_line(line.as_bytes()), Some((size, len)));
    }
}

/// What the upstream sent before its body went wrong is forwarded; the
/// failure comes after it.
#[test]
fn the_data_before_a_malformed_chunk_is_returned_first() {
    let mut decoder = Decoder::new(Framing::Chunked);
    let mut buf = BytesMut::from(&b"3\r\nabc\r\n2\r\nde\r\nzz\r\n"[..]);
    let (data, decoded) = decoder.decode(&mut buf, 1024);
    assert_eq!(&data[..], b"abcde");
    assert!(
        matches!(decoded, Decoded::Failed(ChunkedError(_))),
        "{decoded:?}"
    );
}

/// hyper's limits over a whole chunked body, on both sides of the proxy:
/// 16 KiB of chunk extensions in all (each line alone may be under it) and
/// a 16 KiB trailer section.
#[test]
fn extensions_and_trailers_are_limited_over_the_body_as_hyper_limits_them() {
    let ext = "x".repeat(1024);
    let under: String = (0..15).map(|_| format!("1;{ext}\r\na\r\n")).collect();
    let wire = format!("{under}0\r\n\r\n");
    let decoded = decode_in_reads(Framing::Chunked, wire.as_bytes(), &[512], 1024);
    assert_eq!(decoded.expect("under the limit").0.concat(), [b'a'; 15]);
    let over: String = (0..17).map(|_| format!("1;{ext}\r\na\r\n")).collect();
    let wire = format!("{over}0\r\n\r\n");
    assert!(decode_in_reads(Framing::Chunked, wire.as_bytes(), &[512], 1024).is_err());
    let value = "v".repeat(1000);
    let trailers: String = (0..17).map(|i| format!("x-{i}: {value}\r\n")).collect();
    let wire = format!("1\r\na\r\n0\r\n{trailers}\r\n");
    assert!(decode_in_reads(Framing::Chunked, wire.as_bytes(), &[512], 1024).is_err());
    let trailers: String = (0..15).map(|i| format!("x-{i}: {value}\r\n")).collect();
    let wire = format!("1\r\na\r\n0\r\n{trailers}\r\n");
    assert!(decode_in_reads(Framing::Chunked, wire.as_bytes(), &[512], 1024).is_ok());
}

#[test]
fn size_lines_are_hypers_upper_case_hex() {
    for len in [0, 1, 15, 16, 255, 4096, 0xABCDEF, usize::MAX] {
        let line = SizeLine::new(len);
        assert_eq!(line.as_bytes(), format!("{len:X}\r\n").as_bytes(), "{len}");
    }
    assert_eq!(SizeLine::new(255).as_bytes(), b"FF\r\n");
    assert_eq!(
        SizeLine::new(usize::MAX).as_bytes(),
        b"FFFFFFFFFFFFFFFF\r\n"
    );
}
