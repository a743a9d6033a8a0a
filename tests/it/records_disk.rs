//! The record log when the disk fills, with the real binary: every lost
//! record is counted, the file never keeps a partial line, and records
//! resume once space returns.
//!
//! The disk is a 256 KiB tmpfs mounted for the test (root, CAP_SYS_ADMIN).
//! Where mounting is denied, the proxy's file-size limit (RLIMIT_FSIZE, set
//! live with `prlimit`, SIGXFSZ ignored) fails its writes the same way,
//! with a short write and then EFBIG. The test skips only when neither is
//! available.

use std::{
    fs,
    io::{self, Write},
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use crate::common::{
    client::{self, collect, send},
    process::{self, sample, Served},
    upstream::Echo,
};
use bytes::Bytes;
use http::Request;
use http_body_util::Full;

const DROPPED: &str = "tokenclock_records_dropped_total";
/// Requests before the disk fills, while it is full, and after space returns.
const BEFORE: u64 = 5;
const FULL: u64 = 40;
const AFTER: u64 = 20;

/// How the record file's disk is made to run out of space.
enum Squeeze {
    /// A small tmpfs at `dir`: filled by `filler`, freed by removing it.
    Tmpfs { dir: PathBuf, filler: PathBuf },
    /// The proxy's RLIMIT_FSIZE, lowered to just above the file's size.
    FileSize,
}

impl Squeeze {
    /// A tmpfs mounted at `dir`, else the file-size limit, else `None`.
    fn new(dir: &Path) -> Option<Self> {
        fs::create_dir_all(dir).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(dir)
            .output()
            .is_ok_and(|out| out.status.success());
        if mounted {
            let filler = dir.join("filler");
            return Some(Self::Tmpfs {
                dir: dir.to_owned(),
                filler,
            });
        }
        let prlimit = Command::new("prlimit").arg("--version").output();
        prlimit
            .is_ok_and(|out| out.status.success())
            .then_some(Self::FileSize)
    }

    /// The proxy, started so that its writes can be made to fail.
    fn serve(&self, upstream: SocketAddr, config: &Path) -> Served {
        let config = config.to_str().expect("utf-8 path");
        let command = match self {
            Self::Tmpfs { .. } => process::command(
                upstream,
                "127.0.0.1:0",
                "127.0.0.1:0",
                &["--config", config],
                &[],
            ),
            // Started as an operator starts it: SIGXFSZ at its default
            // action, which ends the process unless the proxy handles it.
            Self::FileSize => process::command(
                upstream,
                "127.0.0.1:0",
                "127.0.0.1:0",
                &["--config", config],
                &[],
            ),
        };
        process::launch(command).drain()
    }

    /// Leaves room for a few records at most.
    fn fill(&self, pid: u32, records: &Path) {
        match self {
            Self::Tmpfs { filler, .. } => {
                let mut file = fs::File::create(filler).expect("filler");
                let page = [b'x'; 4096];
                while file.write_all(&page).is_ok() {}
                // One page back: the next write fits partly, then fails.
                let len = file.metadata().expect("filler size").len();
                file.set_len(len.saturating_sub(4096)).expect("free a page");
            }
            Self::FileSize => {
                let size = fs::metadata(records).map_or(0, |m| m.len());
                prlimit(pid, &format!("{}:", size + 4096));
            }
        }
    }

    /// Gives the space back.
    fn free(&self, pid: u32) {
        match self {
            Self::Tmpfs { filler, .. } => fs::remove_file(filler).expect("remove filler"),
            Self::FileSize => prlimit(pid, "unlimited:"),
        }
    }
}

impl Drop for Squeeze {
    fn drop(&mut self) {
        if let Self::Tmpfs { dir, .. } = self {
            let _ = Command::new("umount").arg("-l").arg(&*dir).status();
        }
    }
}

/// Sets the soft RLIMIT_FSIZE of `pid` (`SOFT:` in prlimit's syntax).
fn prlimit(pid: u32, limit: &str) {
    let status = Command::new("prlimit")
        .args(["--pid", &pid.to_string(), &format!("--fsize={limit}")])
        .status()
        .expect("prlimit");
    assert!(status.success(), "prlimit --fsize={limit}");
}

/// `n` echoed requests through the proxy, each whole.
async fn requests(addr: SocketAddr, n: u64) {
    for i in 0..n {
        let request = Request::post("/v1/chat/completions")
            .body(Full::new(Bytes::from_static(b"{\"model\":\"m\"}")))
            .expect("request");
        let response = collect(send(addr, request).await.expect("response head")).await;
        let response = response.unwrap_or_else(|e| panic!("request {i} was cut: {e}"));
        assert_eq!(response.status, 200, "request {i}");
    }
}

/// The file's text now: a writer may be between a short write and the
/// cut back to the last whole line.
fn read(path: &Path) -> String {
    match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => panic!("read {}: {e}", path.display()),
    }
}

