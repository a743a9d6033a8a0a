//! One client connection spoken in tokenclock's own HTTP/1.1 codec.
//!
//! A request at a time, in order (pipelined requests wait in the read
//! buffer): its head is parsed ([`request`]), the service called, its
//! body read from the socket as the service asks for it ([`body`]), and
//! the response written as its frames come: each wake-up's frames in one
//! `writev`, a chunk's size line from the stack ([`response`]). The
//! connection decides keep-alive, framing and errors as hyper's server
//! does; the connection driver (`server::conn`) keeps its deadlines and
//! drain.

use std::{
    collections::VecDeque,
    future::Future,
    io::{self, IoSlice},
    pin::Pin,
    task::{ready, Context, Poll},
    time::Duration,
};

use bytes::{Buf, Bytes, BytesMut};
use http::{Method, Request, Response, StatusCode, Version};
use http_body::Body as HttpBody;
use hyper::rt::Write;
use tokio::time::Sleep;

use super::body::{Body, BodyError, Room, Sender};
use crate::proxy::server::quiet::Quiet;
use crate::proxy::upgrade::{self, Asked};
use crate::proxy::wire::{
    self,
    chunked::{Decoded, Decoder, Framing as DecoderFraming, SizeLine},
    server::request::{BodyFraming, HeadError, HeadReader, RequestHead},
    server::response::{self, Answering, Framing},
};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The most pieces waiting for one write: a response body is polled for
/// more frames only while fewer wait (hyper's queue holds 16 buffers).
const MAX_PIECES: usize = 48;
/// How much a read asks for at least.
const READ_SIZE: usize = 8 * 1024;
/// The most request-body bytes handed over in one frame.
const MAX_FRAME: usize = 64 * 1024;

/// How long a closing connection whose client may still be sending (a
/// switched one whose upstream ended the session, a body an answer left
/// unread) reads on and drops what it sends, from
/// its last bytes, before the socket closes: nginx's `lingering_timeout`
/// (5 s there).
const LINGER: Duration = Duration::from_secs(2);
/// The most a connection lingers, however often its client sends: nginx's
/// `lingering_time`.
const LINGER_MOST: Duration = Duration::from_secs(30);

/// `HTTP/1.1 100 Continue`, sent when a request that expects it has its
/// body asked for.
const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

/// A client's HTTP/1.1 connection and the service answering it.
pub(crate) struct Connection<S, F, B> {
    io: Quiet,
    service: S,
    read: BytesMut,
    out: Out,
    state: State<F, B>,
    /// The request body still being read from the socket.
    upload: Option<Upload>,
    /// Shutdown began: no request after the one in flight.
    closing: bool,
    /// The client closed its sending side.
    read_closed: bool,
    /// The version of the last request served: hyper answers a refused
    /// head in it.
    version: Version,
    /// A request was started on this connection.
    served: bool,
    /// The connection switched protocols (`101`): the client's bytes are
    /// the switched ones offered with the request (`Asked`), the upstream's
    /// the response's body, each until its side closes.
    tunnel: bool,
    /// Reads the heads off `read` as hyper does.
    heads: HeadReader,
    /// `header_read_timeout`, for the heads after the first.
    header_read: Duration,
    /// Running while a head after the first is begun and not whole; and,
    /// once a closing connection is shut down, while it lingers (a field
    /// of its own would cost every held stream 8 bytes).
    head_timer: Option<Pin<Box<Sleep>>>,
}

/// A request head was refused (answered `400`, `414` or `431`, or closed
/// on where hyper does): what the connection ends with, once its answer
/// is written, so that the driver counts it.
#[derive(Debug, thiserror::Error)]
#[error("refused a request head: {0}")]
pub(crate) struct RefusedHead(HeadError);

/// A head after the first was not whole within `header_read_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the request head was not whole within {0:?} of its first bytes")]
struct HeadTimeout(Duration);

