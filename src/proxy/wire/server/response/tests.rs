//! The response head encoder against hyper's server (a real one, on
//! the same responses) and its size lines, last chunk and date.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body as _, Frame};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::proxy::wire::chunked::SizeLine;

/// The body's data: two chunks, the second long enough for a
/// three-digit size line.
const CHUNKS: [&str; 2] = ["hello world, ", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"];
const USER_DATE: &str = "Thu, 01 Jan 1970 00:00:00 GMT";

fn payload() -> Vec<u8> {
    CHUNKS.concat().into_bytes()
}

/// The service's body, as the response's body kinds a service returns.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    /// `Full` of nothing: at its end already.
    Empty,
    /// `Full` of the payload: its exact size.
    Full,
    /// The payload in two frames, size unknown (a stream).
    Stream,
    /// The payload in two frames with an exact size hint.
    StreamExact,
    /// No frame, an exact size of 0, but not at its end yet.
    ExactZero,
}

/// A streamed body: frames, trailers, a chosen size hint.
struct TestBody {
    chunks: VecDeque<Bytes>,
    trailers: Option<HeaderMap>,
    hint: SizeHint,
    ends_visibly: bool,
}

impl http_body::Body for TestBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let frame = match self.chunks.pop_front() {
            Some(chunk) => Some(Frame::data(chunk)),
            None => self.trailers.take().map(Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.ends_visibly && self.chunks.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        self.hint
    }
}

type TestResponse = Response<Either<Full<Bytes>, TestBody>>;

/// One exchange: the request's facts and the service's response.
#[derive(Clone, Debug)]
struct Case {
    method: Method,
    version: Version,
    req_connection: Option<&'static str>,
    te_trailers: bool,
    status: u16,
    res_version: Version,
    reason: bool,
    headers: Vec<(&'static str, String)>,
    body: Kind,
    trailers: bool,
}

fn case(method: Method, version: Version, status: u16, body: Kind) -> Case {
    Case {
        method,
        version,
        req_connection: None,
        te_trailers: false,
        status,
        res_version: Version::HTTP_11,
        reason: false,
        headers: Vec::new(),
        body,
        trailers: false,
    }
}

impl Case {
    fn conn(mut self, value: &'static str) -> Self {
        self.req_connection = Some(value);
        self
    }

    fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_owned()));
        self
    }

    /// A `content-length` header true to the body (hyper asserts so).
    fn length(self) -> Self {
        let len = if self.body == Kind::ExactZero {
            0
        } else {
            payload().len()
        };
        self.header("content-length", &len.to_string())
    }

    fn trailers(mut self, te: bool) -> Self {
        self.trailers = true;
        self.te_trailers = te;
        self
    }

    fn request(&self) -> Vec<u8> {
        let version = if self.version == Version::HTTP_10 {
            "1.0"
        } else {
            "1.1"
        };
        let target = if self.method == Method::CONNECT {
            "t:443"
        } else {
            "/"
        };
        let mut req = format!("{} {target} HTTP/{version}\r\nhost: t\r\n", self.method);
        if let Some(connection) = self.req_connection {
            req += &format!("connection: {connection}\r\n");
        }
        if self.te_trailers {
            req += "te: trailers\r\n";
        }
        if self.method == Method::POST {
            req += "content-length: 3\r\n\r\nabc";
        } else {
            req += "\r\n";
        }
        // Answered only if the connection is kept alive: then closes.
        req += "GET /second HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n";
        req.into_bytes()
    }

    /// hyper's keep-alive decision from the request head (role.rs:290).
    fn answering(&self) -> Answering<'_> {
        let tokens = |token: &str| {
            self.req_connection
                .is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
        };
        let keep_alive = if self.version == Version::HTTP_10 {
            tokens("keep-alive")
        } else {
            !tokens("close")
        };
        Answering {
            method: &self.method,
            version: self.version,
            keep_alive,
        }
    }

    fn trailer_map(&self) -> Option<HeaderMap> {
        self.trailers.then(|| {
            let mut map = HeaderMap::new();
            map.append("x-t", HeaderValue::from_static("v1"));
            map.append("content-type", HeaderValue::from_static("text/plain"));
            map.append("x-u", HeaderValue::from_static("undeclared"));
            map.append("x-t", HeaderValue::from_static("v2"));
            map
        })
    }

    fn response(&self) -> TestResponse {
        let streamed = |hint: SizeHint, chunks: &[&str], ends_visibly| TestBody {
            chunks: chunks.iter().map(|c| Bytes::from(c.to_string())).collect(),
            trailers: self.trailer_map(),
            hint,
            ends_visibly,
        };
        let len = payload().len() as u64;
        let body = match self.body {
            Kind::Empty => Either::Left(Full::new(Bytes::new())),
            Kind::Full => Either::Left(Full::new(Bytes::from(payload()))),
            Kind::Stream => Either::Right(streamed(SizeHint::new(), &CHUNKS, true)),
            Kind::StreamExact => Either::Right(streamed(SizeHint::with_exact(len), &CHUNKS, true)),
            Kind::ExactZero => Either::Right(streamed(SizeHint::with_exact(0), &[], false)),
        };
        let mut res = Response::new(body);
        *res.status_mut() = StatusCode::from_u16(self.status).expect("a status");
        *res.version_mut() = self.res_version;
        for (name, value) in &self.headers {
            let value = HeaderValue::from_str(value).expect("a header value");
            res.headers_mut().append(*name, value);
        }
        if self.reason {
            let reason = hyper::ext::ReasonPhrase::from_static(b"Fine Thanks");
            res.extensions_mut().insert(reason);
        }
        res
    }

    /// What tokenclock writes: the head, the framed body, and whether
    /// the second response follows.
    fn expected(&self) -> (Vec<u8>, bool) {
        let (parts, body) = self.response().into_parts();
        let mut out = Vec::new();
        let answering = self.answering();
        let hint = body.size_hint();
        let end = body.is_end_stream();
        let (framing, keep_alive) = match encode_head(&parts, &hint, end, &answering, &mut out) {
            Ok(decided) => decided,
            Err(_) => return (out, false),
        };
        let data: Vec<&str> = match self.body {
            Kind::Empty | Kind::ExactZero => vec![],
            Kind::Full => vec![CHUNKS[0], CHUNKS[1]],
            Kind::Stream | Kind::StreamExact => CHUNKS.to_vec(),
        };
        match framing {
            Framing::None => {}
            Framing::Length(n) => {
                let all = data.concat();
                out.extend_from_slice(&all.as_bytes()[..all.len().min(n as usize)]);
            }
            Framing::CloseDelimited => out.extend_from_slice(data.concat().as_bytes()),
            Framing::Chunked => {
                // Full is one frame.
                let frames = if self.body == Kind::Full {
                    vec![data.concat()]
                } else {
                    data.iter().map(|d| d.to_string()).collect()
                };
                for frame in frames {
                    out.extend_from_slice(SizeLine::new(frame.len()).as_bytes());
                    out.extend_from_slice(frame.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
                // A `Full` body has no trailers to give.
                let trailers = self
                    .trailer_map()
                    .filter(|_| !matches!(self.body, Kind::Empty | Kind::Full));
                encode_last_chunk(
                    trailers.as_ref(),
                    &parts.headers,
                    self.te_trailers,
                    &mut out,
                );
            }
        }
        (out, keep_alive)
    }
}

/// Everything hyper's server writes for the case's request, until it
/// closes the connection.
async fn hyper_writes(case: &Case) -> Vec<u8> {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let service_case = case.clone();
    let service = service_fn(move |req: Request<Incoming>| {
        let case = service_case.clone();
        async move {
            let second = req.uri().path() == "/second";
            let _ = req.into_body().collect().await;
            let res = if second {
                Response::new(Either::Left(Full::new(Bytes::from_static(b"second"))))
            } else {
                case.response()
            };
            Ok::<_, Infallible>(res)
        }
    });
    let conn = tokio::spawn(async move {
        let conn = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(server), service);
        let _ = conn.await;
    });
    let mut out = Vec::new();
    let exchange = async {
        client
            .write_all(&case.request())
            .await
            .expect("request written");
        client.read_to_end(&mut out).await.expect("response read");
    };
    tokio::time::timeout(Duration::from_secs(5), exchange)
        .await
        .expect("hyper closes the connection within 5 s");
    conn.abort();
    out
}

