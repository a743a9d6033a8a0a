//! Replaying recorded responses through the real proxy: the corpus
//! manifest, an exact write schedule cut at event boundaries, and one run
//! (scripted upstream, in-process proxy, real client, `/metrics` scrape).
//! Used by `real_streams`.

use std::{io::Write, ops::Range, path::PathBuf, time::Duration};

use bytes::Bytes;
use flate2::{write::GzEncoder, Compression};
use http::Request;
use http_body_util::Full;
use serde::Deserialize;
use tokenclock::measure::timeline::Timeline;

use crate::common::{
    client::{self, collect, send},
    next_timeline, proxy_with_timelines,
    upstream::{chunk, head, Scripted, Step},
    Proxy,
};

/// `tests/fixtures/real/manifest.toml`: one `[[stream]]` per recording.
#[derive(Debug, Deserialize)]
pub struct Manifest {
    #[serde(default)]
    pub stream: Vec<Entry>,
}

/// One recording and where it came from.
#[derive(Clone, Debug, Deserialize)]
pub struct Entry {
    /// The recording, relative to the manifest.
    pub file: String,
    /// The request path it answered.
    pub path: String,
    pub content_type: String,
    pub status: u16,
    /// The `model` of the request body, if it named one.
    #[serde(default)]
    pub request_model: Option<String>,
    /// Where the recording came from (`source_commit`, `rebuilt` and `note`
    /// are for people and not read here).
    #[serde(default)]
    pub provider: String,
    #[serde(default)]
    pub source_repo: String,
    #[serde(default)]
    pub source_path: String,
}

/// The manifest (`TOKENCLOCK_REAL_MANIFEST` overrides its path) and the
/// directory its files are relative to.
pub fn manifest() -> (Manifest, PathBuf) {
    let path = std::env::var_os("TOKENCLOCK_REAL_MANIFEST").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/real/manifest.toml"),
        PathBuf::from,
    );
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let manifest = toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let dir = path.parent().map(PathBuf::from).unwrap_or_default();
    (manifest, dir)
}

/// The exact schedule of a response, and which write completes what.
pub struct Plan {
    pub script: Vec<Step>,
    /// Per unit, the index of the write that carries its last byte.
    pub completes: Vec<usize>,
    /// The index of the write that ends the body (the last chunk).
    pub end: usize,
    /// The body's bytes as the upstream sends them (compressed, if asked).
    pub sent: Vec<u8>,
}

/// The first unit goes out this long after the head.
const FIRST: Duration = Duration::from_millis(20);

/// The head, then each unit at its own `Step::At` offset, `gap` apart; every
/// `split_every`-th unit goes out in two parts `gap / 2` apart, so its event
/// is completed by the second frame (definition I).
///
/// With a `coding` (`gzip`, `br` or `zstd`), the body goes out as a streaming
/// server compresses it (`content-encoding`, the compressor flushed after
/// each part, the stream's end with the last chunk): each part's event
/// still arrives whole with its own write.
pub fn plan(
    status: u16,
    content_type: &str,
    body: &[u8],
    units: &[Range<usize>],
    gap: Duration,
    coding: Option<&str>,
) -> Plan {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Status");
    let content_type = format!("content-type: {content_type}");
    let mut fields = vec![
        content_type.as_str(),
        "transfer-encoding: chunked",
        "connection: close",
    ];
    let encoding = coding.map(|c| format!("content-encoding: {c}"));
    fields.extend(encoding.as_deref());
    let mut script = vec![Step::Write(head(&format!("{status} {reason}"), &fields))];
    let mut encoder = coding.map(Encoder::new);
    let mut sent = Vec::with_capacity(body.len());
    // A part of the body as it goes out: compressed and flushed, or as is.
    let mut part = |bytes: &[u8]| -> Bytes {
        let out = match &mut encoder {
            Some(encoder) => encoder.flushed(bytes),
            None => bytes.to_vec(),
        };
        sent.extend_from_slice(&out);
        chunk(&out)
    };
    let mut writes = 1;
    let mut completes = Vec::with_capacity(units.len());
    for (i, range) in units.iter().enumerate() {
        let at = FIRST + gap * i as u32;
        let unit = &body[range.clone()];
        script.push(Step::At(at));
        if i % 5 == 4 && unit.len() >= 2 {
            let half = unit.len() / 2;
            script.push(Step::Write(part(&unit[..half])));
            script.push(Step::At(at + gap / 2));
            script.push(Step::Write(part(&unit[half..])));
            writes += 2;
        } else {
            script.push(Step::Write(part(unit)));
            writes += 1;
        }
        completes.push(writes - 1);
    }
    script.push(Step::At(FIRST + gap * units.len() as u32));
    let mut last = Vec::new();
    if let Some(encoder) = encoder {
        let trailer = encoder.finish();
        sent.extend_from_slice(&trailer);
        last.extend_from_slice(&chunk(&trailer));
    }
    last.extend_from_slice(b"0\r\n\r\n");
    script.push(Step::Write(Bytes::from(last)));
    Plan {
        script,
        completes,
        end: writes,
        sent,
    }
}

