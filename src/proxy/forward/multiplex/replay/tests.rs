use std::{collections::VecDeque, convert::Infallible, task::Waker};

use http_body_util::{BodyExt, Full};

use super::*;

/// A body of `frames`, then its end; or, `open`, no end yet (a client
/// still sending). Says it ended only once polled to its end, as a
/// chunked body does.
struct Frames {
    frames: VecDeque<Frame<Bytes>>,
    open: bool,
}

impl Frames {
    fn new(data: &[&'static [u8]], trailers: Option<HeaderMap>) -> Self {
        let mut frames: VecDeque<_> = data
            .iter()
            .map(|d| Frame::data(Bytes::from_static(d)))
            .collect();
        frames.extend(trailers.map(Frame::trailers));
        Self {
            frames,
            open: false,
        }
    }
}

impl Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.frames.pop_front() {
            Some(frame) => Poll::Ready(Some(Ok(frame))),
            None if self.open => Poll::Pending,
            None => Poll::Ready(None),
        }
    }
}

impl<B: Body> Outbound<B> {
    /// `body`, with a budget of its own.
    fn new_in_test(body: B) -> (Self, Replay<B>) {
        Self::new(body, &CaptureBudget::new(REPLAY_TOTAL))
    }
}

/// Polls `body` as hyper does: while it does not say it ended, and not
/// past a frame that is not ready. What it sent.
fn send<B: Body<Data = Bytes, Error = Infallible> + Unpin>(body: &mut Outbound<B>) -> Vec<u8> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut sent = Vec::new();
    while !body.is_end_stream() {
        match Pin::new(&mut *body).poll_frame(&mut cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    sent.extend_from_slice(data);
                }
            }
            Poll::Ready(None) | Poll::Pending => break,
        }
    }
    sent
}

/// What `body` sends to its end, and its trailers.
async fn whole<B>(body: Outbound<B>) -> (Bytes, Option<HeaderMap>)
where
    B: Body<Data = Bytes, Error = Infallible> + Unpin,
{
    let collected = body.collect().await.expect("infallible");
    let trailers = collected.trailers().cloned();
    (collected.to_bytes(), trailers)
}

const CHAT: &[u8] = b"{\"model\":\"m\",\"messages\":[]}";

fn chat() -> Frames {
    Frames::new(&[b"{\"model\":", b"\"m\",", b"\"messages\":[]}"], None)
}

#[tokio::test]
async fn a_body_sent_to_its_end_is_sent_again_whole_as_often_as_asked() {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let mut frames = chat();
    frames.frames.push_back(Frame::trailers(trailers.clone()));
    let (mut body, replay) = Outbound::new_in_test(frames);
    assert_eq!(send(&mut body), CHAT);
    for _ in 0..2 {
        let again = replay.again().expect("copied whole");
        // Of no exact size, as the client's (chunked): no `content-length`
        // is added the second time.
        let hint = again.size_hint();
        assert_eq!((hint.exact(), hint.lower()), (None, 27));
        let (data, sent_trailers) = whole(again).await;
        assert_eq!(&data[..], CHAT);
        assert_eq!(sent_trailers, Some(trailers.clone()));
    }
}

/// An upstream that refuses a stream as its head arrives does so before
/// hyper reads a byte of the body: the body is sent again from its first
/// byte, however long.
#[tokio::test]
async fn a_body_not_read_yet_is_sent_again_from_its_first_byte() {
    let (_body, replay) = Outbound::new_in_test(chat());
    let (data, _) = whole(replay.again().expect("nothing read")).await;
    assert_eq!(&data[..], CHAT);

    let long = Full::new(Bytes::from(vec![b'x'; REPLAY_LIMIT * 2]));
    let (_body, replay) = Outbound::new_in_test(long);
    let again = replay.again().expect("nothing read, so nothing to copy");
    assert_eq!(again.size_hint().exact(), Some(REPLAY_LIMIT as u64 * 2));
    let (data, _) = whole(again).await;
    assert_eq!(data.len(), REPLAY_LIMIT * 2);
}

/// A body still coming when its stream failed: the attempt after sends
/// what was copied, then the rest as it comes; the attempt before reads
/// no more.
#[tokio::test]
async fn a_body_still_coming_is_sent_again_copy_first_then_the_rest() {
    let mut frames = Frames::new(&[b"{\"model\":", b"\"m\","], None);
    frames.open = true;
    let (mut first, replay) = Outbound::new_in_test(frames);
    assert_eq!(send(&mut first), b"{\"model\":\"m\",");
    let mut second = replay.again().expect("all it sent is copied");
    let mut cx = Context::from_waker(Waker::noop());
    assert!(first.is_end_stream(), "retired");
    assert!(matches!(
        Pin::new(&mut first).poll_frame(&mut cx),
        Poll::Ready(None)
    ));
    assert_eq!(send(&mut second), b"{\"model\":\"m\",");
    {
        let mut record = lock(&replay.record);
        record
            .source
            .frames
            .push_back(Frame::data(Bytes::from_static(b"\"messages\":[]}")));
        record.source.open = false;
    }
    let (rest, _) = whole(second).await;
    assert_eq!(&rest[..], b"\"messages\":[]}");
    // And again: the copy has all of it now.
    let (data, _) = whole(replay.again().expect("whole")).await;
    assert_eq!(&data[..], CHAT);
}

