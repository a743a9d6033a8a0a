//! The fuzz targets: one function per target, each taking arbitrary bytes.
//!
//! Shared by the libFuzzer binaries of `tests/fuzz/` (nightly, `cargo fuzz`)
//! and the stable smoke test `tests/it/fuzz_smoke.rs`, which replays the corpus
//! and a seeded mutation loop through the very same functions.
//!
//! Every target asserts, besides not panicking, that feeding its input in
//! pieces gives what feeding it whole gives (the framers are sans-IO and
//! must not care where the network cut the stream) and that the memory a
//! framer holds stays within `max_event_bytes`.

use std::{
    collections::VecDeque,
    convert::Infallible,
    pin::Pin,
    sync::{Arc, Mutex, OnceLock},
    task::{Context, Poll, Waker},
};

use bytes::{Bytes, BytesMut};
use http::{Method, Request, Response};
use http_body::{Body, Frame};
use tokenclock::{
    config::File,
    measure::coding::PANICS,
    measure::dialect::{Dialect, RequestInfo, FORM_FIELDS},
    measure::exchange::Exchange,
    measure::frame::form::FormFields,
    measure::frame::ndjson::NdjsonFramer,
    measure::frame::sse::SseFramer,
    measure::observe::{End, Observe},
    measure::read::ReadSettings,
    measure::timeline::{Timeline, TimelineSink},
    proxy::forward::StripUsage,
    proxy::wire::chunked::{ChunkedError, Decoded, Decoder},
    proxy::wire::server::request::{BodyFraming, HeadReader, RequestHead, MAX_HEAD},
};
use tokio::time::Instant;

/// The event size limits the targets choose from: tiny ones reach the
/// oversize paths with short inputs, the last is the shipped default.
const LIMITS: [usize; 4] = [1, 16, 300, 1024 * 1024];

/// Where cuts fall: a small xorshift seeded from the input, so a crash
/// reproduces from its input alone.
struct Cuts(u64);

impl Cuts {
    fn new(seed: u8, input: &[u8]) -> Self {
        Self(0x9E37_79B9_7F4A_7C15 ^ u64::from(seed) ^ ((input.len() as u64) << 8))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `input` cut into pieces of 0 to 15 bytes (empty pieces included:
    /// a framer must take an empty feed).
    fn split<'a>(&mut self, input: &'a [u8]) -> Vec<&'a [u8]> {
        let mut pieces = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            let n = (self.next() % 16) as usize;
            let (piece, tail) = rest.split_at(n.min(rest.len()));
            pieces.push(piece);
            rest = tail;
        }
        pieces
    }
}

/// The first byte of an input, as the target's options, and the rest.
fn options(data: &[u8]) -> Option<(u8, &[u8])> {
    let (&first, rest) = data.split_first()?;
    Some((first, rest))
}

/// SSE: the framer gives the same events and counts however the stream is
/// cut, holds at most `max_event_bytes`, and never hands over an event
/// larger than that; the usage stripper of `usage_mode = "inject"` forwards
/// the same bytes however its input is cut.
pub fn sse(data: &[u8]) {
    let Some((opt, input)) = options(data) else {
        return;
    };
    let max = LIMITS[usize::from(opt & 3)];
    framed(opt, input, |pieces| sse_events(max, pieces));
    let stripped = strip_usage(&[input]);
    let mut cuts = Cuts::new(!opt, input);
    assert_eq!(strip_usage(&cuts.split(input)), stripped, "stripper split");
    assert!(stripped.len() <= input.len(), "the stripper only removes");
}

/// A framer's `run` over `input` whole, cut at points drawn from `opt`,
/// and byte by byte: all three must agree.
fn framed<T: PartialEq + std::fmt::Debug>(opt: u8, input: &[u8], run: impl Fn(&[&[u8]]) -> T) {
    let whole = run(&[input]);
    let mut cuts = Cuts::new(opt, input);
    assert_eq!(run(&cuts.split(input)), whole, "split feed");
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(run(&bytes), whole, "byte by byte");
}

