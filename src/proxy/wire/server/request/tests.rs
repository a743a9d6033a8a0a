//! The request head parser against its rules and against hyper's server
//! (a real one, beside it, on the same bytes).

use super::*;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use proptest::sample::select;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn parsed(bytes: &[u8]) -> Result<Option<RequestHead>, HeadError> {
    parse(&mut BytesMut::from(bytes))
}

fn head(bytes: &[u8]) -> RequestHead {
    match parsed(bytes) {
        Ok(Some(head)) => head,
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
    }
}

fn status(bytes: &[u8]) -> Option<u16> {
    match parsed(bytes) {
        Err(e) => e.status().map(|s| s.as_u16()),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bytes)),
    }
}

fn header_list(head: &RequestHead) -> Vec<(String, Vec<u8>)> {
    let headers = head.parts.headers.iter();
    headers
        .map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect()
}

fn post(version: &str, lines: &str) -> Vec<u8> {
    format!("POST /p HTTP/{version}\r\nHost: h\r\n{lines}\r\n").into_bytes()
}

#[test]
fn content_length_frames_the_body() {
    let h = head(&post("1.1", "Content-Length: 5\r\n"));
    assert_eq!(h.framing, BodyFraming::Length(5));
    assert!(h.keep_alive);
    assert_eq!(head(&post("1.1", "")).framing, BodyFraming::Length(0));
    assert_eq!(
        head(&post("1.1", "content-length: 007\r\n")).framing,
        BodyFraming::Length(7)
    );
    let max = format!("Content-Length: {MAX_CONTENT_LENGTH}\r\n");
    assert_eq!(
        head(&post("1.1", &max)).framing,
        BodyFraming::Length(u64::MAX - 2)
    );
}

#[test]
fn equal_content_lengths_keep_the_first_line() {
    let h = head(&post(
        "1.1",
        "Content-Length: 5\r\nX: 1\r\nContent-Length: 5\r\n",
    ));
    assert_eq!(h.framing, BodyFraming::Length(5));
    let names: Vec<_> = header_list(&h).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["host", "content-length", "x"]);
}

#[test]
fn different_content_lengths_are_refused() {
    assert_eq!(
        status(&post("1.1", "Content-Length: 5\r\nContent-Length: 6\r\n")),
        Some(400)
    );
    assert!(matches!(
        parsed(&post("1.1", "Content-Length: 5\r\nContent-Length: 05x\r\n")),
        Err(HeadError::ContentLength)
    ));
}

#[test]
fn invalid_content_lengths_are_refused() {
    for value in [
        "+5",
        "5 5",
        "",
        "5,5",
        "-1",
        "0x5",
        "18446744073709551616",
        "٥",
    ] {
        let lines = format!("Content-Length: {value}\r\n");
        assert!(
            matches!(parsed(&post("1.1", &lines)), Err(HeadError::ContentLength)),
            "{value:?}"
        );
        assert_eq!(status(&post("1.1", &lines)), Some(400));
    }
    for value in ["18446744073709551614", "18446744073709551615"] {
        let lines = format!("Content-Length: {value}\r\n");
        assert!(matches!(
            parsed(&post("1.1", &lines)),
            Err(HeadError::ContentLengthTooLarge)
        ));
        assert_eq!(status(&post("1.1", &lines)), Some(431));
    }
}

#[test]
fn chunked_transfer_encoding() {
    for value in ["chunked", "CHUNKED", "gzip, chunked", "gzip ,  Chunked"] {
        let h = head(&post("1.1", &format!("Transfer-Encoding: {value}\r\n")));
        assert_eq!(h.framing, BodyFraming::Chunked, "{value}");
        assert!(h.keep_alive);
    }
    let h = head(&post(
        "1.1",
        "Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n",
    ));
    assert_eq!(h.framing, BodyFraming::Chunked);
}

