//! The `tokenclock` binary run as an operator runs it.

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tokenclock");

/// A running `tokenclock serve` and the log lines it has written.
pub struct Served {
    pub child: Child,
    pub addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

/// Starts `tokenclock serve` in front of `upstream` on ports chosen by the
/// kernel, with `extra` arguments and environment, and waits until it
/// logs its listening address.
pub fn serve(upstream: SocketAddr, extra: &[&str], env: &[(&str, &str)]) -> Served {
    let mut command = Command::new(BIN);
    command
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--upstream")
        .arg(format!("http://{upstream}"))
        .args(extra)
        .env("RUST_LOG", "info")
        .env_remove("TOKENCLOCK_CONFIG");
    for (k, v) in env {
        command.env(k, v);
    }
    spawn(command)
}

/// Starts `tokenclock serve --config FILE` with no other flags and no
/// `RUST_LOG` or `TOKENCLOCK_*` in its environment: every setting comes
/// from the file, which must listen on port 0.
pub fn serve_config(file: &std::path::Path) -> Served {
    let mut command = Command::new(BIN);
    command.arg("serve").arg("--config").arg(file);
    command.env_remove("RUST_LOG");
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("TOKENCLOCK_")) {
        command.env_remove(key);
    }
    spawn(command)
}

fn spawn(mut command: Command) -> Served {
    command.stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn tokenclock");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let log = Arc::new(Mutex::new(Vec::new()));
    let addr = loop {
        let line = lines
            .next()
            .expect("tokenclock exited early")
            .expect("log line");
        log.lock().expect("log").push(line.clone());
        if let Some(addr) = listen_addr(&line) {
            break addr;
        }
    };
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            sink.lock().expect("log").push(line);
        }
    });
    Served { child, addr, log }
}

/// The proxy address in a "Proxy listening." line, text or JSON.
fn listen_addr(line: &str) -> Option<SocketAddr> {
    if !line.contains("Proxy listening.") {
        return None;
    }
    // `listen=ADDR` in text, `"listen":"ADDR"` in JSON.
    let rest = line
        .split("listen")
        .find(|part| part.starts_with('=') || part.starts_with('"'))?;
    let start = rest.find(|c: char| c.is_ascii_digit())?;
    let end = rest[start..]
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
        .map_or(rest.len(), |e| start + e);
    rest[start..end].parse().ok()
}

impl Served {
    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Sends the signal `name` (`HUP`, `TERM`…).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// The log lines written so far.
    pub fn log(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }

    /// The first log line after the first `skip` that contains `needle`,
    /// waiting up to 10 s for it.
    pub async fn log_line(&self, skip: usize, needle: &str) -> String {
        for _ in 0..500 {
            if let Some(line) = self
                .log()
                .into_iter()
                .skip(skip)
                .find(|l| l.contains(needle))
            {
                return line;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("no log line with {needle:?}: {:#?}", self.log());
    }

    /// The address of `/metrics`, from the "Proxy listening." line (text format).
    pub fn metrics_addr(&self) -> SocketAddr {
        let log = self.log();
        let line = log
            .iter()
            .find(|l| l.contains("Proxy listening."))
            .expect("listening line");
        let rest = line
            .split("metrics_listen=")
            .nth(1)
            .expect("metrics_listen=");
        let addr = rest.split_whitespace().next().unwrap_or_default();
        addr.parse().expect("metrics address")
    }

    /// Waits for the process to exit and returns its status and full log.
    pub async fn wait(mut self) -> (ExitStatus, Vec<String>) {
        let status = tokio::task::spawn_blocking(move || {
            let status = self.child.wait();
            (status, self.log)
        })
        .await
        .expect("join");
        let (status, log) = status;
        // Give the reader thread a moment to drain the closed pipe.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let lines = log.lock().expect("log").clone();
        (status.expect("wait"), lines)
    }
}