/// Events (type, data), stats and bytes left pending, after feeding `pieces`.
type SseRun = (Vec<(Vec<u8>, Vec<u8>)>, String, usize);

fn sse_events(max: usize, pieces: &[&[u8]]) -> SseRun {
    let mut framer = SseFramer::new(max);
    let mut events = Vec::new();
    for piece in pieces {
        framer.feed(piece, &mut |e| {
            assert!(e.event.len() + e.data.len() <= max, "event over the limit");
            events.push((e.event.to_vec(), e.data.to_vec()));
        });
        assert!(framer.pending_bytes() <= max, "framer holds over the limit");
    }
    (
        events,
        format!("{:?}", framer.stats()),
        framer.pending_bytes(),
    )
}

/// NDJSON: the same lines and counts however the stream is cut, at most
/// `max_event_bytes` per line and `max_event_bytes + 1` held.
pub fn ndjson(data: &[u8]) {
    let Some((opt, input)) = options(data) else {
        return;
    };
    let max = LIMITS[usize::from(opt & 3)];
    framed(opt, input, |pieces| ndjson_lines(max, pieces));
}

fn ndjson_lines(max: usize, pieces: &[&[u8]]) -> (Vec<Vec<u8>>, String) {
    let mut framer = NdjsonFramer::new(max);
    let mut lines = Vec::new();
    let mut sink = |line: &[u8]| {
        assert!(line.len() <= max, "line over the limit");
        lines.push(line.to_vec());
    };
    for piece in pieces {
        framer.feed(piece, &mut sink);
        assert!(
            framer.pending_bytes() <= max + 1,
            "framer holds over the limit"
        );
    }
    framer.finish(&mut sink);
    (lines, format!("{:?}", framer.stats()))
}

/// Every dialect, through the real pipeline: the first byte picks the
/// dialect (its low three bits, and the second byte's lowest bit above
/// them: [`read_dialect`]; a request path of that family), how the
/// response is framed (SSE, NDJSON or a whole JSON body, or SSE with TGI's
/// `x-compute-type` head, TGI's then asked on `POST /`), the event size
/// limit and how the body ends; the second byte's bit 1 sends a rerank to
/// the `/rerank` it shares with TEI, and its bit 2 makes the router's head
/// TEI's (`x-compute-tokens`, and timing headers whose values bits 3 to 5
/// pick, hostile ones among them: [`HEADER_VALUES`]), then asked on
/// `POST /`, `/rerank` or `/embed` (which the dialect picks), whose answer
/// is then `tei`'s, read from the head; the rest is the response body.
/// What the timeline says must not depend on where the body was cut. The
/// paths two servers share (`/generate`, `/api/chat`, `POST /`, `/rerank`)
/// are read through the decision the exchange takes from the head and the
/// body.
pub fn dialect(data: &[u8]) {
    let Some((opt, body)) = options(data) else {
        return;
    };
    let Some((more, body)) = options(body) else {
        return;
    };
    let dialect = read_dialect(opt & 7 | (more & 1) << 3);
    let framing = usize::from(opt >> 3 & 3);
    let content_type = [
        "text/event-stream",
        "application/x-ndjson",
        "application/json",
        "text/event-stream",
    ][framing];
    let router_head = framing == 3;
    let tei_head = router_head && more & 4 != 0;
    let shared_rerank = more & 2 != 0;
    let value = HEADER_VALUES[usize::from(more >> 3 & 7)];
    let max = LIMITS[usize::from(opt >> 5 & 3)];
    let end = if opt & 0x80 == 0 {
        End::Complete
    } else {
        End::Failed { timeout: false }
    };
    let run = |pieces: &[&[u8]]| {
        // TGI's route for the Inference API's clients, counted `unknown`
        // until TGI's head shows; TEI's routes likewise, but `/rerank`,
        // which is a rerank's until then.
        let (path, routed) = match (dialect, router_head, tei_head) {
            (_, _, true) => [
                ("/", Dialect::Unknown),
                ("/rerank", Dialect::Rerank),
                ("/embed", Dialect::Unknown),
            ][dialect as usize % 3],
            (Dialect::Tgi, true, _) => ("/", Dialect::Unknown),
            (Dialect::Rerank, _, _) if shared_rerank => ("/rerank", Dialect::Rerank),
            _ => (path(dialect), routed(dialect)),
        };
        let (sink, exchange, upload) = start_request(Method::POST, path, routed, max, None);
        upload.on_end(End::Complete, Instant::now());
        let mut head = vec![];
        if router_head {
            head.push(("x-compute-type", "gpu+optimized"));
        }
        if tei_head {
            head.extend([
                ("x-compute-tokens", value),
                ("x-queue-time", value),
                (
                    "x-inference-time",
                    HEADER_VALUES[usize::from(body.len() as u8 & 7)],
                ),
            ]);
        }
        respond_with(exchange, content_type, "identity", &head, pieces, end);
        let timeline = sink.take();
        if tei_head {
            // A TEI answer is read from its head, never from its body.
            assert_eq!(timeline.dialect, Dialect::Tei, "TEI's head on {path}");
            assert_eq!(timeline.events, 0, "a TEI body is not read");
            assert!(timeline.parse_errors.is_empty(), "a TEI body is not read");
        }
        summary(&timeline)
    };
    let whole = run(&[body]);
    let mut cuts = Cuts::new(opt, body);
    assert_eq!(run(&cuts.split(body)), whole, "split response");
}