#[test]
fn transfer_encoding_not_ending_in_chunked_is_refused() {
    for lines in [
        "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: chunked, gzip\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n",
        "Transfer-Encoding: \r\n",
        "Transfer-Encoding: chunked\u{e9}\r\n",
    ] {
        assert!(matches!(
            parsed(&post("1.1", lines)),
            Err(HeadError::TransferEncoding)
        ));
        assert_eq!(status(&post("1.1", lines)), Some(400), "{lines:?}");
    }
}

#[test]
fn transfer_encoding_on_http10_is_refused() {
    let bytes = post("1.0", "Transfer-Encoding: chunked\r\n");
    assert!(matches!(
        parsed(&bytes),
        Err(HeadError::TransferEncodingHttp10)
    ));
    assert_eq!(status(&bytes), Some(400));
}

#[test]
fn transfer_encoding_overrides_content_length_and_closes() {
    for lines in [
        "Content-Length: 5\r\nX: 1\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nX: 1\r\nContent-Length: 5\r\n",
        "Transfer-Encoding: chunked\r\nX: 1\r\nContent-Length: nonsense\r\n",
    ] {
        let h = head(&post("1.1", lines));
        assert_eq!(h.framing, BodyFraming::Chunked);
        assert!(!h.keep_alive, "{lines:?}");
        let names: Vec<_> = header_list(&h).into_iter().map(|(n, _)| n).collect();
        assert!(!names.iter().any(|n| n == "content-length"), "{names:?}");
    }
}

#[test]
fn connection_decides_keep_alive() {
    let cases: [(&str, &str, bool); 12] = [
        ("1.1", "", true),
        ("1.1", "Connection: close\r\n", false),
        ("1.1", "Connection: Upgrade, CLOSE\r\n", false),
        (
            "1.1",
            "Connection: close\r\nConnection: keep-alive\r\n",
            false,
        ),
        (
            "1.1",
            "Connection: keep-alive\r\nConnection: close\r\n",
            false,
        ),
        ("1.1", "Connection: closed\r\n", true),
        ("1.0", "", false),
        ("1.0", "Connection: keep-alive\r\n", true),
        ("1.0", "Connection: Keep-Alive, foo\r\n", true),
        (
            "1.0",
            "Connection: keep-alive\r\nConnection: close\r\n",
            false,
        ),
        (
            "1.0",
            "Connection: close\r\nConnection: keep-alive\r\n",
            false,
        ),
        ("1.0", "Connection: keep-alive\u{e9}\r\n", false),
    ];
    for (version, lines, keep_alive) in cases {
        assert_eq!(
            head(&post(version, lines)).keep_alive,
            keep_alive,
            "{version} {lines:?}"
        );
    }
}

#[test]
fn expect_continue_needs_http11_and_a_body() {
    let cases: [(&str, &str, bool); 7] = [
        ("1.1", "Expect: 100-continue\r\nContent-Length: 1\r\n", true),
        (
            "1.1",
            "Expect: 100-Continue\r\nTransfer-Encoding: chunked\r\n",
            true,
        ),
        ("1.1", "Expect: 100-continue\r\n", false),
        (
            "1.1",
            "Expect: 100-continue\r\nContent-Length: 0\r\n",
            false,
        ),
        (
            "1.0",
            "Expect: 100-continue\r\nContent-Length: 1\r\n",
            false,
        ),
        (
            "1.1",
            "Expect: 100-continue\r\nExpect: x\r\nContent-Length: 1\r\n",
            false,
        ),
        (
            "1.1",
            "Expect: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n",
            true,
        ),
    ];
    for (version, lines, expect) in cases {
        assert_eq!(
            head(&post(version, lines)).expect_continue,
            expect,
            "{version} {lines:?}"
        );
    }
}