/// Masks the values of the `date` headers hyper (or we) added.
fn mask_dates(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out = String::new();
    let mut rest = &*text;
    while let Some(at) = rest.find("\r\ndate: ") {
        let (before, after) = rest.split_at(at + 8);
        out += before;
        let end = after.find("\r\n").unwrap_or(after.len());
        let value = &after[..end];
        if value == USER_DATE {
            out += value;
        } else {
            assert_eq!(value.len(), DATE_VALUE_LENGTH, "date {value:?}");
            assert!(value.ends_with(" GMT"), "date {value:?}");
            out += "<date>";
        }
        rest = &after[end..];
    }
    out + rest
}

async fn check(case: Case) {
    let written = hyper_writes(&case).await;
    let (expected, keep_alive) = case.expected();
    let actual = mask_dates(&written);
    let expected = mask_dates(&expected);
    let first = actual.get(..expected.len().min(actual.len())).unwrap_or("");
    assert_eq!(first, expected, "first response of {case:#?}");
    let rest = &actual[expected.len()..];
    assert_eq!(
        !rest.is_empty(),
        keep_alive,
        "kept alive, rest {rest:?}, {case:#?}"
    );
    if keep_alive {
        assert!(rest.starts_with("HTTP/1.1 200 OK\r\n"), "{rest:?}");
        assert!(rest.ends_with("\r\n\r\nsecond"), "{rest:?}");
    }
}

use Method as M;
use Version as V;

