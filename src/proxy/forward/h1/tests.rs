use bytes::BytesMut;
use http::{header, Method, Request, StatusCode, Version};
use proptest::prelude::*;

use super::*;

fn head(method: Method, headers: &[(&'static str, &'static str)]) -> request::Parts {
    let mut request = Request::builder()
        .method(method)
        .uri("/v1/chat/completions?x=1");
    for (k, v) in headers {
        request = request.header(*k, *v);
    }
    request.body(()).expect("request").into_parts().0
}

fn encoded(
    method: Method,
    headers: &[(&'static str, &'static str)],
    size: BodySize,
) -> (String, Framing) {
    let mut parts = head(method, headers);
    let mut out = Vec::new();
    let framing = encode_request(&mut parts, size, &mut out);
    (String::from_utf8(out).expect("ASCII head"), framing)
}

#[test]
fn a_request_head_is_origin_form_with_its_headers_in_order() {
    let (text, framing) = encoded(
        Method::POST,
        &[
            ("host", "up:8000"),
            ("content-type", "application/json"),
            ("content-length", "12"),
        ],
        BodySize::Known(12),
    );
    assert_eq!(
        text,
        "POST /v1/chat/completions?x=1 HTTP/1.1\r\nhost: up:8000\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n"
    );
    assert_eq!(framing, Framing::Length(12));
}

/// hyper's client rules (`Role::set_length`).
#[test]
fn the_body_framing_is_chosen_as_hyper_chooses_it() {
    let (text, framing) = encoded(Method::POST, &[], BodySize::Unknown);
    assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
    assert_eq!(framing, Framing::Chunked);
    let (text, framing) = encoded(Method::GET, &[], BodySize::Unknown);
    assert!(
        !text.contains("transfer-encoding") && !text.contains("content-length"),
        "{text}"
    );
    assert_eq!(framing, Framing::Length(0));
    let (text, framing) = encoded(Method::POST, &[], BodySize::Known(5));
    assert!(text.contains("content-length: 5\r\n"), "{text}");
    assert_eq!(framing, Framing::Length(5));
    let (text, framing) = encoded(Method::POST, &[], BodySize::Empty);
    assert!(!text.contains("content-length"), "{text}");
    assert_eq!(framing, Framing::Length(0));
    // A content-length the request carries is kept, as sent.
    let (text, framing) = encoded(Method::POST, &[("content-length", "7")], BodySize::Unknown);
    assert!(
        text.contains("content-length: 7\r\n") && !text.contains("chunked"),
        "{text}"
    );
    assert_eq!(framing, Framing::Length(7));
}

#[test]
fn chunks_are_encoded_in_hex_and_trailers_only_when_announced() {
    let mut out = Vec::new();
    encode_chunk(&[b'x'; 26], &mut out);
    assert_eq!(out, [b"1A\r\n".as_slice(), &[b'x'; 26], b"\r\n"].concat());
    let mut announced = HeaderMap::new();
    announced.insert(header::TRAILER, HeaderValue::from_static("x-sum"));
    let mut trailers = HeaderMap::new();
    trailers.insert("x-sum", HeaderValue::from_static("1"));
    trailers.insert("x-other", HeaderValue::from_static("2"));
    let mut out = Vec::new();
    encode_last_chunk(Some(&trailers), &announced, &mut out);
    assert_eq!(out, b"0\r\nx-sum: 1\r\n\r\n");
}

fn parse(bytes: &[u8], method: &Method) -> Result<Option<Head>, WireError> {
    parse_response(&mut BytesMut::from(bytes), method)
}

#[test]
fn a_response_head_waits_for_its_end_and_leaves_the_body() {
    let whole = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n";
    let end = whole.len() - b"5\r\nhello\r\n".len();
    for cut in 0..end {
        assert!(
            parse(&whole[..cut], &Method::POST)
                .expect("valid so far")
                .is_none(),
            "cut at {cut}"
        );
    }
    let mut buf = BytesMut::from(&whole[..]);
    let head = parse_response(&mut buf, &Method::POST)
        .expect("valid")
        .expect("whole");
    assert_eq!(&buf[..], b"5\r\nhello\r\n", "the body stays in the buffer");
    assert_eq!(head.response.status(), StatusCode::OK);
    assert_eq!(head.response.headers()["content-type"], "text/event-stream");
    assert_eq!(head.framing, Framing::Chunked);
    assert!(head.keep_alive);
}

