//! A client connection's turns: each poll of hyper's connection, so that a
//! stream whose body failed can wait until the connection has written what
//! the stream had queued.
//!
//! hyper resets an h2 stream as soon as its response body fails, and h2
//! drops the frames it had queued for that stream and not yet written: the
//! response HEADERS and the DATA before the failure. A stream's body is
//! polled on a task of its own and its frames are written by the
//! connection's, so with several worker threads the body could fail (an
//! upstream that cut the stream right after its head or an event) before
//! the connection had written them, and the client got a bare
//! `RST_STREAM`: a response that lost its head and events, where the
//! upstream had sent them.
//!
//! A turn of the connection, once it ends, has handed every frame queued
//! before it began to the socket's buffer (h2 writes what its streams
//! queued at the end of each poll of the connection, until the socket is
//! full). So a failed body takes a [`Ticket`] (which also wakes the
//! connection, so a turn comes) and holds its error until a turn begun
//! after the ticket has ended: then the reset follows the frames. Only a
//! client that stops reading (its socket full) can still lose them.

use std::{
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Mutex,
    },
    task::{Context, Poll, Waker},
};

use atomic_waker::AtomicWaker;

/// One connection's turns, and the streams waiting for one.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// Turns begun; each ends before the next begins (one task polls).
    begun: AtomicU64,
    /// The last turn ended (`u64::MAX` once the connection is gone).
    ended: AtomicU64,
    /// The connection's task, woken for a turn a stream waits for.
    task: AtomicWaker,
    /// Whether `waiting` may be non-empty: read on every turn's end, so
    /// the lock is taken only when a stream waits.
    any_waiting: AtomicBool,
    waiting: Mutex<Vec<Waker>>,
}

/// A turn to wait for: the first that begins after the ticket was taken.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ticket(u64);

impl Turns {
    /// The connection's task begins a turn (it polls the connection).
    pub(crate) fn begin(&self, cx: &Context<'_>) {
        self.task.register(cx.waker());
        self.begun.fetch_add(1, Ordering::SeqCst);
    }

    /// The turn begun last has ended: the streams waiting for it go on.
    pub(crate) fn end(&self) {
        // `fetch_max`: a connection gone (`u64::MAX`) stays gone.
        self.ended
            .fetch_max(self.begun.load(Ordering::SeqCst), Ordering::SeqCst);
        self.wake_waiting();
    }

    /// The connection is gone: no turn will come, nothing is left to wait
    /// for.
    pub(crate) fn close(&self) {
        self.ended.store(u64::MAX, Ordering::SeqCst);
        self.wake_waiting();
    }

    /// A ticket for the next turn to begin; wakes the connection's task,
    /// so that one does.
    pub(crate) fn ticket(&self) -> Ticket {
        let ticket = Ticket(self.begun.load(Ordering::SeqCst));
        self.task.wake();
        ticket
    }