/// The dialect four option bits pick, among those that read a response
/// body: every one in `Dialect::ALL` but the last two, `Tei` (whose head
/// reports what there is) and `Unknown`, which read none. The low three
/// bits alone pick the first eight, as they did before the ninth (the
/// committed corpus keeps its meaning: its files' second byte is 0); 8 to
/// 12 pick the ninth to the thirteenth, and 13 and above go round from the
/// first.
pub fn read_dialect(bits: u8) -> Dialect {
    let read = Dialect::ALL.len() - 2;
    Dialect::ALL[usize::from(bits) % read]
}

const _UNREAD_LAST: () = assert!(
    matches!(Dialect::ALL[Dialect::ALL.len() - 2], Dialect::Tei)
        && matches!(Dialect::ALL[Dialect::ALL.len() - 1], Dialect::Unknown)
);

/// What the timing and count headers of TEI's head say in the `dialect`
/// target: counts and milliseconds, and values no server should send
/// (negative, past `Duration`'s range, not a number, past `u64`).
const HEADER_VALUES: [&str; 8] = [
    "0",
    "12",
    "3.75",
    "-1",
    "1e30",
    "NaN",
    "abc",
    "18446744073709551616",
];

/// The codings a compressed response may come in, as the `coding` target
/// picks them (its option byte's two low bits).
pub const CODINGS: [&str; 4] = ["gzip", "deflate", "br", "zstd"];