fn table() -> Vec<Case> {
    let (get, head, post, connect) = (M::GET, M::HEAD, M::POST, M::CONNECT);
    vec![
        case(get.clone(), V::HTTP_11, 200, Kind::Full),
        case(get.clone(), V::HTTP_11, 200, Kind::Empty),
        case(get.clone(), V::HTTP_11, 200, Kind::Stream),
        case(get.clone(), V::HTTP_11, 200, Kind::StreamExact),
        case(get.clone(), V::HTTP_11, 200, Kind::ExactZero),
        case(get.clone(), V::HTTP_11, 200, Kind::Stream).conn("close"),
        case(get.clone(), V::HTTP_11, 201, Kind::Full).length(),
        case(get.clone(), V::HTTP_11, 404, Kind::Stream).length(),
        case(get.clone(), V::HTTP_11, 500, Kind::Empty).length(),
        case(get.clone(), V::HTTP_11, 204, Kind::Stream),
        case(get.clone(), V::HTTP_11, 204, Kind::Full).length(),
        case(get.clone(), V::HTTP_11, 304, Kind::Full).length(),
        case(get.clone(), V::HTTP_11, 304, Kind::Empty),
        case(head.clone(), V::HTTP_11, 200, Kind::Full),
        case(head.clone(), V::HTTP_11, 200, Kind::Stream),
        case(head.clone(), V::HTTP_11, 200, Kind::Empty).length(),
        case(head.clone(), V::HTTP_11, 200, Kind::Empty)
            .length()
            .header("content-length", "5"),
        case(head.clone(), V::HTTP_10, 200, Kind::Full).conn("keep-alive"),
        case(post.clone(), V::HTTP_11, 201, Kind::Stream),
        case(post.clone(), V::HTTP_11, 200, Kind::Stream).header("transfer-encoding", "chunked"),
        case(post.clone(), V::HTTP_11, 200, Kind::Full)
            .header("transfer-encoding", "gzip")
            .header("connection", "upgrade")
            .header("x-a", "1"),
        case(post.clone(), V::HTTP_11, 200, Kind::Stream)
            .header("transfer-encoding", "chunked")
            .length(),
        case(post.clone(), V::HTTP_11, 200, Kind::Stream)
            .length()
            .header("transfer-encoding", "chunked"),
        case(get.clone(), V::HTTP_11, 200, Kind::Stream).header("content-length", "x"),
        case(get.clone(), V::HTTP_11, 200, Kind::Stream)
            .length()
            .header("content-length", "7"),
        case(get.clone(), V::HTTP_10, 200, Kind::Full),
        case(get.clone(), V::HTTP_10, 200, Kind::Stream),
        case(get.clone(), V::HTTP_10, 200, Kind::Stream).conn("keep-alive"),
        case(get.clone(), V::HTTP_10, 200, Kind::Full).conn("keep-alive"),
        case(get.clone(), V::HTTP_10, 200, Kind::Full)
            .conn("keep-alive")
            .header("connection", "x-foo"),
        case(get.clone(), V::HTTP_10, 200, Kind::Stream).header("transfer-encoding", "chunked"),
        case(get.clone(), V::HTTP_11, 200, Kind::Full)
            .conn("close")
            .header("connection", "x-foo")
            .header("x-b", "2"),
        case(get.clone(), V::HTTP_11, 200, Kind::Full).header("connection", "close"),
        case(get.clone(), V::HTTP_11, 200, Kind::Full).header("date", USER_DATE),
        case(get.clone(), V::HTTP_11, 200, Kind::Stream)
            .header("trailer", "x-t, Content-Type")
            .trailers(true),
        case(get.clone(), V::HTTP_11, 200, Kind::Stream)
            .header("trailer", "x-t")
            .trailers(false),
        case(get.clone(), V::HTTP_11, 200, Kind::StreamExact)
            .header("trailer", "x-t")
            .trailers(true),
        case(get.clone(), V::HTTP_10, 200, Kind::Stream)
            .conn("keep-alive")
            .header("trailer", "x-t")
            .trailers(true),
        case(get.clone(), V::HTTP_11, 100, Kind::Full),
        case(head.clone(), V::HTTP_11, 103, Kind::Full),
        case(get.clone(), V::HTTP_11, 101, Kind::Stream),
        case(connect.clone(), V::HTTP_11, 200, Kind::Stream),
        case(connect.clone(), V::HTTP_11, 200, Kind::Full).length(),
        case(connect.clone(), V::HTTP_11, 404, Kind::Full),
        Case {
            res_version: V::HTTP_10,
            ..case(get.clone(), V::HTTP_11, 200, Kind::Stream)
        },
        Case {
            res_version: V::HTTP_10,
            ..case(get.clone(), V::HTTP_10, 200, Kind::Full)
        }
        .conn("keep-alive"),
        Case {
            res_version: V::HTTP_2,
            ..case(get.clone(), V::HTTP_10, 200, Kind::Full)
        }
        .conn("keep-alive"),
        Case {
            res_version: V::HTTP_2,
            ..case(get.clone(), V::HTTP_11, 404, Kind::Full)
        },
        Case {
            reason: true,
            ..case(post.clone(), V::HTTP_11, 200, Kind::Full)
        },
        Case {
            reason: true,
            ..case(get.clone(), V::HTTP_10, 500, Kind::Empty)
        },
    ]
}

#[tokio::test]
async fn heads_match_hyper_on_table() {
    for case in table() {
        check(case).await;
    }
}

#[tokio::test]
async fn unsupported_version_is_refused_like_hyper_panics() {
    let case = Case {
        res_version: V::HTTP_3,
        ..case(M::GET, V::HTTP_11, 404, Kind::Full)
    };
    let (parts, _) = case.response().into_parts();
    let mut dst = Vec::new();
    let result = encode_head(
        &parts,
        &SizeHint::with_exact(1),
        false,
        &case.answering(),
        &mut dst,
    );
    assert_eq!(result, Err(EncodeError::UnsupportedVersion(V::HTTP_3)));
    assert!(dst.is_empty());
    check(case).await;
}