#[test]
fn every_split_point_is_partial_then_the_same() {
    let whole: &[u8] = b"\r\nPOST /a?b HTTP/1.1\r\nHost: h\nContent-Length: 3\r\nX-Y:\tz \r\n\r\n";
    let full = head(whole);
    for cut in 0..whole.len() {
        let mut buf = BytesMut::from(&whole[..cut]);
        assert!(matches!(parse(&mut buf), Ok(None)), "cut at {cut}");
        assert_eq!(buf.len(), cut);
        buf.extend_from_slice(&whole[cut..]);
        buf.extend_from_slice(b"abc");
        let h = parse(&mut buf).expect("valid").expect("complete");
        assert_eq!(&buf[..], b"abc");
        assert_eq!(
            (&h.parts.method, &h.parts.uri, h.parts.version, h.framing),
            (
                &full.parts.method,
                &full.parts.uri,
                full.parts.version,
                full.framing
            )
        );
        assert_eq!(header_list(&h), header_list(&full));
    }
    assert_eq!(header_list(&full)[2], ("x-y".to_owned(), b"z".to_vec()));
}

#[test]
fn pipelined_bytes_stay_in_the_buffer() {
    let mut buf = BytesMut::from(&b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\nGET /3"[..]);
    assert_eq!(parse(&mut buf).expect("ok").expect("head").parts.uri, "/1");
    assert_eq!(&buf[..], b"GET /2 HTTP/1.1\r\n\r\nGET /3");
    assert_eq!(parse(&mut buf).expect("ok").expect("head").parts.uri, "/2");
    assert!(parse(&mut buf).expect("ok").is_none());
    assert_eq!(&buf[..], b"GET /3");
}

#[test]
fn leading_empty_lines_are_skipped_with_the_head() {
    let mut buf = BytesMut::from(&b"\r\n\n\r\nGET / HTTP/1.1\r\n\r\nrest"[..]);
    assert!(parse(&mut buf).expect("ok").is_some());
    assert_eq!(&buf[..], b"rest");
    assert!(parsed(b"\r\n\r\n\n").expect("ok").is_none());
    // A CR not followed by LF is a broken line ending.
    assert_eq!(status(b"\rGET / HTTP/1.1\r\n\r\n"), Some(400));
}

#[test]
fn at_most_100_header_lines() {
    let lines = |n: usize| (0..n).map(|i| format!("X-{i}: v\r\n")).collect::<String>();
    assert_eq!(head(&post("1.1", &lines(99))).parts.headers.len(), 100);
    assert!(matches!(
        parsed(&post("1.1", &lines(100))),
        Err(HeadError::TooManyHeaders)
    ));
    assert_eq!(status(&post("1.1", &lines(100))), Some(431));
}

#[test]
fn bad_request_lines_are_400() {
    let cases: [&[u8]; 9] = [
        b"G(T / HTTP/1.1\r\n\r\n",
        b" / HTTP/1.1\r\n\r\n",
        b"GET /a\x7f HTTP/1.1\r\n\r\n",
        b"GET  / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET / HTTP/1.2\r\n\r\n",
        b"GET / http/1.1\r\n\r\n",
        b"GET http://[::1 HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nBad Name: v\r\n\r\n",
    ];
    for bytes in cases {
        assert_eq!(
            status(bytes),
            Some(400),
            "{:?}",
            String::from_utf8_lossy(bytes)
        );
    }
    assert!(matches!(
        parsed(b"G(T / HTTP/1.1\r\n\r\n"),
        Err(HeadError::Method)
    ));
    assert!(matches!(
        parsed(b"GET /\x01 HTTP/1.1\r\n\r\n"),
        Err(HeadError::Uri)
    ));
    assert!(matches!(
        parsed(b"GET / HTTP/3.0\r\n"),
        Err(HeadError::Version)
    ));
}

#[test]
fn long_targets_are_414() {
    let target = |len: usize| format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(len - 1));
    assert_eq!(
        head(target(MAX_URI_LEN).as_bytes()).parts.uri.path().len(),
        MAX_URI_LEN
    );
    assert!(matches!(
        parsed(target(MAX_URI_LEN + 1).as_bytes()),
        Err(HeadError::UriTooLong)
    ));
    assert_eq!(status(target(MAX_URI_LEN + 1).as_bytes()), Some(414));
}