/// Compressed responses through the real pipeline: the option byte picks
/// the coding (bits 0-1, [`CODINGS`]), the dialect (bits 2-4, and bit 6
/// above them: [`read_dialect`]) and whether the body is an SSE stream or
/// a whole JSON body (bit 5); the rest is the compressed body. No decoder panics, even one the proxy would survive,
/// and a body that decodes is read the same however it was cut (one that
/// does not, or is a bomb, may stop at another point of it).
pub fn coding(data: &[u8]) {
    let Some((opt, body)) = options(data) else {
        return;
    };
    let coding = CODINGS[usize::from(opt & 3)];
    let dialect = read_dialect(opt >> 2 & 7 | (opt >> 6 & 1) << 3);
    let content_type = ["text/event-stream", "application/json"][usize::from(opt >> 5 & 1)];
    let panics = PANICS.load(std::sync::atomic::Ordering::Relaxed);
    let run = |pieces: &[&[u8]]| {
        let (sink, exchange, upload) = start(dialect, Method::POST, 1024 * 1024);
        upload.on_end(End::Complete, Instant::now());
        respond_coded(exchange, content_type, coding, pieces, End::Complete);
        let timeline = sink.take();
        let decoded = !timeline
            .parse_errors
            .iter()
            .any(|e| e.as_str() == "unparsed_encoding");
        (summary(&timeline), decoded)
    };
    let whole = run(&[body]);
    let mut cuts = Cuts::new(opt, body);
    let split = run(&cuts.split(body));
    let after = PANICS.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(after, panics, "a decoder panicked");
    if whole.1 && split.1 {
        assert_eq!(split.0, whole.0, "split compressed response");
    }
}

/// The content type of the forms the `request` target sends (option bit 6).
pub const FORM: &str = "multipart/form-data; boundary=fuzzform";

/// The request-body reader: what the exchange learns from a request body
/// sent in pieces is what `RequestInfo::parse` reads from it whole, or
/// nothing when the body is over `request_capture_bytes`, not a POST, or of
/// an unknown dialect; sent as a form ([`FORM`], option bit 6), what its
/// fields read whole say, whatever its size; the byte count is exact
/// either way.
pub fn request(data: &[u8]) {
    let Some((opt, body)) = options(data) else {
        return;
    };
    let dialect = Dialect::ALL[usize::from(opt & 7)];
    let method = if opt & 8 == 0 {
        Method::POST
    } else {
        Method::GET
    };
    let cap = LIMITS[usize::from(opt >> 4 & 3)];
    // A form (speech to text's) is read as it passes, whatever its size.
    let form = (opt & 0x40 != 0).then_some(FORM);
    let (sink, exchange, mut upload) =
        start_request(method.clone(), path(dialect), routed(dialect), cap, form);
    let mut cuts = Cuts::new(opt, body);
    for piece in cuts.split(body) {
        upload.on_data(&Bytes::copy_from_slice(piece), Instant::now());
    }
    upload.on_end(End::Complete, Instant::now());
    respond(exchange, "application/json", &[], End::Complete);
    let timeline = sink.take();
    let read = method == Method::POST && dialect != Dialect::Unknown;
    let want = match form {
        _ if !read => RequestInfo::default(),
        Some(form) => {
            let mut fields = FormFields::new(form.as_bytes(), FORM_FIELDS).expect("a form");
            fields.feed(body);
            RequestInfo::from_form(|i| fields.value(i))
        }
        None if body.len() <= cap => RequestInfo::parse(dialect, body),
        None => RequestInfo::default(),
    };
    assert_eq!(timeline.request, want, "what the request body said");
    assert_eq!(timeline.bytes_in, body.len() as u64, "request bytes");
    if let Some(model) = &timeline.request.model {
        assert!(model.len() < body.len(), "the model comes from the body");
    }
}

/// Keeps the one timeline an exchange hands over.
#[derive(Default)]
struct Keep(Mutex<Option<Timeline>>);

impl TimelineSink for Keep {
    fn finished(&self, timeline: &Timeline) {
        if let Ok(mut kept) = self.0.lock() {
            *kept = Some(timeline.clone());
        }
    }
}

impl Keep {
    fn take(&self) -> Timeline {
        let kept = self.0.lock().ok().and_then(|mut k| k.take());
        kept.expect("the exchange handed over its timeline")
    }
}