/// hyper stops polling a body that says it ended: one with a length after
/// its last frame, or a bodiless request, which it never polls at all.
#[tokio::test]
async fn a_body_that_says_it_ended_is_whole_without_being_polled_to_its_end() {
    let (mut body, replay) = Outbound::new_in_test(Full::new(Bytes::from_static(b"{\"n\":1}")));
    assert_eq!(send(&mut body), b"{\"n\":1}");
    let again = replay.again().expect("whole after its last frame");
    assert_eq!(
        again.size_hint().exact(),
        Some(7),
        "a content-length, as before"
    );
    assert_eq!(&whole(again).await.0[..], b"{\"n\":1}");

    let (body, replay) = Outbound::new_in_test(Full::new(Bytes::new()));
    assert!(body.is_end_stream(), "a bodiless request");
    let again = replay.again().expect("whole, never polled");
    assert!(
        again.is_end_stream(),
        "sent again bodiless, END_STREAM on its head"
    );
    assert_eq!(again.size_hint().exact(), Some(0));
}

/// A body that sent more than a copy holds is not sent again; one that
/// sent nothing yet is.
#[test]
fn a_body_that_sent_past_the_limit_is_not_sent_again() {
    static BIG: [u8; REPLAY_LIMIT / 2 + 1] = [b'x'; REPLAY_LIMIT / 2 + 1];
    let (mut body, replay) = Outbound::new_in_test(Frames::new(&[&BIG, &BIG], None));
    assert_eq!(send(&mut body).len(), REPLAY_LIMIT + 2);
    assert!(replay.again().is_none());
    assert_eq!(lock(&replay.record).data.capacity(), 0, "the copy let go");

    // At the limit, it is.
    let (mut body, replay) = Outbound::new_in_test(Frames::new(&[&BIG[1..], &BIG[1..]], None));
    assert_eq!(send(&mut body).len(), REPLAY_LIMIT);
    assert!(replay.again().is_some());
}

#[test]
fn once_the_head_came_the_copy_is_let_go() {
    let (mut body, replay) = Outbound::new_in_test(Frames::new(&[b"{}"], None));
    send(&mut body);
    replay.forget();
    assert!(replay.again().is_none());
    assert_eq!(lock(&replay.record).data.capacity(), 0);
}

/// A head that comes while a body sent again is still being sent (an
/// upstream that answers early) lets the copy go, not the bytes still to
/// send: the upstream gets the body whole.
#[tokio::test]
async fn a_body_sent_again_is_sent_whole_after_its_copy_is_let_go() {
    let mut trailers = HeaderMap::new();
    trailers.insert("x-end", http::HeaderValue::from_static("1"));
    let (mut body, replay) =
        Outbound::new_in_test(Frames::new(&[b"{\"a\":", b"1}"], Some(trailers)));
    send(&mut body);
    let again = replay.again().expect("whole");
    drop(replay);
    let (data, trailers) = whole(again).await;
    assert_eq!(&data[..], b"{\"a\":1}");
    assert!(trailers.is_some_and(|t| t.contains_key("x-end")));
}

/// The copies share the budget: one that would take it past is dropped,
/// and what a copy held is given back once its head came.
#[test]
fn copies_hold_no_more_than_their_budget_together() {
    let budget = CaptureBudget::new(1000);
    let (mut first, kept) = Outbound::new(Full::new(Bytes::from(vec![b'x'; 600])), &budget);
    send(&mut first);
    assert_eq!(
        budget.held(),
        600,
        "a body of known length, copied in one allocation"
    );
    let (mut second, dropped) = Outbound::new(Full::new(Bytes::from(vec![b'y'; 600])), &budget);
    send(&mut second);
    assert!(dropped.again().is_none(), "past the budget");
    assert!(kept.again().is_some());
    assert_eq!(budget.held(), 600);
    kept.forget();
    assert_eq!(budget.held(), 0);
}

/// A copy grows as a `Vec` does but never past the limit, and takes from
/// the budget before it allocates; a body whose length is past the limit
/// is copied until it sent more than that (an upstream refuses a stream
/// as it comes), in no more than the limit.
#[test]
fn a_copy_holds_no_more_than_the_limit_as_allocated() {
    static PART: [u8; 1000] = [b'x'; 1000];
    let budget = CaptureBudget::new(REPLAY_TOTAL);
    let parts: Vec<&'static [u8]> = vec![&PART; REPLAY_LIMIT / 1000];
    let (mut body, replay) = Outbound::new(Frames::new(&parts, None), &budget);
    send(&mut body);
    assert!(replay.again().is_some());
    assert!(budget.held() <= REPLAY_LIMIT, "{} held", budget.held());
    drop(replay);
    assert_eq!(budget.held(), 0);

    let long: Vec<&'static [u8]> = vec![&PART; REPLAY_LIMIT / 1000 + 1];
    let mut frames = Frames::new(&long, None);
    let length = (long.len() * PART.len()) as u64;
    frames.open = true;
    let (mut body, replay) = Outbound::new(Sized(frames, length), &budget);
    let mut cx = Context::from_waker(Waker::noop());
    let _ = Pin::new(&mut body).poll_frame(&mut cx);
    let held = budget.held();
    assert!(
        (1..=REPLAY_LIMIT).contains(&held),
        "copied, not as long as it is: {held}"
    );
    assert!(replay.again().is_some(), "a first frame of a long body");
    send(&mut replay.again().expect("still"));
    assert_eq!(budget.held(), 0, "let go past the limit");
    assert!(replay.again().is_none());
}

/// `Frames` of a declared length (a `content-length`).
struct Sized(Frames, u64);

impl Body for Sized {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.0).poll_frame(cx)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.1)
    }
}

/// Whether hyper began to pipe the body: a bodiless request's never is.
#[test]
fn a_body_is_piped_once_polled() {
    let (body, replay) = Outbound::new_in_test(Full::new(Bytes::new()));
    assert!(body.is_end_stream());
    assert!(!replay.piped());
    let (mut body, replay) = Outbound::new_in_test(Frames::new(&[b"{}"], None));
    send(&mut body);
    assert!(replay.piped());
}