/// The file's complete lines, once the writer has settled; fails on a
/// partial last line.
fn lines(path: &Path) -> Vec<String> {
    let text = read(path);
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "a partial line was left: {:?}",
        text.lines().last()
    );
    text.lines().map(str::to_owned).collect()
}

async fn dropped(metrics: SocketAddr) -> u64 {
    let text = String::from_utf8(client::get(metrics, "/metrics").await.body()).expect("utf-8");
    sample(&text, DROPPED).expect("the dropped counter") as u64
}

/// Waits (up to 10 s) until every record sent is written or counted, and
/// returns (written, dropped).
async fn settle(metrics: SocketAddr, path: &Path, sent: u64) -> (u64, u64) {
    let mut seen = (0, 0);
    for _ in 0..100 {
        let text = read(path);
        let whole = text.bytes().filter(|&b| b == b'\n').count() as u64;
        seen = (whole, dropped(metrics).await);
        if seen.0 + seen.1 == sent && (text.is_empty() || text.ends_with('\n')) {
            return (lines(path).len() as u64, seen.1);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    seen
}

#[tokio::test]
async fn a_full_disk_loses_only_counted_records_and_never_leaves_a_partial_line() {
    let base = std::env::temp_dir().join(format!("tokenclock-disk-{}", std::process::id()));
    let Some(squeeze) = Squeeze::new(&base.join("disk")) else {
        eprintln!(
            "SKIPPED: cannot mount a tmpfs (needs root) and no prlimit to lower RLIMIT_FSIZE"
        );
        return;
    };
    lose_and_resume(squeeze, &base).await;
}

/// A file-size limit (`ulimit -f`, RLIMIT_FSIZE) reached by the records
/// file: a write past it raises SIGXFSZ, whose default action ended the
/// process and every request in flight (exit 153, a partial line left;
/// until 2026-12-07). The proxy handles the signal, so the write fails
/// with EFBIG and the record is counted dropped, as on a full disk.
#[tokio::test]
async fn a_file_size_limit_loses_only_counted_records_and_kills_nothing() {
    let base = std::env::temp_dir().join(format!("tokenclock-fsize-{}", std::process::id()));
    fs::create_dir_all(base.join("disk")).expect("records dir");
    lose_and_resume(Squeeze::FileSize, &base).await;
}

/// Records before the squeeze, during it and after it: every one written
/// or counted dropped, none a partial line, and the proxy exits cleanly.
async fn lose_and_resume(squeeze: Squeeze, base: &Path) {
    let path = base.join("disk").join("records.jsonl");
    let config = base.join("tokenclock.toml");
    fs::write(&config, format!("[records]\npath = {:?}\n", path)).expect("config");
    let echo = Echo::start().await;
    let served = squeeze.serve(echo.addr, &config);
    let (addr, metrics, pid) = (served.addr, served.metrics_addr, served.child.id());

    requests(addr, BEFORE).await;
    assert_eq!(settle(metrics, &path, BEFORE).await, (BEFORE, 0));

    squeeze.fill(pid, &path);
    requests(addr, FULL).await;
    let (written, lost) = settle(metrics, &path, BEFORE + FULL).await;
    assert_eq!(
        written + lost,
        BEFORE + FULL,
        "every record written or counted"
    );
    assert!(lost > 0, "the disk was full, yet nothing was lost");

    squeeze.free(pid);
    requests(addr, AFTER).await;
    let after = settle(metrics, &path, BEFORE + FULL + AFTER).await;
    assert_eq!(
        after,
        (written + AFTER, lost),
        "records resume when space returns"
    );
    for line in lines(&path) {
        let parsed: Result<serde_json::Value, _> = serde_json::from_str(&line);
        assert!(parsed.is_ok(), "not a JSON line: {line}");
    }

    served.sigterm();
    let (status, _) = served.wait().await;
    assert_eq!(status.code(), Some(0));
    drop(squeeze);
    let _ = fs::remove_dir_all(base);
}