/// A head of `len` bytes but for its final empty line, in lines of
/// up to 5000 bytes (fewer than 100).
fn big_head(len: usize) -> Vec<u8> {
    let mut lines = String::new();
    while lines.len() + 40 < len {
        let n = (len - lines.len() - 40).min(5000);
        lines.push_str(&format!("X: {}\r\n", "v".repeat(n)));
    }
    let mut head = post("1.1", &lines);
    head.truncate(head.len() - 2);
    head
}

/// A head cut at the limit, and that head ending 4 bytes past it.
fn over_max_head() -> (Vec<u8>, Vec<u8>) {
    let mut at = big_head(MAX_HEAD - 200);
    at.extend_from_slice(b"Y: ");
    at.resize(MAX_HEAD, b'y');
    let mut past = at.clone();
    past.extend_from_slice(b"\r\n\r\n");
    (at, past)
}

#[test]
fn heads_over_max_head_are_431() {
    let near = big_head(MAX_HEAD - 200);
    assert!(near.len() < MAX_HEAD);
    assert!(parsed(&near).expect("ok").is_none());
    let mut whole = near;
    whole.extend_from_slice(b"\r\n");
    assert!(parsed(&whole).expect("ok").is_some());
    let (at, past) = over_max_head();
    assert!(matches!(parsed(&at), Err(HeadError::TooLarge)));
    assert_eq!(status(&at), Some(431));
    // Had one read brought the end too, hyper would take it.
    assert!(parsed(&past).expect("ok").is_some());
}

/// Feeds `pieces` to a [`HeadReader`] one read at a time; what each read
/// gave: `Some(uri)` for a head, `None` for read more, or the error.
fn read_in_pieces(pieces: &[&[u8]]) -> (Vec<Result<Option<String>, String>>, BytesMut) {
    let (mut reader, mut buf) = (HeadReader::default(), BytesMut::new());
    let mut reads = Vec::new();
    for piece in pieces {
        buf.extend_from_slice(piece);
        loop {
            match reader.read(&mut buf) {
                Ok(Some(head)) => reads.push(Ok(Some(head.parts.uri.to_string()))),
                Ok(None) => {
                    reads.push(Ok(None));
                    break;
                }
                Err(e) => {
                    reads.push(Err(format!("{e:?}")));
                    return (reads, buf);
                }
            }
        }
    }
    (reads, buf)
}

#[test]
fn a_reader_takes_heads_in_pieces_and_pipelined() {
    let (reads, buf) = read_in_pieces(&[
        b"GET /1 HT",
        b"TP/1.1\r\nHost: a\r",
        b"\n",
        b"\r\nGET /2 HTTP/1.1\r\n\r\nGET /3 HTTP/1.1\r\n\r\nGE",
        b"T /4",
    ]);
    let uri = |u: &str| Ok(Some(u.to_owned()));
    assert_eq!(
        reads,
        [
            Ok(None),
            Ok(None),
            Ok(None),
            uri("/1"),
            uri("/2"),
            uri("/3"),
            Ok(None),
            Ok(None)
        ]
    );
    assert_eq!(&buf[..], b"GET /4");
}

#[test]
fn a_reader_parses_a_head_begun_in_pieces_again_only_when_it_may_end() {
    // Whole, the broken byte is refused at once.
    let (reads, _) = read_in_pieces(&[b"GET / HTTP/1.1\r\nHost: a\r\nX\x01: b\r\n"]);
    assert_eq!(reads, [Err("Header".to_owned())]);
    // In pieces, once a piece left the head incomplete, the next are not
    // parsed until one may end the head (hyper's `is_complete_fast`): the
    // broken byte is found at the head's end, as hyper finds it.
    let (reads, _) = read_in_pieces(&[
        b"GET / HTTP/1.1\r\nHost: a\r\n",
        b"X\x01: b\r\n",
        b"Y: c\r\n",
        b"\r\n",
    ]);
    assert_eq!(
        reads,
        [Ok(None), Ok(None), Ok(None), Err("Header".to_owned())]
    );
    // An end split over two reads is still seen.
    let (reads, _) = read_in_pieces(&[b"GET /s HTTP/1.1\r\nHost: a\r\n\r", b"\n"]);
    assert_eq!(reads, [Ok(None), Ok(Some("/s".to_owned())), Ok(None)]);
}

