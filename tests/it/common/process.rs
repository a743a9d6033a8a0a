//! The `tokenclock` binary run as an operator runs it.

use std::{
    io::{BufRead, BufReader, Lines},
    net::SocketAddr,
    process::{Child, ChildStderr, Command, ExitStatus, Stdio},
    sync::{Arc, Mutex},
};

/// The binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_tokenclock");

/// A running `tokenclock serve` and the log lines it has written.
pub struct Served {
    pub child: Running,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

/// A `tokenclock serve` started with stderr a pipe, read up to its
/// listening line; the rest of stderr is left unread in `stderr`.
pub struct Started {
    pub child: Running,
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// The lines read so far.
    pub log: Vec<String>,
    /// The read end of stderr: drop it to close the pipe, keep it unread
    /// to let the pipe fill.
    pub stderr: Lines<BufReader<ChildStderr>>,
}

/// `tokenclock serve` in front of `upstream`, listening on `listen` and
/// `metrics_listen`, at `RUST_LOG=info` unless `env` says otherwise.
pub fn command(
    upstream: SocketAddr,
    listen: &str,
    metrics_listen: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Command {
    let mut command = Command::new(BIN);
    command
        .args([
            "serve",
            "--listen",
            listen,
            "--metrics-listen",
            metrics_listen,
        ])
        .arg("--upstream")
        .arg(format!("http://{upstream}"))
        .args(extra)
        .env("RUST_LOG", "info")
        .env_remove("TOKENCLOCK_CONFIG");
    for (k, v) in env {
        command.env(k, v);
    }
    command
}

/// Starts `tokenclock serve` in front of `upstream` on ports chosen by the
/// kernel, with `extra` arguments and environment, and reads its stderr
/// until it logs its listening addresses.
pub fn start(upstream: SocketAddr, extra: &[&str], env: &[(&str, &str)]) -> Started {
    launch(command(upstream, "127.0.0.1:0", "127.0.0.1:0", extra, env))
}

/// Spawns `command` (a `tokenclock serve` on ports chosen by the kernel)
/// with stderr a pipe, and reads it until the listening line.
pub fn launch(mut command: Command) -> Started {
    let mut child = command
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tokenclock");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = BufReader::new(stderr).lines();
    let mut log = Vec::new();
    let (addr, metrics_addr) = loop {
        let line = lines
            .next()
            .expect("tokenclock exited early")
            .expect("log line");
        log.push(line.clone());
        let found = (addr_of(&line, "listen"), addr_of(&line, "metrics_listen"));
        if let (Some(addr), Some(metrics_addr)) = found {
            break (addr, metrics_addr);
        }
    };
    Started {
        child: Running(child),
        addr,
        metrics_addr,
        log,
        stderr: lines,
    }
}

/// Starts `tokenclock serve --config FILE` with no other flags and no
/// `RUST_LOG` or `TOKENCLOCK_*` in its environment: every setting comes
/// from the file, which must listen on port 0.
pub fn serve_config(file: &std::path::Path) -> Served {
    serve_config_with(file, &[])
}

/// [`serve_config`] with `env` set.
pub fn serve_config_with(file: &std::path::Path, env: &[(&str, &str)]) -> Served {
    let mut command = Command::new(BIN);
    command.arg("serve").arg("--config").arg(file);
    command.env_remove("RUST_LOG");
    for (key, _) in std::env::vars().filter(|(k, _)| k.starts_with("TOKENCLOCK_")) {
        command.env_remove(key);
    }
    command.envs(env.iter().copied());
    launch(command).drain()
}

/// Starts `tokenclock serve` like [`start`] and keeps reading its log.
pub fn serve(upstream: SocketAddr, extra: &[&str], env: &[(&str, &str)]) -> Served {
    start(upstream, extra, env).drain()
}

impl Started {
    /// Keeps reading the log on a thread of its own.
    pub fn drain(self) -> Served {
        let log = Arc::new(Mutex::new(self.log));
        let sink = log.clone();
        let lines = self.stderr;
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                sink.lock().expect("log").push(line);
            }
        });
        Served {
            child: self.child,
            addr: self.addr,
            metrics_addr: self.metrics_addr,
            log,
        }
    }
}

/// The address in field `key` of a "Proxy listening." line, text
/// (`key=ADDR`) or JSON (`"key":"ADDR"`).
fn addr_of(line: &str, key: &str) -> Option<SocketAddr> {
    if !line.contains("Proxy listening.") {
        return None;
    }
    let rest = [format!(" {key}="), format!("\"{key}\":\"")]
        .iter()
        .find_map(|k| line.split_once(k.as_str()).map(|(_, rest)| rest))?;
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == ':'))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// Sends `signal` (e.g. `-TERM`) to process `pid`.
pub fn kill(signal: &str, pid: u32) {
    let status = Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

impl Served {
    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        self.signal("TERM");
    }

    /// Sends the signal `name` (`HUP`, `TERM`…).
    pub fn signal(&self, name: &str) {
        kill(&format!("-{name}"), self.child.id());
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

    /// Waits for the process to exit and returns its status and full log.
    pub async fn wait(mut self) -> (ExitStatus, Vec<String>) {
        let status = tokio::task::spawn_blocking(move || {
            let status = self.child.0.wait();
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

/// A child process that is killed when dropped, so a failed test leaves
/// no proxy running (one would hold the test's stdout open).
pub struct Running(pub Child);

impl Running {
    /// The process id.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Waits up to 30 s for the process to exit; fails the test (and the
    /// drop kills it) if it does not.
    pub async fn exit(&mut self) -> ExitStatus {
        for _ in 0..1500 {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("tokenclock did not exit within 30 s");
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The value of the sample `series` (name and labels, as exposed) in a
/// `/metrics` text, if present.
pub fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|value| value.trim().parse().ok())
}