/// A streaming server's compressor.
enum Encoder {
    Gzip(GzEncoder<Vec<u8>>),
    Brotli(Box<brotli::CompressorWriter<Vec<u8>>>),
    Zstd(zstd_safe::CCtx<'static>),
}

impl Encoder {
    fn new(coding: &str) -> Self {
        match coding {
            "gzip" => Self::Gzip(GzEncoder::new(Vec::new(), Compression::default())),
            "br" => Self::Brotli(Box::new(brotli::CompressorWriter::new(
                Vec::new(),
                4096,
                5,
                22,
            ))),
            "zstd" => Self::Zstd(zstd_safe::CCtx::create()),
            other => panic!("no encoder for {other}"),
        }
    }

    /// `bytes` compressed and flushed: what goes out with them.
    fn flushed(&mut self, bytes: &[u8]) -> Vec<u8> {
        let writer: &mut dyn Write = match self {
            Self::Gzip(e) => e,
            Self::Brotli(e) => &mut **e,
            Self::Zstd(e) => return zstd_step(e, bytes, false),
        };
        writer.write_all(bytes).expect("compress");
        writer.flush().expect("flush the compressor");
        match self {
            Self::Gzip(e) => std::mem::take(e.get_mut()),
            Self::Brotli(e) => std::mem::take(e.get_mut()),
            Self::Zstd(_) => unreachable!("returned above"),
        }
    }

    /// The end of the compressed stream.
    fn finish(self) -> Vec<u8> {
        match self {
            Self::Gzip(e) => e.finish().expect("the gzip trailer"),
            Self::Brotli(e) => e.into_inner(),
            Self::Zstd(mut e) => zstd_step(&mut e, &[], true),
        }
    }
}

/// `bytes` through a zstd compressor, then the frame flushed
/// (`ZSTD_e_flush`) or ended (`ZSTD_e_end`): what goes out.
fn zstd_step(cctx: &mut zstd_safe::CCtx<'static>, bytes: &[u8], end: bool) -> Vec<u8> {
    let mut sent = Vec::new();
    let mut input = zstd_safe::InBuffer::around(bytes);
    loop {
        let mut out = Vec::with_capacity(bytes.len() + 4096);
        let mut buffer = zstd_safe::OutBuffer::around(&mut out);
        let left = if input.pos() < bytes.len() {
            cctx.compress_stream(&mut buffer, &mut input).map(|_| 1)
        } else if end {
            cctx.end_stream(&mut buffer)
        } else {
            cctx.flush_stream(&mut buffer)
        }
        .expect("compress");
        sent.extend_from_slice(&out);
        if left == 0 {
            return sent;
        }
    }
}

/// From when a write started to when it finished (the upstream timestamps
/// after `write_all` returns: a busy machine may deschedule it in between).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span(pub Duration, pub Duration);

impl Span {
    /// The span of `later − self`: the shortest and longest time between the two.
    pub fn until(self, later: Span) -> Span {
        Span(
            later.0.saturating_sub(self.1),
            later.1.saturating_sub(self.0),
        )
    }

    /// The span divided by `n`.
    pub fn per(self, n: u32) -> Span {
        Span(self.0 / n, self.1 / n)
    }

    /// Whether `at` lies within `tolerance` of the span.
    pub fn holds(self, at: Duration, tolerance: Duration) -> bool {
        self.0.saturating_sub(tolerance) <= at && at <= self.1 + tolerance
    }
}

/// What one replay produced.
pub struct Run {
    pub status: u16,
    pub body: Vec<u8>,
    pub timeline: Timeline,
    /// When each write of the script started and finished, from the
    /// timeline's `t0`.
    pub writes: Vec<Span>,
    /// The `/metrics` exposition once the request was counted.
    pub metrics: String,
}

/// The request body: the manifest's model, `stream` for streamed responses.
pub fn request_body(model: Option<&str>, streamed: bool) -> Vec<u8> {
    let mut body = serde_json::Map::new();
    if let Some(model) = model {
        body.insert("model".into(), model.into());
    }
    if streamed {
        body.insert("stream".into(), true.into());
    }
    serde_json::to_vec(&body).expect("a JSON object")
}

/// Replays `plan` through a fresh proxy for a request to `path`.
pub async fn run(path: &str, request: Vec<u8>, plan: Plan) -> Run {
    let mut upstream = Scripted::start(plan.script).await;
    let (proxy, mut timelines) = proxy_with_timelines(upstream.addr, "").await;
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(request)))
        .expect("request");
    let response = send(proxy.addr, request).await.expect("response head");
    let collected = collect(response).await.expect("whole body");
    let timeline = next_timeline(&mut timelines).await;
    let since = |at: tokio::time::Instant| at.saturating_duration_since(timeline.start);
    let writes = upstream
        .write_spans()
        .await
        .into_iter()
        .map(|(start, end)| Span(since(start), since(end)))
        .collect();
    let metrics = counted(&proxy).await;
    proxy.shutdown().await;
    Run {
        status: collected.status.as_u16(),
        body: collected.body(),
        timeline,
        writes,
        metrics,
    }
}

/// `/metrics` once `tokenclock_requests_total` has a series (up to 2 s).
async fn counted(proxy: &Proxy) -> String {
    let mut text = String::new();
    for _ in 0..100 {
        let response = client::get(proxy.metrics_addr, "/metrics").await;
        text = String::from_utf8(response.body()).expect("UTF-8 exposition");
        if text
            .lines()
            .any(|l| l.starts_with("tokenclock_requests_total{"))
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    text
}