#[test]
fn a_reader_refuses_a_buffer_full_of_no_head() {
    let (at, _) = over_max_head();
    let (head, rest) = at.split_at(MAX_HEAD / 2);
    let (reads, _) = read_in_pieces(&[head, rest]);
    assert_eq!(reads, [Ok(None), Err("TooLarge".to_owned())]);
    // One byte short, it waits for more.
    let (reads, _) = read_in_pieces(&[head, &rest[..rest.len() - 1]]);
    assert_eq!(reads, [Ok(None), Ok(None)]);
}

#[test]
fn names_of_64_kib_are_431() {
    let name = |len: usize| post("1.1", &format!("{}: v\r\n", "n".repeat(len)));
    assert!(parsed(&name(MAX_NAME_LEN - 1)).expect("ok").is_some());
    assert!(matches!(
        parsed(&name(MAX_NAME_LEN)),
        Err(HeadError::NameTooLong)
    ));
}

#[test]
fn http2_preface_is_closed_without_an_answer() {
    let mut bytes = b"\r\n".to_vec();
    bytes.extend_from_slice(H2_PREFACE);
    assert!(matches!(parsed(&bytes), Err(HeadError::Http2Preface)));
    assert_eq!(status(&bytes), None);
    // Too short to tell: hyper answers 400.
    assert_eq!(status(&H2_PREFACE[..20]), Some(400));
}

#[test]
fn values_share_the_head() {
    let mut buf = BytesMut::from(&b"GET /x HTTP/1.1\r\nA: 1\r\n\r\n"[..]);
    let range = buf.as_ptr() as usize..buf.as_ptr() as usize + buf.len();
    let h = parse(&mut buf).expect("ok").expect("head");
    let value = h.parts.headers.get("a").expect("a").as_bytes().as_ptr() as usize;
    assert!(range.contains(&value));
}

// ---- The same decisions as hyper's server, on the same bytes. ----

/// What a service is handed, or what our parser says it would be.
#[derive(Debug, PartialEq)]
struct Seen {
    method: String,
    uri: String,
    version: Version,
    headers: Vec<(String, Vec<u8>)>,
    body: Result<Vec<u8>, ()>,
}

/// The second request appended after a complete first one: hyper serves
/// it exactly when the first kept the connection alive.
const NEXT: &[u8] = b"GET /next HTTP/1.1\r\nhost: n\r\n\r\n";
const CHUNKED_BODY: &[u8] = b"5\r\nhello\r\n0\r\n\r\n";

/// Runs hyper's HTTP/1 server on `input` (then EOF): the requests its
/// service saw, and the bytes it wrote back.
fn hyper_serves(input: &[u8]) -> (Vec<Seen>, Vec<u8>) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = runtime.expect("runtime");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let service_seen = seen.clone();
    let service = service_fn(move |req: hyper::Request<Incoming>| {
        let seen = service_seen.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes().to_vec())
                .map_err(|_| ());
            let headers = parts.headers.iter();
            let headers = headers.map(|(n, v)| (n.as_str().to_owned(), v.as_bytes().to_vec()));
            seen.lock().expect("lock").push(Seen {
                method: parts.method.to_string(),
                uri: parts.uri.to_string(),
                version: parts.version,
                headers: headers.collect(),
                body,
            });
            // Not 2xx: a CONNECT stays HTTP. An HTTP/1.0 answer must
            // say keep-alive for the request's own decision to stand.
            let mut res = hyper::Response::new(Empty::<Bytes>::new());
            *res.status_mut() = StatusCode::NOT_FOUND;
            if parts.version == Version::HTTP_10 {
                let keep = HeaderValue::from_static("keep-alive");
                res.headers_mut().insert(header::CONNECTION, keep);
            }
            Ok::<_, Infallible>(res)
        }
    });
    let out = runtime.block_on(async move {
        let (client, server) = tokio::io::duplex(1 << 21);
        let (mut read, mut write) = tokio::io::split(client);
        // All of it is in the pipe before hyper's first read.
        let _ = write.write_all(input).await;
        let _ = write.shutdown().await;
        // Half-close: hyper must answer after the client's EOF.
        let conn = http1::Builder::new()
            .half_close(true)
            .serve_connection(TokioIo::new(server), service);
        let server = tokio::spawn(conn);
        let mut out = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), read.read_to_end(&mut out));
        read.await
            .expect("hyper ends the connection")
            .expect("read");
        let _ = tokio::time::timeout(Duration::from_secs(10), server)
            .await
            .expect("server ends");
        out
    });
    let seen = std::mem::take(&mut *seen.lock().expect("lock"));
    (seen, out)
}