/// Where the connection is in the exchange in flight.
enum State<F, B> {
    /// Reading the next request's head.
    Head,
    /// The service is working on the response head.
    Waiting { future: F, answering: Answered },
    /// Writing the response body.
    Writing {
        body: Pin<Box<B>>,
        framing: Framing,
        /// Bytes left to write, under `Length` framing.
        left: u64,
        answering: Answered,
    },
    /// The response is whole in `out`; once written, the connection goes
    /// on (`keep_alive`) or closes.
    Finishing { keep_alive: bool },
    /// Closing: write what is left, then shut the socket down; after a
    /// refused head, the connection ends with its error ([`RefusedHead`]).
    Closing { refused: Option<HeadError> },
    /// Shut down, its client maybe still sending: what it sends is read
    /// and dropped until it closes, for [`LINGER`] after its last bytes,
    /// until `until` at most.
    Lingering { until: tokio::time::Instant },
}

/// What a response answers: the request's facts it is framed by.
struct Answered {
    method: Method,
    version: Version,
    keep_alive: bool,
    trailers: bool,
    /// The connection is kept alive after the response.
    keep_after: bool,
    /// The response head's `trailer` fields (only when `trailers`): which
    /// trailers may be written.
    declared: http::HeaderMap,
}

/// A request body being read off the socket.
struct Upload {
    decoder: Decoder,
    sender: Sender,
    /// `100 Continue` is owed once the body is asked for.
    expect_continue: bool,
    /// A request that asks to switch protocols, whose answer has not come:
    /// nothing is read as its body until a `101` goes out (the client's
    /// bytes are the new protocol's from then on), and it has none if the
    /// answer is anything else.
    held: bool,
}