fn arb_case() -> impl Strategy<Value = Case> {
    let methods = prop::sample::select(vec![M::GET, M::HEAD, M::POST, M::CONNECT]);
    let versions = prop::sample::select(vec![V::HTTP_10, V::HTTP_11]);
    let req_conn = prop::sample::select(vec![
        None,
        Some("close"),
        Some("keep-alive"),
        Some("Keep-Alive, x"),
    ]);
    let statuses = prop::sample::select(vec![200u16, 201, 204, 304, 404, 500, 101, 100]);
    let res_versions = prop::sample::select(vec![V::HTTP_11, V::HTTP_10, V::HTTP_2]);
    let kinds = prop::sample::select(vec![
        Kind::Empty,
        Kind::Full,
        Kind::Stream,
        Kind::StreamExact,
        Kind::ExactZero,
    ]);
    // Names and values; `content-length` is true to the body.
    let headers = prop::collection::vec(0..10usize, 0..6);
    (
        (methods, versions, req_conn, any::<bool>()),
        (
            statuses,
            res_versions,
            any::<bool>(),
            headers,
            kinds,
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (method, version, conn, te),
                (status, res_version, reason, headers, body, trailers),
            )| {
                let mut case = Case {
                    req_connection: conn,
                    te_trailers: te,
                    res_version,
                    reason,
                    trailers,
                    ..case(method, version, status, body)
                };
                for pick in headers {
                    case = match pick {
                        0 | 1 => case.length(),
                        2 => case.header("transfer-encoding", "chunked"),
                        3 => case.header("transfer-encoding", "gzip"),
                        4 => case.header("connection", "close"),
                        5 => case.header("connection", "keep-alive"),
                        6 => case.header("connection", "upgrade"),
                        7 => case.header("date", USER_DATE),
                        8 => case.header("trailer", "x-t, content-type"),
                        _ => case.header("x-a", "1"),
                    };
                }
                case
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        rng_algorithm: proptest::test_runner::RngAlgorithm::ChaCha,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_0001),
        ..ProptestConfig::default()
    })]

    #[test]
    fn heads_match_hyper_on_random_cases(case in arb_case()) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(check(case));
    }
}

#[test]
fn last_chunk_writes_only_declared_valid_trailers_when_asked() {
    let mut head = HeaderMap::new();
    head.append(
        header::TRAILER,
        HeaderValue::from_static(" X-T ,content-type"),
    );
    head.append(header::TRAILER, HeaderValue::from_static("x-w"));
    let mut trailers = HeaderMap::new();
    trailers.append("x-t", HeaderValue::from_static("1"));
    trailers.append("content-type", HeaderValue::from_static("a/b"));
    trailers.append("x-u", HeaderValue::from_static("2"));
    trailers.append("x-w", HeaderValue::from_static("3"));
    trailers.append("x-t", HeaderValue::from_static("4"));
    let last = |trailers: Option<&HeaderMap>, te| {
        let mut dst = Vec::new();
        encode_last_chunk(trailers, &head, te, &mut dst);
        String::from_utf8(dst).expect("ascii")
    };
    assert_eq!(last(None, true), "0\r\n\r\n");
    assert_eq!(last(Some(&trailers), false), "0\r\n\r\n");
    assert_eq!(
        last(Some(&trailers), true),
        "0\r\nx-t: 1\r\nx-t: 4\r\nx-w: 3\r\n\r\n"
    );
    assert_eq!(last(Some(&HeaderMap::new()), true), "0\r\n\r\n");
}

#[test]
fn dates_are_imf_fixdates() {
    let date = |secs| String::from_utf8(render_date(secs).to_vec()).expect("ascii");
    assert_eq!(date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
    assert_eq!(date(784_111_777), "Sun, 06 Nov 1994 08:49:37 GMT");
    assert_eq!(date(951_782_400), "Tue, 29 Feb 2000 00:00:00 GMT");
    assert_eq!(date(4_102_444_799), "Thu, 31 Dec 2099 23:59:59 GMT");
}

#[tokio::test]
async fn date_matches_hypers() {
    let now = || {
        let mut dst = Vec::new();
        extend_date(&mut dst);
        String::from_utf8(dst).expect("ascii")
    };
    let case = case(M::GET, V::HTTP_11, 200, Kind::Full).conn("close");
    for _ in 0..3 {
        let before = now();
        let written = String::from_utf8(hyper_writes(&case).await).expect("ascii");
        let after = now();
        if before == after {
            assert!(
                written.contains(&format!("\r\ndate: {before}\r\n")),
                "{written}"
            );
            return;
        }
    }
    panic!("the second changed three times in a row");
}
