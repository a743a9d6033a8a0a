//! A real Prometheus server and `promtool` (Debian's `prometheus` package),
//! for the end-to-end tests. Without them the tests are skipped, unless
//! `TOKENCLOCK_E2E=1` (set by `tests/run.sh`), where their absence fails.

use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use super::client;

/// The path of `name` if installed; panics when absent under `TOKENCLOCK_E2E=1`.
pub fn binary(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var_os("TOKENCLOCK_E2E").is_none(),
            "{name} is required (apt-get install prometheus)"
        );
        eprintln!("skipped: {name} is not installed (apt-get install prometheus)");
    }
    found
}

/// A Prometheus server scraping targets every `interval`, killed on drop.
pub struct Prometheus {
    pub addr: SocketAddr,
    child: Child,
    dir: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus on a free loopback port, scraping `targets`.
    pub async fn start(binary: PathBuf, targets: &[SocketAddr], interval: Duration) -> Self {
        Self::start_with_rules(binary, targets, interval, &[]).await
    }

    /// Starts Prometheus on a free loopback port, scraping `targets` and
    /// evaluating the rule files `rules` every `interval`.
    pub async fn start_with_rules(
        binary: PathBuf,
        targets: &[SocketAddr],
        interval: Duration,
        rules: &[PathBuf],
    ) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "tokenclock-prometheus-{}-{}",
            std::process::id(),
            targets.first().map_or(0, |t| t.port())
        ));
        std::fs::create_dir_all(&dir).expect("prometheus dir");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let rules: Vec<String> = rules.iter().map(|r| format!("'{}'", r.display())).collect();
        let config = format!(
            "global:\n  scrape_interval: {}ms\n  evaluation_interval: {}ms\nrule_files: [{}]\nscrape_configs:\n  - job_name: tokenclock\n    static_configs:\n      - targets: [{}]\n",
            interval.as_millis(),
            interval.as_millis(),
            rules.join(", "),
            targets.join(", ")
        );
        std::fs::write(dir.join("prometheus.yml"), config).expect("prometheus.yml");
        let addr = free_port();
        let child = Command::new(binary)
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus");
        let server = Self { addr, child, dir };
        for _ in 0..300 {
            if let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
                    .await
            {
                if client::get(addr, "/-/ready").await.status == 200 {
                    return server;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("prometheus did not become ready");
    }

    /// The value of an instant query that returns one sample, evaluated
    /// now or at `at` (since the Unix epoch).
    pub async fn query(&self, expr: &str, at: Option<Duration>) -> Option<f64> {
        let mut path = format!("/api/v1/query?query={}", encode(expr));
        if let Some(at) = at {
            path.push_str(&format!("&time={:.3}", at.as_secs_f64()));
        }
        let response = client::get(self.addr, &path).await;
        let json: serde_json::Value = serde_json::from_slice(&response.body()).ok()?;
        let value = json["data"]["result"].get(0)?["value"].get(1)?.as_str()?;
        value.parse().ok()
    }

    /// The `data` of a GET on the HTTP API at `path_and_query` (e.g.
    /// `/api/v1/rules`), `Null` unless Prometheus answered `success`.
    pub async fn api(&self, path_and_query: &str) -> serde_json::Value {
        let response = client::get(self.addr, path_and_query).await;
        let json: serde_json::Value =
            serde_json::from_slice(&response.body()).unwrap_or(serde_json::Value::Null);
        if json["status"] == "success" {
            json["data"].clone()
        } else {
            serde_json::Value::Null
        }
    }

    /// Every sample of an instant query evaluated now: `(labels, value)`.
    pub async fn query_all(&self, expr: &str) -> Vec<(serde_json::Value, f64)> {
        let data = self
            .api(&format!("/api/v1/query?query={}", encode(expr)))
            .await;
        data["result"]
            .as_array()
            .map(|result| {
                result
                    .iter()
                    .filter_map(|sample| {
                        let value = sample["value"].get(1)?.as_str()?.parse().ok()?;
                        Some((sample["metric"].clone(), value))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr")
}

/// Percent-encodes a query parameter.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