impl<S, F, B> Connection<S, F, B>
where
    S: hyper::service::Service<Request<Body>, Response = Response<B>, Future = F>,
    F: Future<Output = Result<Response<B>, S::Error>> + Unpin,
    S::Error: Into<BoxError>,
    B: HttpBody,
    B::Error: Into<BoxError>,
{
    /// Serves `io` with `service`; heads after the first must be whole
    /// within `header_read` of their first bytes.
    pub(crate) fn new(io: Quiet, service: S, header_read: Duration) -> Self {
        Self {
            io,
            service,
            read: BytesMut::new(),
            out: Out::default(),
            state: State::Head,
            upload: None,
            closing: false,
            read_closed: false,
            version: Version::HTTP_11,
            served: false,
            tunnel: false,
            heads: HeadReader::default(),
            header_read,
            head_timer: None,
        }
    }

    /// No request after the one in flight; an idle connection closes.
    pub(crate) fn graceful_shutdown(&mut self) {
        self.closing = true;
    }

    /// Drives the connection until it closes.
    pub(crate) fn poll_connection(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        loop {
            self.poll_upload(cx)?;
            let progressed = match &mut self.state {
                State::Head => match self.poll_head(cx)? {
                    Poll::Ready(true) => true,
                    Poll::Ready(false) => return Poll::Ready(Ok(())),
                    Poll::Pending => return Poll::Pending,
                },
                State::Waiting { .. } => ready!(self.poll_waiting(cx))?,
                State::Writing { .. } => ready!(self.poll_writing(cx))?,
                State::Finishing { keep_alive } => {
                    let keep_alive = *keep_alive;
                    ready!(self.poll_flush(cx))?;
                    let upload_done = self.finish_upload();
                    if keep_alive && upload_done && !self.closing {
                        self.state = State::Head;
                    } else {
                        self.state = State::Closing { refused: None };
                    }
                    true
                }
                State::Closing { refused } => {
                    let refused = *refused;
                    ready!(self.poll_flush(cx))?;
                    // The end of a close-delimited body, and a clean FIN.
                    let _ = ready!(Pin::new(&mut self.io).poll_shutdown(cx));
                    // A client that may still be sending (a switched
                    // connection's, a body the answer left unread) would
                    // get a reset for its next bytes once the socket
                    // closed, which drops the answer it has not read yet
                    // (a client that sends its whole body before it reads
                    // never sees the `502`). Not after a refused head: the
                    // connection ends with its error at once, counted.
                    let sending = self.tunnel || self.upload.is_some() || !self.read.is_empty();
                    if sending && !self.read_closed && refused.is_none() {
                        let until = tokio::time::Instant::now() + LINGER_MOST;
                        self.state = State::Lingering { until };
                        self.head_timer = None;
                        true
                    } else {
                        return Poll::Ready(match refused {
                            Some(error) => Err(RefusedHead(error).into()),
                            None => Ok(()),
                        });
                    }
                }
                State::Lingering { until } => {
                    let until = *until;
                    ready!(self.poll_linger(cx, until));
                    return Poll::Ready(Ok(()));
                }
            };
            if !progressed {
                return Poll::Pending;
            }
        }
    }

    /// Reads and parses the next head, and calls the service with it.
    /// `Ready(false)`: the connection is over.
    fn poll_head(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, BoxError>> {
        ready!(self.poll_flush(cx))?;
        loop {
            // Shutting down, no request is started (hyper's server closes
            // a connection between requests at once, a head begun or not).
            if self.closing || (self.read.is_empty() && self.read_closed) {
                return Poll::Ready(Ok(false));
            }
            match self.heads.read(&mut self.read) {
                Ok(Some(head)) => {
                    self.start(head);
                    return Poll::Ready(Ok(true));
                }
                Ok(None) if self.read_closed => return Poll::Ready(Ok(false)),
                Ok(None) => {}
                Err(e) => return Poll::Ready(self.refuse(&e).map(|()| true)),
            }
            match self.poll_read(cx) {
                Poll::Ready(Ok(0)) => self.read_closed = true,
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => return self.poll_head_timer(cx),
            }
        }
    }

    /// A head begun after the first request must be whole within
    /// `header_read_timeout` of its first bytes (the first head's deadline
    /// is the connection driver's, from accept; a connection with nothing
    /// begun is idle, and `client_idle_timeout` is the driver's too).
    fn poll_head_timer(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, BoxError>> {
        if !self.served || self.read.is_empty() {
            return Poll::Pending;
        }
        let limit = self.header_read;
        let timer = self
            .head_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(timer.as_mut().poll(cx));
        Poll::Ready(Err(HeadTimeout(limit).into()))
    }

    /// Answers a head that cannot be served as hyper does (or closes
    /// without an answer where hyper does), then closes.
    fn refuse(&mut self, error: &HeadError) -> Result<(), BoxError> {
        tracing::debug!(error = %error, "Invalid request head.");
        self.read.clear();
        if let Some(status) = error.status() {
            let mut head = Response::new(()).into_parts().0;
            head.status = status;
            let answering = Answering {
                method: &Method::GET,
                version: self.version,
                keep_alive: false,
            };
            let mut bytes = Vec::new();
            response::encode_head(
                &head,
                &http_body::SizeHint::with_exact(0),
                true,
                &answering,
                &mut bytes,
            )?;
            self.out.push_head(bytes);
        }
        self.state = State::Closing {
            refused: Some(*error),
        };
        Ok(())
    }

    /// Calls the service with a parsed head.
    fn start(&mut self, head: RequestHead) {
        let RequestHead {
            mut parts,
            framing,
            keep_alive,
            expect_continue,
        } = head;
        if let (BodyFraming::Length(0), Some(upgrade)) = (framing, upgrade::asks(&parts)) {
            // The client's bytes once switched, read until it closes its
            // side, offered apart: the request's own body is empty.
            let (bytes, sender) = Body::channel(None);
            self.upload = Some(Upload::held(sender));
            parts.extensions.insert(Asked::new(upgrade, bytes.into()));
        }
        let body = match framing {
            BodyFraming::Length(0) => Body::empty(),
            BodyFraming::Length(_) | BodyFraming::Chunked => {
                let length = match framing {
                    BodyFraming::Length(n) => Some(n),
                    BodyFraming::Chunked => None,
                };
                let (body, sender) = Body::channel(length);
                self.upload = Some(Upload::new(framing.into(), sender, expect_continue));
                body
            }
        };
        let te = parts.headers.get_all(http::header::TE);
        let trailers = te.iter().any(|v| wire::has_token(v, "trailers"));
        let answering = Answered {
            method: parts.method.clone(),
            version: parts.version,
            keep_alive,
            trailers,
            keep_after: false,
            declared: http::HeaderMap::new(),
        };
        self.version = parts.version;
        self.served = true;
        self.head_timer = None;
        let future = self.service.call(Request::from_parts(parts, body));
        self.state = State::Waiting { future, answering };
    }

    /// Polls the service for the response head and queues it.
    fn poll_waiting(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, BoxError>> {
        let State::Waiting { future, .. } = &mut self.state else {
            return Poll::Ready(Ok(false));
        };
        let polled = Pin::new(future).poll(cx);
        // A `100 Continue` queued behind a full socket still goes out.
        if !self.out.is_empty() {
            if let Poll::Ready(Err(e)) = self.poll_flush(cx) {
                return Poll::Ready(Err(e));
            }
        }
        let response = match polled {
            Poll::Ready(Ok(response)) => response,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
            Poll::Pending => {
                self.poll_closed(cx)?;
                // A client that closed is gone (as in `poll_writing`).
                return if self.read_closed {
                    Poll::Ready(Err("the client closed the connection".into()))
                } else {
                    Poll::Pending
                };
            }
        };
        let State::Waiting { answering, .. } = std::mem::replace(&mut self.state, State::Head)
        else {
            return Poll::Ready(Ok(false));
        };
        let mut answering = answering;
        let (parts, body) = response.into_parts();
        self.tunnel = self.switches(parts.status);
        // A `100 Continue` not sent yet never is once the head goes out
        // (hyper's rule). A body still held is read on if the client sends
        // it anyway; one dropped unread leaves the connection reusable only
        // if the rest is already here (`finish_upload`).
        if let Some(upload) = &mut self.upload {
            upload.expect_continue = false;
        }
        let facts = Answering {
            method: &answering.method,
            version: answering.version,
            // A switch is last anyway, and its `Connection` must be only
            // `upgrade` (OkHttp refuses `upgrade, close`).
            keep_alive: self.tunnel || (answering.keep_alive && !self.closing),
        };
        let mut head = Vec::new();
        let decided = match response::encode_head(
            &parts,
            &body.size_hint(),
            body.is_end_stream(),
            &facts,
            &mut head,
        ) {
            Ok(decided) => decided,
            Err(e) => {
                // As hyper: nothing of the refused head goes out (but the
                // `500` it writes in place of a 1xx), and the connection
                // closes.
                tracing::debug!(error = %e, "Cannot write the response head.");
                if !head.is_empty() {
                    self.out.push_head(head);
                }
                self.state = State::Closing { refused: None };
                return Poll::Ready(Ok(true));
            }
        };
        // Switched: the upstream's bytes as they come, until it closes.
        let (framing, keep_after) = if self.tunnel {
            (Framing::CloseDelimited, false)
        } else {
            decided
        };
        self.out.push_head(head);
        answering.keep_after = keep_after;
        if answering.trailers {
            for value in parts.headers.get_all(http::header::TRAILER) {
                answering
                    .declared
                    .append(http::header::TRAILER, value.clone());
            }
        }
        self.state = match framing {
            Framing::None => State::Finishing {
                keep_alive: keep_after,
            },
            Framing::Length(0) if body.is_end_stream() => State::Finishing {
                keep_alive: keep_after,
            },
            framing => State::Writing {
                body: Box::pin(body),
                framing,
                left: match framing {
                    Framing::Length(n) => n,
                    _ => 0,
                },
                answering,
            },
        };
        Poll::Ready(Ok(true))
    }

    /// Whether the answer to a request that asked to switch protocols
    /// switches them (`101`): its body is then read from here on; any other
    /// answer leaves it without one, and the connection as it was.
    fn switches(&mut self, status: StatusCode) -> bool {
        let Some(upload) = self.upload.as_mut().filter(|u| u.held) else {
            return false;
        };
        if status == StatusCode::SWITCHING_PROTOCOLS {
            upload.held = false;
            return true;
        }
        upload.sender.end(Ok(()));
        self.upload = None;
        false
    }

    /// Polls the response body for what is ready, queues it, and writes.
    fn poll_writing(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, BoxError>> {
        let State::Writing {
            body,
            framing,
            left,
            answering,
        } = &mut self.state
        else {
            return Poll::Ready(Ok(false));
        };
        let framing = *framing;
        let mut ended = None;
        // Whether the body said it has nothing more for now (and so will
        // wake the task), rather than the queue filling up.
        let mut waiting = false;
        while self.out.pieces.len() < MAX_PIECES {
            let frame = match body.as_mut().poll_frame(cx) {
                Poll::Pending => {
                    waiting = true;
                    break;
                }
                Poll::Ready(None) => {
                    ended = Some(None);
                    break;
                }
                Poll::Ready(Some(Err(e))) => {
                    // What came before the failure still goes out; the
                    // client learns of it by the connection's close, with
                    // the body short of its end.
                    let _ = self.out.poll_write(&mut self.io, cx);
                    return Poll::Ready(Err(e.into()));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            let frame = match frame.into_data() {
                Ok(mut data) => {
                    let data = data.copy_to_bytes(data.remaining());
                    if data.is_empty() {
                        continue;
                    }
                    match framing {
                        Framing::Chunked => self.out.push_chunk(data),
                        Framing::Length(_) => {
                            let len = data.len() as u64;
                            if len > *left {
                                let _ = self.out.poll_write(&mut self.io, cx);
                                return Poll::Ready(Err(
                                    "the response body is longer than its content-length".into(),
                                ));
                            }
                            *left -= len;
                            self.out.push(Piece::Data(data));
                        }
                        Framing::CloseDelimited => self.out.push(Piece::Data(data)),
                        Framing::None => {}
                    }
                    continue;
                }
                Err(frame) => frame,
            };
            if let Ok(trailers) = frame.into_trailers() {
                ended = Some(Some(trailers));
                break;
            }
        }
        if let Some(trailers) = ended {
            match framing {
                Framing::Chunked => match trailers {
                    Some(trailers) => {
                        let mut last = Vec::new();
                        response::encode_last_chunk(
                            Some(&trailers),
                            &answering.declared,
                            answering.trailers,
                            &mut last,
                        );
                        self.out.push(Piece::Owned(last));
                    }
                    None => self.out.push(Piece::Static(b"0\r\n\r\n")),
                },
                Framing::Length(_) if *left > 0 => {
                    let _ = self.out.poll_write(&mut self.io, cx);
                    return Poll::Ready(Err(
                        "the response body ended before its content-length".into()
                    ));
                }
                _ => {}
            }
            let keep_alive = answering.keep_after && framing != Framing::CloseDelimited;
            if self.tunnel {
                // The session is over: nothing the client sends goes on
                // (it is read and dropped while lingering).
                self.upload = None;
            }
            // The body is dropped here: the request is no longer in flight
            // once its last bytes are queued.
            self.state = State::Finishing { keep_alive };
            return Poll::Ready(Ok(true));
        }
        ready!(self.poll_flush(cx))?;
        if !waiting {
            // The queue filled up and went out: the body may have more.
            return Poll::Ready(Ok(true));
        }
        // Everything queued went out: wait for the body, and notice a
        // client that closed meanwhile.
        self.poll_closed(cx)?;
        // A client that closed while a request is in flight is gone: as
        // hyper's server (without half-close), the connection ends, and the
        // response with it. A tunnel's client only ended its side, which
        // was passed on; the upstream's close ends the tunnel.
        if self.read_closed && !self.tunnel {
            return Poll::Ready(Err("the client closed the connection".into()));
        }
        Poll::Pending
    }

    /// Reads the request body as its reader asks for it.
    fn poll_upload(&mut self, cx: &mut Context<'_>) -> Result<(), BoxError> {
        loop {
            let Some(upload) = &mut self.upload else {
                return Ok(());
            };
            if upload.held {
                return Ok(());
            }
            if upload.expect_continue {
                if !upload.sender.poll_wanted(cx) {
                    return Ok(());
                }
                upload.expect_continue = false;
                if matches!(self.state, State::Waiting { .. }) {
                    self.out.push(Piece::Static(CONTINUE));
                    let _ = self.out.poll_write(&mut self.io, cx);
                }
            }
            match upload.sender.poll_room(cx) {
                Room::Full => return Ok(()),
                // Not wanted any more: the connection is not reused unless
                // the rest is already here (`finish_upload`).
                Room::Dropped => return Ok(()),
                Room::Free => {}
            }
            let (data, decoded) = upload.decoder.decode(&mut self.read, MAX_FRAME);
            match decoded {
                Decoded::End(trailers) => {
                    if !data.is_empty() {
                        upload.sender.send(http_body::Frame::data(data));
                    }
                    // The end (and trailers) follow the last data frame.
                    if let Some(trailers) = trailers {
                        upload.sender.trailers(trailers);
                    }
                    upload.sender.end(Ok(()));
                    self.upload = None;
                    return Ok(());
                }
                Decoded::Failed(e) => {
                    if !data.is_empty() {
                        upload.sender.send(http_body::Frame::data(data));
                    }
                    upload.sender.end(Err(BodyError::Malformed(e.to_string())));
                    self.upload = None;
                    // The connection cannot be read on: close after the answer.
                    self.closing = true;
                    return Ok(());
                }
                Decoded::Full | Decoded::More if !data.is_empty() => {
                    upload.sender.send(http_body::Frame::data(data));
                    continue;
                }
                Decoded::Full | Decoded::More => {}
            }
            match self.poll_read(cx) {
                Poll::Pending => return Ok(()),
                Poll::Ready(Ok(0)) => {
                    self.read_closed = true;
                    if let Some(upload) = self.upload.take() {
                        // A tunnel's switched bytes end where the client's
                        // do; a request body is cut short.
                        upload.sender.end(match self.tunnel {
                            true => Ok(()),
                            false => Err(BodyError::Gone),
                        });
                    }
                    return Ok(());
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => {
                    if let Some(upload) = self.upload.take() {
                        upload.sender.end(Err(BodyError::Gone));
                    }
                    return Err(e.into());
                }
            }
        }
    }

    /// Whether the rest of the request body was read, or is in the buffer
    /// and can be skipped, so the next head can be read.
    fn finish_upload(&mut self) -> bool {
        let Some(upload) = &mut self.upload else {
            return true;
        };
        loop {
            let (_, decoded) = upload.decoder.decode(&mut self.read, usize::MAX);
            match decoded {
                Decoded::End(_) => {
                    self.upload = None;
                    return true;
                }
                Decoded::Full => continue,
                Decoded::More | Decoded::Failed(_) => return false,
            }
        }
    }

    /// With no request body being read, reads ahead to notice a client
    /// that closed (hyper's server does the same), keeping what a
    /// pipelining client sent.
    fn poll_closed(&mut self, cx: &mut Context<'_>) -> Result<(), BoxError> {
        // As hyper: once a pipelined request's bytes wait, no more is read.
        // A switch's held bytes are not read yet: a client that left while
        // its handshake waits is noticed (what it sent stays in `read`).
        let reading = self.upload.as_ref().is_some_and(|u| !u.held);
        if reading || self.read_closed || !self.read.is_empty() {
            return Ok(());
        }
        match self.poll_read(cx) {
            Poll::Ready(Ok(0)) => self.read_closed = true,
            Poll::Ready(Err(e)) => return Err(e.into()),
            Poll::Ready(Ok(_)) | Poll::Pending => {}
        }
        Ok(())
    }

    /// Reads and drops what the client still sends, until it closes, or
    /// [`LINGER`] passes without its bytes, or `until`: a socket closed
    /// with bytes unread, or that gets more, is reset by the kernel, which
    /// drops what the client had not yet read of the answer (a `502`
    /// mid-upload, a switched connection's close frame), as nginx's
    /// lingering close avoids.
    fn poll_linger(&mut self, cx: &mut Context<'_>, until: tokio::time::Instant) -> Poll<()> {
        self.upload = None;
        let mut sent = false;
        loop {
            self.read.clear();
            match self.poll_read(cx) {
                Poll::Ready(Ok(0) | Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(_)) => sent = true,
                Poll::Pending => break,
            }
        }
        let idle = (tokio::time::Instant::now() + LINGER).min(until);
        let timer = self
            .head_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(idle)));
        if sent {
            timer.as_mut().reset(idle);
        }
        timer.as_mut().poll(cx)
    }

    fn poll_read(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        if self.read.capacity() - self.read.len() < READ_SIZE / 4 {
            self.read.reserve(READ_SIZE);
        }
        self.io.poll_read_buf(cx, &mut self.read)
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        while !self.out.is_empty() {
            ready!(self.out.poll_write(&mut self.io, cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl Upload {
    fn new(framing: DecoderFraming, sender: Sender, expect_continue: bool) -> Self {
        Self {
            decoder: Decoder::new(framing),
            sender,
            expect_continue,
            held: false,
        }
    }

    /// The body of a request that asks to switch protocols: read once it
    /// has, until the client closes.
    fn held(sender: Sender) -> Self {
        Self {
            decoder: Decoder::new(DecoderFraming::Close),
            sender,
            expect_continue: false,
            held: true,
        }
    }
}

/// A piece of what goes out, in order.
enum Piece {
    Head(Vec<u8>),
    Line(SizeLine),
    Data(Bytes),
    Static(&'static [u8]),
    Owned(Vec<u8>),
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match self {
            Self::Head(b) | Self::Owned(b) => b,
            Self::Line(l) => l.as_bytes(),
            Self::Data(b) => b,
            Self::Static(b) => b,
        }
    }
}

/// What waits to be written: a head, then body pieces.
#[derive(Default)]
struct Out {
    pieces: VecDeque<Piece>,
    /// Bytes of the front piece already written.
    at: usize,
}

impl Out {
    fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    fn push(&mut self, piece: Piece) {
        self.pieces.push_back(piece);
    }

    fn push_head(&mut self, head: Vec<u8>) {
        self.pieces.push_back(Piece::Head(head));
    }

    /// One chunk: its size line, its data and the CRLF after it.
    fn push_chunk(&mut self, data: Bytes) {
        self.pieces
            .push_back(Piece::Line(SizeLine::new(data.len())));
        self.pieces.push_back(Piece::Data(data));
        self.pieces.push_back(Piece::Static(b"\r\n"));
    }

    /// One `writev` of the first `N` pieces at most.
    fn poll_writev<const N: usize>(
        &self,
        io: &mut Quiet,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<usize>> {
        let mut slices = [IoSlice::new(&[]); N];
        let mut n = 0;
        for (i, piece) in self.pieces.iter().take(N).enumerate() {
            let bytes = piece.bytes();
            slices[i] = IoSlice::new(if i == 0 { &bytes[self.at..] } else { bytes });
            n = i + 1;
        }
        Pin::new(io).poll_write_vectored(cx, &slices[..n])
    }

    /// One `writev` of what waits (up to 64 pieces).
    fn poll_write(&mut self, io: &mut Quiet, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // An array of slices sized to what waits: all 64 slots set up for
        // a paced event's three pieces cost about 150 instructions a write.
        let mut written = ready!(match self.pieces.len() {
            0 => return Poll::Ready(Ok(())),
            1..=4 => self.poll_writev::<4>(io, cx),
            5..=16 => self.poll_writev::<16>(io, cx),
            _ => self.poll_writev::<64>(io, cx),
        })?;
        if written == 0 {
            return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
        }
        while let Some(front) = self.pieces.front() {
            let left = front.bytes().len() - self.at;
            if written < left {
                self.at += written;
                break;
            }
            written -= left;
            self.at = 0;
            self.pieces.pop_front();
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests;