    /// Ready once a turn begun after `ticket` has ended (or the connection
    /// is gone); else `cx`'s task is woken when one ends.
    pub(crate) fn poll_passed(&self, ticket: Ticket, cx: &Context<'_>) -> Poll<()> {
        if self.passed(ticket) {
            return Poll::Ready(());
        }
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if !waiting.iter().any(|w| w.will_wake(cx.waker())) {
                waiting.push(cx.waker().clone());
            }
            self.any_waiting.store(true, Ordering::SeqCst);
        }
        // A turn that ended before the flag was set did not look at it.
        if self.passed(ticket) {
            return Poll::Ready(());
        }
        Poll::Pending
    }

    fn passed(&self, Ticket(begun): Ticket) -> bool {
        self.ended.load(Ordering::SeqCst) > begun
    }

    fn wake_waiting(&self) {
        if !self.any_waiting.load(Ordering::SeqCst) {
            return;
        }
        let waiting = {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            self.any_waiting.store(false, Ordering::SeqCst);
            std::mem::take(&mut *waiting)
        };
        for waker in waiting {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        future::poll_fn,
        sync::{
            atomic::{AtomicUsize, Ordering},
            Arc,
        },
        task::Wake,
    };

    use super::*;

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let count = Arc::new(Count::default());
        (count.clone(), Waker::from(count))
    }

    /// The turn in progress when the ticket was taken does not count: it
    /// may have written the connection's frames before the stream queued
    /// its own. The next one does, and the ticket asks for it.
    #[test]
    fn a_ticket_waits_for_a_turn_begun_after_it() {
        let turns = Turns::default();
        let (connection, task) = waker();
        let (stream, body) = waker();
        let (task, body) = (Context::from_waker(&task), Context::from_waker(&body));
        turns.begin(&task);
        let ticket = turns.ticket();
        assert_eq!(
            connection.0.load(Ordering::SeqCst),
            1,
            "a turn was asked for"
        );
        assert!(turns.poll_passed(ticket, &body).is_pending());
        turns.end();
        assert!(
            turns.poll_passed(ticket, &body).is_pending(),
            "begun before"
        );
        assert_eq!(stream.0.load(Ordering::SeqCst), 1, "woken to look");
        turns.begin(&task);
        assert!(turns.poll_passed(ticket, &body).is_pending(), "not ended");
        turns.end();
        assert_eq!(stream.0.load(Ordering::SeqCst), 2);
        assert!(turns.poll_passed(ticket, &body).is_ready());
    }

    /// Between turns, the next one to begin is the one waited for.
    #[test]
    fn between_turns_the_next_one_passes_a_ticket() {
        let turns = Turns::default();
        let (_, task) = waker();
        let (_, body) = waker();
        let (task, body) = (Context::from_waker(&task), Context::from_waker(&body));
        turns.begin(&task);
        turns.end();
        let ticket = turns.ticket();
        assert!(turns.poll_passed(ticket, &body).is_pending());
        turns.begin(&task);
        turns.end();
        assert!(turns.poll_passed(ticket, &body).is_ready());
    }

    /// A connection gone passes every ticket: a stream never waits for a
    /// turn that cannot come.
    #[test]
    fn a_closed_connection_passes_every_ticket() {
        let turns = Turns::default();
        let (_, task) = waker();
        let (stream, body) = waker();
        let (task, body) = (Context::from_waker(&task), Context::from_waker(&body));
        turns.begin(&task);
        let ticket = turns.ticket();
        assert!(turns.poll_passed(ticket, &body).is_pending());
        turns.close();
        assert_eq!(stream.0.load(Ordering::SeqCst), 1);
        assert!(turns.poll_passed(ticket, &body).is_ready());
        turns.begin(&task);
        turns.end();
        assert!(
            turns.poll_passed(turns.ticket(), &body).is_ready(),
            "stays gone"
        );
    }

    /// Streams on other threads waiting while the connection takes turns:
    /// each is woken and passes, none is lost between its look and its
    /// registration.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn streams_on_other_threads_all_pass() {
        let turns = Arc::new(Turns::default());
        let done = Arc::new(AtomicBool::new(false));
        let connection = {
            let (turns, done) = (turns.clone(), done.clone());
            tokio::spawn(poll_fn(move |cx| {
                turns.begin(cx);
                std::thread::yield_now();
                turns.end();
                if done.load(Ordering::SeqCst) {
                    Poll::Ready(())
                } else {
                    Poll::Pending
                }
            }))
        };
        let mut streams = tokio::task::JoinSet::new();
        for _ in 0..2_000 {
            let turns = turns.clone();
            streams.spawn(async move {
                let ticket = turns.ticket();
                poll_fn(|cx| turns.poll_passed(ticket, cx)).await;
            });
        }
        // A lost wake-up leaves a stream waiting: fail, do not hang.
        let all = async {
            while let Some(joined) = streams.join_next().await {
                joined.expect("stream");
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(30), all)
            .await
            .expect("every stream passed");
        done.store(true, Ordering::SeqCst);
        turns.ticket();
        connection.await.expect("connection");
    }
}