/// The reading config with `max_event_bytes` and `request_capture_bytes`
/// both `limit`, built through the config file like the binary's.
fn reading(limit: usize) -> &'static ReadSettings {
    static READINGS: OnceLock<Vec<ReadSettings>> = OnceLock::new();
    let readings = READINGS.get_or_init(|| {
        LIMITS
            .iter()
            .map(|n| {
                let text = format!(
                    "upstream = \"http://127.0.0.1:1\"\n\
                     max_event_bytes = {n}\nrequest_capture_bytes = {n}\n"
                );
                File::parse(&text, "fuzz.toml")
                    .and_then(File::validate)
                    .expect("the fuzz config is valid")
                    .reading
            })
            .collect()
    });
    let at = LIMITS.iter().position(|&n| n == limit).unwrap_or(0);
    &readings[at]
}

/// A request path of each dialect's family.
fn path(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::OpenAiChat => "/v1/chat/completions",
        Dialect::OpenAiCompletions => "/v1/completions",
        Dialect::OpenAiResponses => "/v1/responses",
        Dialect::OpenAiAudio => "/v1/audio/transcriptions",
        Dialect::OpenAiEmbeddings => "/v1/embeddings",
        Dialect::OllamaEmbed => "/api/embed",
        Dialect::Rerank => "/v1/rerank",
        Dialect::Pooling => "/classify",
        Dialect::Anthropic => "/v1/messages",
        Dialect::Tgi => "/generate_stream",
        // Shared with llama.cpp's server: an event stream or a body with
        // `choices` there is its OpenAI chat.
        Dialect::Ollama => "/api/chat",
        Dialect::LlamaCpp => "/completion",
        // Shared with TGI: an event stream or a body with `meta_info`
        // there is SGLang's, which the targets then read through the
        // decision the exchange takes.
        Dialect::Sglang => "/generate",
        // TEI's, counted `unknown` until TEI's head shows.
        Dialect::Tei => "/embed",
        Dialect::Unknown => "/v1/other",
    }
}

/// The dialect a request on `dialect`'s path is counted under until its
/// response tells: `/generate` is TGI's until then, TEI's routes unknown.
fn routed(dialect: Dialect) -> Dialect {
    match dialect {
        Dialect::Sglang => Dialect::Tgi,
        Dialect::Tei => Dialect::Unknown,
        dialect => dialect,
    }
}

fn start(dialect: Dialect, method: Method, limit: usize) -> (Arc<Keep>, Exchange, impl Observe) {
    start_request(method, path(dialect), routed(dialect), limit, None)
}

/// A request to `path`, counted under `routed` until its response tells.
fn start_request(
    method: Method,
    path: &str,
    routed: Dialect,
    limit: usize,
    content_type: Option<&str>,
) -> (Arc<Keep>, Exchange, impl Observe) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    let request = request.body(()).expect("a valid request");
    let keep = Arc::new(Keep::default());
    let sink: Arc<dyn TimelineSink> = keep.clone();
    // What a proxy learns of `/generate`'s server is its own: each input
    // starts with none, so that no input depends on those run before it
    // (nor on another thread's).
    let mut reading = reading(limit).clone();
    reading.learnt = Default::default();
    let (exchange, upload) = Exchange::start(Instant::now(), &request, &reading, Some(sink));
    assert_eq!(exchange.dialect(), routed, "the path's dialect");
    (keep, exchange, upload)
}

/// A 200 with `content_type`, whose body arrives in `pieces`, all at the
/// same instant (so timings cannot differ between two runs), then `end`.
fn respond(exchange: Exchange, content_type: &str, pieces: &[&[u8]], end: End) {
    respond_coded(exchange, content_type, "identity", pieces, end);
}

/// [`respond`], its body compressed with `coding` (`content-encoding`).
fn respond_coded(exchange: Exchange, content_type: &str, coding: &str, pieces: &[&[u8]], end: End) {
    respond_with(exchange, content_type, coding, &[], pieces, end);
}

