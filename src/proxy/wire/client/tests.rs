use bytes::BytesMut;
use http::{header, Method, Request, StatusCode, Version};

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

/// hyper's client rules (`Role::set_length`), but for a `GET` of unknown
/// size, whose body a client sent (hyper's sends none).
#[test]
fn the_body_framing_is_chosen_as_hyper_chooses_it() {
    for method in [Method::POST, Method::GET] {
        let (text, framing) = encoded(method, &[], BodySize::Unknown);
        assert!(text.contains("transfer-encoding: chunked\r\n"), "{text}");
        assert_eq!(framing, Framing::Chunked);
    }
    let (text, framing) = encoded(Method::GET, &[], BodySize::Empty);
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
            "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\ncontent-length: 3\r\n\r\n",
            Method::POST
        ),
        Framing::Chunked,
        "transfer-encoding wins over content-length"
    );
    // A coding besides `chunked` is refused (`502`): forwarded, the body
    // went to the client still coded, labelled plain chunked.
    for codings in [
        "gzip, chunked",
        "chunked, gzip",
        "gzip",
        "identity",
        "chunked, chunked",
        "",
        ",",
    ] {
        let head = format!("HTTP/1.1 200 OK\r\ntransfer-encoding: {codings}\r\n\r\n");
        assert!(parse(head.as_bytes(), &Method::POST).is_err(), "{codings}");
    }
    let split = b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\ntransfer-encoding: chunked\r\n\r\n";
    assert!(parse(split, &Method::POST).is_err(), "on two lines");
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

/// A head of more header lines than hyper's 100 (an API gateway's, a
/// CDN's) is read whole, every line in order; past 1,024 it fails, saying
/// so (it was a `502` "larger than 417792 bytes" for a head of 1.3 KB).
#[test]
fn heads_of_more_than_a_hundred_lines_are_read() {
    let head_of = |lines: usize| {
        let mut head = b"HTTP/1.1 200 OK\r\n".to_vec();
        for i in 0..lines {
            head.extend_from_slice(format!("x-h{i}: v{i}\r\n").as_bytes());
        }
        head.extend_from_slice(b"content-length: 0\r\n\r\n");
        head
    };
    let head = parse(&head_of(120), &Method::GET)
        .expect("valid")
        .expect("whole");
    let headers = head.response.headers();
    assert_eq!(headers.len(), 121);
    assert_eq!(
        headers.get("x-h119").map(|v| v.as_bytes()),
        Some(&b"v119"[..])
    );
    assert!(matches!(
        parse(&head_of(1024), &Method::GET),
        Err(WireError::TooManyHeaders)
    ));
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

/// RFC 9112 §5.1: whitespace between a response field's name and its colon
/// is removed by a proxy, not forwarded; and the field still counts (here
/// for the framing).
#[test]
fn whitespace_before_a_response_fields_colon_is_removed() {
    let whole = b"HTTP/1.1 200 OK\r\nx-a : 1\r\nTransfer-Encoding\t: chunked\r\n\r\n";
    let head = parse(whole, &Method::POST).expect("valid").expect("whole");
    assert_eq!(head.response.headers()["x-a"], "1");
    assert_eq!(head.framing, Framing::Chunked);
    let names: Vec<_> = head.response.headers().keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["x-a", "transfer-encoding"]);
}