/// The status of the last response head in `out` before any body, after
/// a `100 Continue`, and whether one came.
fn first_final(out: &[u8]) -> Option<(u16, bool, String)> {
    let text = String::from_utf8_lossy(out);
    let (continued, rest) = match text.strip_prefix("HTTP/1.1 100 Continue\r\n\r\n") {
        Some(rest) => (true, rest),
        None => (false, &text[..]),
    };
    let head = rest.split("\r\n\r\n").next()?;
    let code = head.get(9..12)?.parse().ok()?;
    Some((code, continued, head.to_ascii_lowercase()))
}

/// Asserts that hyper's server decides on `head` as [`parse`] does.
fn same_as_hyper(input: &[u8]) {
    let what = String::from_utf8_lossy(input);
    let mut buf = BytesMut::from(input);
    match parse(&mut buf) {
        Err(e) => {
            let (seen, out) = hyper_serves(input);
            assert!(seen.is_empty(), "{what:?}: {e:?}, hyper served {seen:?}");
            let status = first_final(&out).map(|(code, _, _)| code);
            assert_eq!(status, e.status().map(|s| s.as_u16()), "{what:?}: {e:?}");
        }
        Ok(None) => {
            let (seen, out) = hyper_serves(input);
            assert!(
                seen.is_empty() && out.is_empty(),
                "{what:?}: {seen:?} {out:?}"
            );
        }
        Ok(Some(head)) => {
            assert!(buf.is_empty(), "{what:?}: a second head in the input");
            let (body, expected_body) = match head.framing {
                BodyFraming::Length(n) if n <= 64 => {
                    let body = vec![b'a'; n as usize];
                    (body.clone(), Ok(body))
                }
                BodyFraming::Length(_) => (vec![b'a'; 64], Err(())),
                BodyFraming::Chunked => (CHUNKED_BODY.to_vec(), Ok(b"hello".to_vec())),
            };
            let complete = expected_body.is_ok();
            let mut bytes = input.to_vec();
            bytes.extend_from_slice(&body);
            if complete {
                bytes.extend_from_slice(NEXT);
            }
            let (seen, out) = hyper_serves(&bytes);
            let ours = Seen {
                method: head.parts.method.to_string(),
                uri: head.parts.uri.to_string(),
                version: head.parts.version,
                headers: header_list(&head),
                body: expected_body,
            };
            assert_eq!(seen.first(), Some(&ours), "{what:?}");
            let served_next = seen.get(1).is_some_and(|s| s.uri == "/next");
            assert_eq!(
                served_next,
                complete && head.keep_alive,
                "{what:?}: {head:?}"
            );
            assert_eq!(seen.len(), 1 + usize::from(served_next), "{what:?}");
            let (code, continued, response) = first_final(&out).expect("a response");
            assert_eq!(code, 404, "{what:?}");
            assert_eq!(continued, head.expect_continue, "{what:?}");
            if complete && head.parts.version == Version::HTTP_11 {
                let close = response.contains("\r\nconnection: close");
                assert_eq!(close, !head.keep_alive, "{what:?}: {response}");
            }
        }
    }
}

