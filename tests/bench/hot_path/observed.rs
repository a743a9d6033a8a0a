//! `observed_body`: polling an in-memory body of one event per frame, bare
//! and through [`ObservedBody`] (ns per frame).

use std::{
    convert::Infallible,
    hint::black_box,
    pin::{pin, Pin},
    task::{Context, Poll, Waker},
};

use bytes::Bytes;
use criterion::{BatchSize, Criterion, Throughput};
use http_body::{Body, Frame};
use tokenclock::{
    config::File,
    measure::exchange::Exchange,
    measure::observe::{End, Observe, ObservedBody},
    measure::read::ReadSettings,
};
use tokio::time::Instant;

use crate::{recorded::Stream, streams::vllm_chat};

/// A body yielding pre-built frames, never pending: no I/O to time.
pub(crate) struct Frames(std::vec::IntoIter<Bytes>);

impl Frames {
    pub(crate) fn of(frames: Vec<Bytes>) -> Self {
        Self(frames.into_iter())
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.0.next().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.len() == 0
    }
}

/// Observes nothing: the cost of the wrapper itself.
struct Noop;

impl Observe for Noop {
    fn on_data(&mut self, data: &Bytes, at: Instant) {
        black_box((data, at));
    }

    fn on_end(self, end: End, at: Instant) {
        black_box((end, at));
    }
}

/// One owned frame per event, as an upstream writing one event per write
/// would hand them to the proxy.
fn frames(stream: &Stream) -> Vec<Bytes> {
    let all = Bytes::copy_from_slice(&stream.bytes);
    stream.blocks.iter().map(|r| all.slice(r.clone())).collect()
}

/// Polls `body` to its end with a no-op waker; returns the frames seen.
pub(crate) fn drain<B: Body<Data = Bytes, Error = Infallible>>(body: B) -> u64 {
    let mut body = pin!(body);
    let mut cx = Context::from_waker(Waker::noop());
    let mut frames = 0u64;
    loop {
        match body.as_mut().poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                black_box(frame);
                frames += 1;
            }
            Poll::Ready(Some(Err(never))) => match never {},
            Poll::Ready(None) => return frames,
            Poll::Pending => panic!("an in-memory body never pends"),
        }
    }
}

/// The proxy's default reading settings, through the config parser.
pub(crate) fn reading() -> ReadSettings {
    File::parse("upstream = \"http://127.0.0.1:8000\"\n", "bench.toml")
        .and_then(File::validate)
        .expect("a config with only an upstream is valid")
        .reading
}

/// An exchange for a JSON request on `path` whose response head, of
/// `content_type`, has arrived: the state the proxy is in when the body's
/// first frame comes.
pub(crate) fn exchange(path: &str, content_type: &str, reading: &ReadSettings) -> Exchange {
    let start = Instant::now();
    let request = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(())
        .expect("a constant request is valid");
    let (mut exchange, _upload) = Exchange::start(start, &request, reading, None);
    let (head, ()) = http::Response::builder()
        .header(http::header::CONTENT_TYPE, content_type)
        .body(())
        .expect("a constant response is valid")
        .into_parts();
    exchange.on_response_head(&head, Instant::now());
    exchange
}

/// The streamed chat completion's path.
const CHAT: &str = "/v1/chat/completions";

pub(crate) fn bench(c: &mut Criterion) {
    let frames = frames(&vllm_chat());
    let count = frames.len() as u64;
    let reading = reading();
    let mut group = c.benchmark_group("observed_body");
    group.throughput(Throughput::Elements(count));

    assert_eq!(drain(Frames(frames.clone().into_iter())), count);
    group.bench_function("bare", |b| {
        b.iter_batched(
            || Frames(frames.clone().into_iter()),
            drain,
            BatchSize::SmallInput,
        )
    });

    assert_eq!(
        drain(ObservedBody::new(Frames(frames.clone().into_iter()), Noop)),
        count
    );
    group.bench_function("observed_noop", |b| {
        b.iter_batched(
            || ObservedBody::new(Frames(frames.clone().into_iter()), Noop),
            drain,
            BatchSize::SmallInput,
        )
    });

    assert_eq!(
        drain(ObservedBody::new(
            Frames(frames.clone().into_iter()),
            exchange(CHAT, "text/event-stream", &reading)
        )),
        count
    );
    group.bench_function("observed_exchange_sse_openai_chat", |b| {
        b.iter_batched(
            || {
                let exchange = exchange(CHAT, "text/event-stream", &reading);
                ObservedBody::new(Frames(frames.clone().into_iter()), exchange)
            },
            drain,
            BatchSize::SmallInput,
        )
    });
    group.finish();
}
