//! What the floor programs share: `tokenclock serve`'s command line, so
//! that `overhead.sh` starts them as it starts tokenclock (`PROXY_BIN`), and
//! the runtime and listener they serve on.
//!
//! The command line is `serve --upstream http://HOST:PORT --listen ADDR`;
//! any other flag and its value are ignored (`--metrics-listen`,
//! `--worker-threads`, ...).

use std::future::Future;
use std::process::ExitCode;

use tokio::net::{TcpListener, TcpStream};

/// Serves each accepted connection with `connection(client, upstream)` on
/// one current-thread runtime with I/O only (no timers), the upstream being
/// `HOST:PORT`, and prints `Proxy listening.` once it listens, as tokenclock
/// does. A bad command line exits 2.
pub fn serve<F, Fut>(connection: F) -> ExitCode
where
    F: Fn(TcpStream, String) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let (listen, upstream) = match args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("runtime: {err}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match TcpListener::bind(&listen).await {
            Ok(listener) => listener,
            Err(err) => {
                eprintln!("listen on {listen}: {err}");
                return ExitCode::FAILURE;
            }
        };
        println!("Proxy listening.");
        loop {
            let Ok((client, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(connection(client, upstream.clone()));
        }
    })
}

/// `--listen` and the upstream's `HOST:PORT`, or what is wrong.
fn args() -> Result<(String, String), String> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        argv.windows(2)
            .find(|pair| pair[0] == flag)
            .map(|pair| pair[1].clone())
    };
    let (Some(listen), Some(upstream)) = (value("--listen"), value("--upstream")) else {
        return Err("usage: serve --upstream http://HOST:PORT --listen ADDR".to_owned());
    };
    let Some(authority) = upstream.strip_prefix("http://") else {
        return Err(format!("--upstream: an http:// URL, got {upstream}"));
    };
    Ok((listen, authority.trim_end_matches('/').to_owned()))
}
