use std::{
    io::{self, Write},
    sync::{mpsc, Arc, Mutex},
};

use super::super::testing::Kept;
use super::{spawn, Counters, DroppedLines};
use prometheus::core::Collector;

fn counters() -> &'static Counters {
    Box::leak(Box::new(Counters::new()))
}

/// An output that keeps what it is given and counts its writes.
#[derive(Clone, Default)]
struct Counted(Arc<Mutex<(Vec<u8>, usize)>>);

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut kept = self.0.lock().expect("kept");
        kept.0.extend_from_slice(buf);
        kept.1 += 1;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// An output whose reader is gone.
struct Broken;

impl Write for Broken {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(io::ErrorKind::BrokenPipe.into())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// An output that says when a write has begun, then blocks until its
/// release sender sends or is dropped.
struct Blocked {
    entered: mpsc::Sender<()>,
    release: mpsc::Receiver<()>,
}

impl Write for Blocked {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.entered.send(());
        let _ = self.release.recv();
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn lines_arrive_in_order_and_the_guard_writes_what_is_queued() {
    let kept = Kept::default();
    let counters = counters();
    let (writer, guard) = spawn(kept.clone(), 1024, counters).expect("spawn");
    let mut expected = Vec::new();
    for i in 0..500 {
        let line = format!("line {i}\n");
        (&writer).write_all(line.as_bytes()).expect("never fails");
        expected.extend_from_slice(line.as_bytes());
    }
    drop(guard);
    assert_eq!(kept.bytes(), expected);
    assert_eq!((counters.queue_full(), counters.write_error()), (0, 0));
}

/// Lines that come closer together than the linger are written together
/// (one `write(2)`, not one per line, as an access line per request
/// would), and without the guard: the linger ends with a write.
#[test]
fn lines_within_the_linger_are_written_at_once() {
    let output = Counted::default();
    let counters = counters();
    let (writer, guard) = spawn(output.clone(), 1024, counters).expect("spawn");
    let pause = super::LINGER / 10;
    for i in 0..5 {
        (&writer)
            .write_all(format!("line {i}\n").as_bytes())
            .expect("never fails");
        std::thread::sleep(pause);
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while output.0.lock().expect("kept").0.len() < 35 && tokio::time::Instant::now() < deadline {
        std::thread::sleep(pause);
    }
    let (bytes, writes) = output.0.lock().expect("kept").clone();
    assert_eq!(bytes, b"line 0\nline 1\nline 2\nline 3\nline 4\n");
    // One write, or two if the machine stalled the loop past the linger.
    assert!(writes <= 2, "{writes} writes for 5 lines");
    drop(guard);
}

#[test]
fn a_failing_output_counts_its_lines_and_never_fails_the_caller() {
    let counters = counters();
    let (writer, guard) = spawn(Broken, 1024, counters).expect("spawn");
    for _ in 0..10 {
        (&writer).write_all(b"lost\n").expect("never fails");
    }
    drop(guard);
    assert_eq!(counters.write_error(), 10);
    assert_eq!(counters.queue_full(), 0);
    // After the writer ended, lines are counted as not queued.
    (&writer).write_all(b"late\n").expect("never fails");
    assert_eq!(counters.queue_full(), 1);
}

#[test]
fn a_blocked_output_drops_lines_instead_of_blocking() {
    let (release, blocked) = mpsc::channel();
    let (entered, writing) = mpsc::channel();
    let counters = counters();
    let output = Blocked {
        entered,
        release: blocked,
    };
    let (writer, guard) = spawn(output, 4, counters).expect("spawn");
    (&writer).write_all(b"first\n").expect("never fails");
    // The writer thread is now stuck in write(2), as on an undrained pipe.
    writing.recv().expect("the writer began a write");
    for _ in 0..1000 {
        (&writer).write_all(b"line\n").expect("never fails");
    }
    // Only the queue (4 lines) takes more; every other line is dropped.
    assert!(counters.queue_full() >= 996, "{}", counters.queue_full());
    // The guard gives up after its budget instead of waiting for the output.
    drop(guard);
    drop(release);
}

#[test]
fn the_collector_exports_both_reasons() {
    let collector = DroppedLines::new().expect("collector");
    let families = collector.collect();
    assert_eq!(families.len(), 1);
    assert_eq!(families[0].name(), super::DROPPED_NAME);
    let reasons: Vec<&str> = families[0]
        .get_metric()
        .iter()
        .flat_map(|m| m.get_label().iter().map(|l| l.value()))
        .collect();
    assert_eq!(reasons, ["queue_full", "write_error"]);
}
