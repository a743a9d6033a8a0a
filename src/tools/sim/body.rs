//! The response body: a bounded channel the generator writes framed events
//! into, so a slow client slows the generator and a gone client stops it.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::{SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use http_body::{Body, Frame};
use serde_json::Value;
use tokio::sync::mpsc;

/// The body of a simulated response: one whole buffer, or a stream of
/// events from a generator task.
pub(crate) struct SimBody {
    full: Option<Bytes>,
    stream: Option<mpsc::Receiver<Result<Bytes, Cut>>>,
    /// The length a stream declares (`content-length`), if it does.
    declared: Option<u64>,
}

/// The simulator cut the body on purpose (`abort=N`): hyper closes the
/// connection without the terminating chunk (or short of `content-length`).
#[derive(Debug, thiserror::Error)]
#[error("stream cut by the x-sim-fault abort")]
pub(crate) struct Cut;

impl SimBody {
    /// A whole body.
    pub(crate) fn full(bytes: impl Into<Bytes>) -> Self {
        Self {
            full: Some(bytes.into()),
            stream: None,
            declared: None,
        }
    }

    /// A whole body that declares `length` bytes (`content-length`) but
    /// sends only `sent`, then fails, so hyper closes the connection short
    /// of its length. The failure comes [`CUT_PAUSE`] later, so the head
    /// and `sent` are on the wire first.
    pub(crate) fn cut(length: u64, sent: Bytes) -> Self {
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(async move {
            if tx.send(Ok(sent)).await.is_ok() {
                tokio::time::sleep(CUT_PAUSE).await;
                let _ = tx.send(Err(Cut)).await;
            }
        });
        Self {
            full: None,
            stream: Some(rx),
            declared: Some(length),
        }
    }

    /// A streamed body and the emitter that feeds it.
    pub(crate) fn channel(framing: Framing, abort_after: Option<u64>) -> (Self, Emitter) {
        // One event in flight: the stamp is taken when there is room.
        let (tx, rx) = mpsc::channel(1);
        let body = Self {
            full: None,
            stream: Some(rx),
            declared: None,
        };
        let emitter = Emitter {
            tx,
            framing,
            sent: 0,
            abort_after,
        };
        (body, emitter)
    }
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = Cut;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Cut>>> {
        if let Some(bytes) = self.full.take() {
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        let Some(rx) = self.stream.as_mut() else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(item)) => Poll::Ready(Some(item.map(Frame::data))),
            Poll::Ready(None) => {
                self.stream = None;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        if let (Some(length), Some(_)) = (self.declared, &self.stream) {
            return http_body::SizeHint::with_exact(length);
        }
        match (&self.full, &self.stream) {
            (Some(bytes), _) => http_body::SizeHint::with_exact(bytes.len() as u64),
            (None, None) => http_body::SizeHint::with_exact(0),
            (None, Some(_)) => http_body::SizeHint::default(),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.full.is_none() && self.stream.is_none()
    }
}

/// How long a cut whole body waits between its last bytes and the cut.
const CUT_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// How events are framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Framing {
    /// `text/event-stream`: `event:` (optional) and `data:` lines.
    Sse,
    /// `application/x-ndjson`: one JSON object per line (Ollama).
    Ndjson,
}

impl Framing {
    /// The response `content-type`.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Self::Sse => "text/event-stream",
            Self::Ndjson => "application/x-ndjson",
        }
    }
}

/// One event before framing.
#[derive(Clone, Debug)]
pub(crate) enum Event {
    /// A JSON payload, with the SSE `event:` name if the format uses one.
    Json(Option<&'static str>, Value),
    /// OpenAI's `data: [DONE]`.
    Done,
    /// An event whose payload is not valid JSON (`malformed` fault).
    Malformed,
}

/// The client went away, or the stream was cut on purpose.
#[derive(Debug)]
pub(crate) struct Gone;

/// Writes events into a [`SimBody`], stamping each with
/// `sim_sent_unix_ns` when the body has room for it.
pub(crate) struct Emitter {
    tx: mpsc::Sender<Result<Bytes, Cut>>,
    framing: Framing,
    sent: u64,
    abort_after: Option<u64>,
}

impl Emitter {
    /// Sends every event in order; `Err(Gone)` stops the generator.
    pub(crate) async fn send_all(&mut self, events: Vec<Event>) -> Result<(), Gone> {
        for event in events {
            self.send(event).await?;
        }
        Ok(())
    }

    /// Sends one event, then cuts the stream if `abort=N` is reached.
    pub(crate) async fn send(&mut self, event: Event) -> Result<(), Gone> {
        let permit = self.tx.reserve().await.map_err(|_| Gone)?;
        permit.send(Ok(self.frame(event)));
        self.sent += 1;
        if self.abort_after.is_some_and(|n| self.sent >= n) {
            let _ = self.tx.send(Err(Cut)).await;
            return Err(Gone);
        }
        Ok(())
    }

    /// Resolves when the client has gone (the body was dropped).
    pub(crate) async fn closed(&self) {
        self.tx.closed().await;
    }

    fn frame(&self, event: Event) -> Bytes {
        let (name, payload) = match event {
            Event::Json(name, mut value) => {
                if let Some(object) = value.as_object_mut() {
                    object.insert("sim_sent_unix_ns".to_owned(), unix_ns().into());
                }
                (name, value.to_string())
            }
            Event::Done => (None, "[DONE]".to_owned()),
            Event::Malformed => (None, "{\"sim_malformed\": tru".to_owned()),
        };
        Bytes::from(match (self.framing, name) {
            (Framing::Ndjson, _) => format!("{payload}\n"),
            (Framing::Sse, Some(name)) => format!("event: {name}\ndata: {payload}\n\n"),
            (Framing::Sse, None) => format!("data: {payload}\n\n"),
        })
    }
}

/// Nanoseconds since the Unix epoch, now (0 if the clock is before 1970).
fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}