/// [`respond_coded`], with more headers in the head.
fn respond_with(
    mut exchange: Exchange,
    content_type: &str,
    coding: &str,
    headers: &[(&str, &str)],
    pieces: &[&[u8]],
    end: End,
) {
    let mut builder = Response::builder()
        .header("content-type", content_type)
        .header("content-encoding", coding);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let (head, ()) = builder.body(()).expect("a valid response").into_parts();
    let at = Instant::now();
    exchange.on_response_head(&head, at);
    for piece in pieces {
        exchange.on_data(&Bytes::copy_from_slice(piece), at);
    }
    exchange.on_end(end, at);
}

/// What a timeline learned from the body, without its instants (an
/// NDJSON body's last line is read at the end, at the instant it ends).
/// Parse errors as counts per reason: an oversized SSE event is counted
/// after the chunk it ended in, so the order depends on the cuts (metrics
/// count per reason); past the timeline's 64 kept, only how many.
fn summary(t: &Timeline) -> String {
    let mut errors: Vec<&str> = t.parse_errors.iter().map(|e| e.as_str()).collect();
    errors.sort_unstable();
    if errors.len() >= 64 {
        errors.clear();
    }
    format!(
        "{:?}",
        (
            (t.events, &t.tokens, &t.usage, &t.server),
            (&t.model, errors, t.in_band_error, t.outcome),
            (
                t.bytes_out,
                t.streamed,
                t.first_token.is_some(),
                t.first_output.is_some()
            ),
        )
    )
}

/// The bytes `StripUsage` (stripping on) forwards for a stream whose
/// frames are `pieces`.
fn strip_usage(pieces: &[&[u8]]) -> Vec<u8> {
    let frames = pieces.iter().map(|p| Bytes::copy_from_slice(p)).collect();
    let mut body = StripUsage::new(Frames(frames), true);
    let mut cx = Context::from_waker(Waker::noop());
    let mut out = Vec::new();
    // Each poll consumes at least one frame: bounded by the frame count.
    for _ in 0..=pieces.len() + 1 {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    out.extend_from_slice(&data);
                }
            }
            Poll::Ready(None) => return out,
            Poll::Ready(Some(Err(never))) => match never {},
            Poll::Pending => panic!("a body of ready frames is never pending"),
        }
    }
    panic!("the stripper did not end after its input");
}

/// A body of frames that are all there already.
struct Frames(VecDeque<Bytes>);

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().0.pop_front().map(|b| Ok(Frame::data(b))))
    }
}

/// What a client's byte stream comes to, read as the HTTP/1.1 connection
/// reads it ([`HeadReader`] for heads, [`Decoder`] for bodies).
#[derive(Debug, PartialEq)]
enum Read {
    /// A request, its body as far as it came, and the trailers it ended with.
    Request {
        head: String,
        framing: BodyFraming,
        keep_alive: bool,
        expect_continue: bool,
        body: Vec<u8>,
        trailers: Option<String>,
    },
    /// The head was refused (the connection answers, or not, and closes).
    Refused(String),
    /// The body's chunked coding was broken (the connection closes).
    BodyFailed(ChunkedError),
    /// The stream ended before the head or body did.
    Cut,
}