#[test]
fn the_response_framing_follows_rfc_9112() {
    let framing = |head: &str, method: Method| {
        parse(head.as_bytes(), &method)
            .expect("valid")
            .expect("whole")
            .framing
    };
    assert_eq!(
        framing(
            "HTTP/1.1 200 OK\r\ncontent-length: 42\r\n\r\n",
            Method::POST
        ),
        Framing::Length(42)
    );
    assert_eq!(
        framing(
            "HTTP/1.1 200 OK\r\ncontent-length: 42\r\n\r\n",
            Method::HEAD
        ),
        Framing::Length(0)
    );
    assert_eq!(
        framing("HTTP/1.1 204 No Content\r\n\r\n", Method::POST),
        Framing::Length(0)
    );
    assert_eq!(
        framing("HTTP/1.1 304 Not Modified\r\n\r\n", Method::GET),
        Framing::Length(0)
    );
    assert_eq!(
        framing("HTTP/1.1 200 OK\r\n\r\n", Method::POST),
        Framing::Close
    );
    assert_eq!(
        framing(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\ncontent-length: 3\r\n\r\n",
            Method::POST
        ),
        Framing::Chunked,
        "transfer-encoding wins over content-length"
    );
    assert_eq!(
        framing(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            Method::POST
        ),
        Framing::Close
    );
    assert_eq!(
        framing(
            "HTTP/1.1 200 OK\r\ncontent-length: 4, 4\r\n\r\n",
            Method::POST
        ),
        Framing::Length(4)
    );
    for bad in [
        "content-length: 4\r\ncontent-length: 5",
        "content-length: -1",
        "content-length: 4x",
    ] {
        let head = format!("HTTP/1.1 200 OK\r\n{bad}\r\n\r\n");
        assert!(parse(head.as_bytes(), &Method::POST).is_err(), "{bad}");
    }
    assert!(
        parse(
            b"HTTP/1.0 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            &Method::POST
        )
        .is_err(),
        "RFC 9112 section 6.1: faulty framing"
    );
}

#[test]
fn keep_alive_follows_the_version_and_connection() {
    let keeps = |head: &str| {
        parse(head.as_bytes(), &Method::GET)
            .expect("valid")
            .expect("whole")
            .keep_alive
    };
    assert!(keeps("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"));
    assert!(!keeps(
        "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"
    ));
    assert!(!keeps("HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n"));
    assert!(keeps(
        "HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n"
    ));
    assert!(
        !keeps("HTTP/1.1 200 OK\r\n\r\n"),
        "a body delimited by the close"
    );
    let head = parse(b"HTTP/1.0 200 OK\r\n\r\n", &Method::GET)
        .expect("valid")
        .expect("whole");
    assert_eq!(head.response.version(), Version::HTTP_10);
}

#[test]
fn informational_heads_are_skipped_but_101_is_returned() {
    let mut buf = BytesMut::from(&b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n"[..]);
    let head = parse_response(&mut buf, &Method::POST)
        .expect("valid")
        .expect("whole");
    assert_eq!(head.response.status(), StatusCode::CREATED);
    assert!(buf.is_empty());
    let head = parse(
        b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
        &Method::GET,
    )
    .expect("valid")
    .expect("whole");
    assert_eq!(head.response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert!(!head.keep_alive);
}

#[test]
fn an_unusual_reason_phrase_is_kept_for_the_client() {
    let head = parse(
        b"HTTP/1.1 200 Fine Thanks\r\ncontent-length: 0\r\n\r\n",
        &Method::GET,
    )
    .expect("valid")
    .expect("whole");
    let reason = head
        .response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .expect("kept");
    assert_eq!(reason.as_bytes(), b"Fine Thanks");
    let head = parse(
        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
        &Method::GET,
    )
    .expect("valid")
    .expect("whole");
    assert!(head
        .response
        .extensions()
        .get::<hyper::ext::ReasonPhrase>()
        .is_none());
    // An empty one too: the client's status line ends as the upstream's.
    let head = parse(b"HTTP/1.1 200 \r\ncontent-length: 0\r\n\r\n", &Method::GET)
        .expect("valid")
        .expect("whole");
    let reason = head.response.extensions().get::<hyper::ext::ReasonPhrase>();
    assert_eq!(reason.map(|r| r.as_bytes()), Some(&b""[..]));
}

#[test]
fn malformed_or_huge_heads_fail() {
    assert!(parse(b"HTTP/1.1 2OO OK\r\n\r\n", &Method::GET).is_err());
    assert!(parse(b"SSH-2.0-OpenSSH\r\n\r\n", &Method::GET).is_err());
    let mut huge = b"HTTP/1.1 200 OK\r\n".to_vec();
    while huge.len() <= MAX_HEAD {
        huge.extend_from_slice(
            b"x-pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
        );
    }
    assert!(matches!(
        parse(&huge, &Method::GET),
        Err(WireError::HeadTooLarge)
    ));
}

/// Feeds `wire` to a decoder in the given read sizes; returns the frames'
/// data, the trailers, and whether the end was reached.
fn decode_in_reads(
    framing: Framing,
    wire: &[u8],
    reads: &[usize],
    limit: usize,
) -> Result<(Vec<Bytes>, Option<HeaderMap>, bool), WireError> {
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
        prop_assert!(trailers.is_none());
        prop_assert!(ended);
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
        matches!(decoded, Decoded::Failed(WireError::Chunked(_))),
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
