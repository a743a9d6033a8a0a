//! A real OTLP/HTTP receiver (tests/otel/receiver.py) that decodes every
//! export with the official proto definitions (PyPI `opentelemetry-proto`,
//! installed into `target/venv-otel` by tests/otel/venv.sh; the tests that
//! use it fail without it).

use std::{
    io::{BufRead, BufReader},
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use serde_json::Value;

use super::client;

/// The receiver, killed when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    child: Child,
}

impl Receiver {
    /// Starts tests/otel/receiver.py; `delay` makes every export wait.
    pub fn start(delay: Option<Duration>) -> Self {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let python = root.join("target/venv-otel/bin/python");
        assert!(
            python.exists(),
            "{} is missing: run tests/otel/venv.sh (tests/run.sh does)",
            python.display()
        );
        let mut command = Command::new(&python);
        command.arg(root.join("tests/otel/receiver.py"));
        if let Some(delay) = delay {
            command.args(["--delay", &delay.as_secs_f64().to_string()]);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the OTLP receiver");
        let stdout = child.stdout.take().expect("receiver stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the receiver's port");
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("the receiver did not start: {line:?}"));
        Self {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            child,
        }
    }

    pub async fn spans(&self) -> Vec<Value> {
        let errors = client::get(self.addr, "/errors").await.body();
        assert_eq!(errors, b"[]", "exports the receiver could not decode");
        let body = client::get(self.addr, "/spans").await.body();
        serde_json::from_slice(&body).expect("spans as JSON")
    }

    pub async fn raw(&self) -> Vec<u8> {
        client::get(self.addr, "/raw").await.body()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