/// A client's HTTP/1.1 byte stream, as the server side of the proxy reads
/// it: heads and request bodies, pipelined, keep-alive or not. The first
/// byte picks where the stream is cut and the most body bytes one frame
/// takes; the rest is the stream. Cut anywhere, the stream must give the
/// same requests, heads and bodies alike; only the fate of a broken head
/// may differ, as it does in hyper: whole, it is refused at once; in
/// pieces, the reader waits for the head's end before parsing again, so it
/// may see the stream end first, and an HTTP/2 preface cut before its
/// 24th byte is refused as a bad head. (Inputs are shorter than
/// `MAX_HEAD`: the buffer's limit is the crate's tests'.)
pub fn h1(data: &[u8]) {
    let Some((opt, input)) = options(data) else {
        return;
    };
    // One read may take a buffer past the limit, and a head that ends in
    // it is taken; in pieces it would be refused. Not reached by inputs
    // this size; the rule is the connection's, tested in the crate.
    if input.len() >= MAX_HEAD {
        return;
    }
    let limit = [1, 7, 64, 64 * 1024][usize::from(opt >> 6)];
    let whole = h1_reads(&[input], limit);
    let mut cuts = Cuts::new(opt, input);
    for (how, pieces) in [
        ("split", cuts.split(input)),
        ("byte by byte", input.chunks(1).collect()),
    ] {
        let cut = h1_reads(&pieces, limit);
        let last = whole.len().max(1) - 1;
        assert_eq!(cut.len(), whole.len(), "{how}: {cut:?} against {whole:?}");
        assert_eq!(cut[..last], whole[..last], "{how}");
        match (&cut[last..], &whole[last..]) {
            (a, b) if a == b => {}
            ([Read::Cut], [Read::Refused(_)]) => {}
            // hyper tells the HTTP/2 preface (closed on silently) only
            // once its 24 bytes are in: parsed before, what came is
            // refused as what it is (a bad version, a bare CR).
            ([Read::Refused(_)], [Read::Refused(b)]) if b == "Http2Preface" => {}
            (a, b) => panic!("{how}: ends {a:?}, whole ends {b:?}"),
        }
    }
}

/// Feeds `pieces` one read at a time, as the connection does, and says
/// what each request came to.
fn h1_reads(pieces: &[&[u8]], limit: usize) -> Vec<Read> {
    let mut reads = Vec::new();
    let mut buf = BytesMut::new();
    let mut heads = HeadReader::default();
    let mut pieces = pieces.iter();
    let mut more = |buf: &mut BytesMut| match pieces.next() {
        Some(piece) => {
            buf.extend_from_slice(piece);
            true
        }
        None => false,
    };
    loop {
        let head = loop {
            match heads.read(&mut buf) {
                Ok(Some(head)) => break head,
                Ok(None) => {
                    if !more(&mut buf) {
                        if !buf.is_empty() {
                            reads.push(Read::Cut);
                        }
                        return reads;
                    }
                }
                Err(e) => {
                    reads.push(Read::Refused(format!("{e:?}")));
                    return reads;
                }
            }
        };
        let RequestHead {
            parts,
            framing,
            keep_alive,
            expect_continue,
        } = head;
        if framing == BodyFraming::Chunked {
            assert!(
                !parts.headers.contains_key("content-length"),
                "a chunked request keeps no content-length"
            );
        }
        let mut decoder = Decoder::new(framing.into());
        let (mut body, mut trailers, mut failed, mut cut) = (Vec::new(), None, None, false);
        loop {
            let (data, decoded) = decoder.decode(&mut buf, limit);
            assert!(data.len() <= limit, "a frame over the limit");
            body.extend_from_slice(&data);
            match decoded {
                Decoded::End(t) => {
                    trailers = t.map(|t| format!("{t:?}"));
                    break;
                }
                Decoded::Failed(e) => {
                    failed = Some(e);
                    break;
                }
                Decoded::Full => {}
                Decoded::More => {
                    if !more(&mut buf) {
                        cut = true;
                        break;
                    }
                }
            }
        }
        if let (BodyFraming::Length(n), false, None) = (framing, cut, failed) {
            assert_eq!(body.len() as u64, n, "a body is its content-length");
        }
        reads.push(Read::Request {
            head: format!("{parts:?}"),
            framing,
            keep_alive,
            expect_continue,
            body,
            trailers,
        });
        match (failed, cut) {
            (Some(e), _) => {
                reads.push(Read::BodyFailed(e));
                return reads;
            }
            (None, true) => {
                reads.push(Read::Cut);
                return reads;
            }
            // The connection closes after this request's response.
            (None, false) if !keep_alive => return reads,
            (None, false) => {}
        }
    }
}