#[test]
fn matches_hyper_on_tricky_heads() {
    let preface_after_bad_head = [
        &b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"[..],
        H2_PREFACE,
    ]
    .concat();
    let long_target = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_URI_LEN));
    let many = (0..101)
        .map(|i| format!("X-{i}: v\r\n"))
        .collect::<String>();
    let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
    let (at_max, past_max) = over_max_head();
    let mut near_max = big_head(MAX_HEAD - 200);
    near_max.extend_from_slice(b"\r\n");
    let long_name = format!("GET / HTTP/1.1\r\n{}: v\r\n\r\n", "n".repeat(MAX_NAME_LEN));
    let cases: Vec<&[u8]> = vec![
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"\r\n\r\nGET / HTTP/1.0\r\n\r\n",
        b"\n\nGET / HTTP/1.1\n\n",
        b"POST /u HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n",
        b"POST /u HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
        b"POST /u HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
        b"POST /u HTTP/1.1\r\nContent-Length: 5 5\r\n\r\n",
        b"POST /u HTTP/1.1\r\nContent-Length:\r\n\r\n",
        b"POST /u HTTP/1.1\r\nContent-Length: 18446744073709551614\r\n\r\n",
        b"POST /u HTTP/1.1\r\nContent-Length: 18446744073709551613\r\n\r\n",
        b"POST /u HTTP/1.1\r\nA: 1\r\nContent-Length: 3\r\nB: 2\r\nTransfer-Encoding: chunked\r\nC: 3\r\n\r\n",
        b"POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        b"POST /u HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"POST /u HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        b"POST /u HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n",
        b"POST /u HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: foo\r\n\r\n",
        b"GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.1\r\nConnection: close\r\nConnection: keep-alive\r\n\r\n",
        b"GET / HTTP/1.1\r\nConnection: foo,  Close \r\n\r\n",
        b"POST / HTTP/1.1\r\nExpect: 100-CONTINUE\r\nContent-Length: 2\r\n\r\n",
        b"POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
        b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n",
        b"CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n",
        b"CONNECT h:443 HTTP/1.0\r\nUpgrade: x\r\n\r\n",
        b"GET /ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
        b"GET / HTTP/1.1\r\nX: a\xffb\r\nY: \t sp \t\r\n\r\n",
        b"GET / HTTP/1.1\r\n: v\r\n\r\n",
        b"GET / HTTP/1.1\r\nX : v\r\n\r\n",
        b"GET / HTTP/1.1\r\n X: v\r\n\r\n",
        b"GET / HTTP/1.1\r\nX: v\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\rX: v\r\n\r\n",
        b"G\x01T / HTTP/1.1\r\n\r\n",
        b"GET /\x01 HTTP/1.1\r\n\r\n",
        b"GET http://[::1 HTTP/1.1\r\n\r\n",
        b"GET / HTTP/2.0\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n",
        b"\r\n\r\n",
        b"\r\n",
        H2_PREFACE,
        &preface_after_bad_head,
        long_target.as_bytes(),
        many.as_bytes(),
        &at_max,
        &past_max,
        &near_max,
        long_name.as_bytes(),
    ];
    for case in cases {
        same_as_hyper(case);
    }
}

/// Mostly one of `good`, now and then one of `bad`: a head with a bad
/// piece is refused whatever its other pieces, so bad ones are rare.
fn pick(good: Vec<&'static str>, bad: Vec<&'static str>) -> BoxedStrategy<&'static str> {
    prop_oneof![39 => select(good), 1 => select(bad)].boxed()
}

/// A header line's name and value, weighted toward the headers that
/// decide framing, keep-alive, 100-continue and upgrades.
fn header_line() -> impl Strategy<Value = (&'static str, &'static str)> {
    let named =
        |names: Vec<&'static str>, values: Vec<&'static str>| (select(names), select(values));
    prop_oneof![
        3 => named(
            vec!["Content-Length", "content-length", "CONTENT-LENGTH"],
            vec!["0", "3", "5", "5", "007", "70", "+5", "5 5", "", "5,5",
                 "18446744073709551614", "99999999999999999999"],
        ),
        3 => named(
            vec!["Transfer-Encoding", "transfer-encoding"],
            vec!["chunked", "chunked", "CHUNKED", "gzip, chunked", " chunked\t",
                 "chunked, gzip", "gzip", "", "chunked\u{e9}"],
        ),
        3 => named(
            vec!["Connection", "connection"],
            vec!["close", "keep-alive", "Keep-Alive", "upgrade, close", "foo",
                 "closed", "", "keep-alive\u{e9}"],
        ),
        2 => named(vec!["Expect", "expect"], vec!["100-continue", "100-Continue", "101-continue", ""]),
        2 => named(vec!["Upgrade", "upgrade"], vec!["websocket", "h2c", ""]),
        2 => named(vec!["Host", "host"], vec!["h", "h:80", "a b", ""]),
        2 => (
            pick(vec!["X-A", "x-a", "X_b", "x-A"], vec!["", "Bad Name", "X\u{1}", "X(", "\u{e9}"]),
            pick(vec!["v", "", "\u{e9}", "a\tb", "a b"], vec!["a\u{7f}b", "a\u{1}b"]),
        ),
    ]
}

/// Random request heads from a small grammar of good and bad pieces.
fn request_head() -> impl Strategy<Value = Vec<u8>> {
    let method = pick(
        vec!["GET", "POST", "HEAD", "CONNECT", "PUT", "M-SEARCH", "get"],
        vec!["G\u{1}T", "GE(T", "", "\u{e9}"],
    );
    let target = pick(
        vec![
            "/",
            "/a?b=c",
            "*",
            "http://h:80/p",
            "h:443",
            "//",
            "/%zz",
            "/a\"b",
        ],
        vec!["/\u{7f}", "/a#f", "\u{e9}", "http://[::1", "/a\u{1}"],
    );
    let version = pick(
        vec!["HTTP/1.1", "HTTP/1.0"],
        vec!["HTTP/2.0", "HTTP/1.2", "http/1.1", "HTTP/1."],
    );
    let space = pick(vec![" "], vec!["  ", "\t"]);
    let eol = || pick(vec!["\r\n", "\n"], vec!["\r", "\r\r\n"]);
    let colon = pick(vec![": ", ":", ":\t ", ":   "], vec![" : ", " :"]);
    let lines = prop::collection::vec((header_line(), colon, eol()), 0..7);
    let lead = select(vec!["", "", "", "\r\n", "\n\r\n"]);
    (lead, method, space, target, version, eol(), lines, eol()).prop_map(
        |(lead, method, space, target, version, eol, lines, last)| {
            let mut head = format!("{lead}{method}{space}{target} {version}{eol}");
            for ((name, value), colon, eol) in lines {
                head.push_str(&format!("{name}{colon}{value}{eol}"));
            }
            head.push_str(last);
            head.into_bytes()
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha, rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0002), ..ProptestConfig::default() })]

    #[test]
    fn matches_hyper_on_generated_heads(input in request_head()) {
        same_as_hyper(&input);
    }
}

/// hyper's `is_complete_fast` (role.rs), verbatim: the reference for
/// [`may_end`].
fn hypers_is_complete_fast(bytes: &[u8], prev_len: usize) -> bool {
    let start = prev_len.saturating_sub(3);
    let bytes = &bytes[start..];
    for (i, b) in bytes.iter().copied().enumerate() {
        if b == b'\r' {
            if bytes[i + 1..].chunks(3).next() == Some(&b"\n\r\n"[..]) {
                return true;
            }
        } else if b == b'\n'
            && (bytes.get(i + 1) == Some(&b'\n')
                || bytes[i + 1..].chunks(2).next() == Some(&b"\r\n"[..]))
        {
            return true;
        }
    }
    false
}

proptest::proptest! {
    /// A head is parsed again exactly when hyper's server would parse it.
    #[test]
    fn may_end_is_hypers_fast_check(
        bytes in proptest::collection::vec(proptest::sample::select(vec![b'\r', b'\n', b'a', b':']), 0..24),
        prev in 0usize..24,
    ) {
        let prev = prev.min(bytes.len());
        proptest::prop_assert_eq!(may_end(&bytes, prev), hypers_is_complete_fast(&bytes, prev));
    }
}
