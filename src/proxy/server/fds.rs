//! File descriptors: the connection caps must fit in the process's limit
//! with room left for upstream connections and the metrics listener, or a
//! flood of client sockets would make `accept` and `connect` fail with
//! EMFILE everywhere, `/healthz` included.

use crate::config::Config;

/// Descriptors kept for everything but connections: stdio, the listeners,
/// the runtime's epoll and wake-up fds, the record log, DNS lookups.
pub(crate) const RESERVED: u64 = 64;

/// Why the configured caps do not fit.
#[derive(Debug, thiserror::Error)]
#[error(
    "{key}: {value} {what} need {needed} file descriptors \
     (2 per max_connections, one to the client and one to the upstream, plus pool_max_idle_per_host, \
     metrics_max_connections and {RESERVED} reserved) but the limit is {limit}; \
     raise it (LimitNOFILE=, ulimit -n) or lower {key}"
)]
pub struct TooFewDescriptors {
    /// The cap that takes the most descriptors: the one to lower.
    key: &'static str,
    value: usize,
    /// What `value` counts.
    what: &'static str,
    needed: u64,
    limit: u64,
}

/// The descriptors the configuration may hold open at once.
pub(crate) fn needed(config: &Config) -> u64 {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    count(config.connections.max)
        .saturating_mul(2)
        .saturating_add(count(config.pool.max_idle_per_host))
        .saturating_add(count(config.connections.metrics_max))
        .saturating_add(RESERVED)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit, then checks that
/// `config`'s caps fit under it. Returns the limit (`None`: unlimited).
pub(crate) fn reserve(config: &Config) -> Result<Option<u64>, TooFewDescriptors> {
    let limit = raise();
    let needed = needed(config);
    match limit {
        Some(limit) if limit < needed => {
            let (key, value, what) = largest(config);
            Err(TooFewDescriptors {
                key,
                value,
                what,
                needed,
                limit,
            })
        }
        _ => Ok(limit),
    }
}

/// The cap that takes the most descriptors, its value and what it counts:
/// `max_connections` unless another was set larger (a cap far past any
/// limit is a typo in that key, not in `max_connections`).
fn largest(config: &Config) -> (&'static str, usize, &'static str) {
    let caps = [
        (
            "max_connections",
            config.connections.max,
            config.connections.max.saturating_mul(2),
            "connections",
        ),
        (
            "pool_max_idle_per_host",
            config.pool.max_idle_per_host,
            config.pool.max_idle_per_host,
            "idle upstream connections",
        ),
        (
            "metrics_max_connections",
            config.connections.metrics_max,
            config.connections.metrics_max,
            "metrics connections",
        ),
    ];
    let mut largest = caps[0];
    for cap in caps {
        if cap.2 > largest.2 {
            largest = cap;
        }
    }
    (largest.0, largest.1, largest.3)
}

/// The soft limit, raised to the hard one when that is allowed.
fn raise() -> Option<u64> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    if current == maximum {
        return current;
    }
    // An unlimited hard limit cannot be the soft one on every system
    // (macOS caps it at OPEN_MAX); the soft limit then stays as it is.
    match setrlimit(
        Resource::Nofile,
        Rlimit {
            current: maximum,
            maximum,
        },
    ) {
        Ok(()) => maximum,
        Err(e) => {
            tracing::debug!(error = %e, "Cannot raise the file descriptor limit.");
            current
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{largest, needed, RESERVED};

    fn config(extra: &str) -> crate::config::Config {
        let text = format!("upstream = \"http://127.0.0.1:8000\"\n{extra}");
        crate::config::File::parse(&text, "t")
            .and_then(crate::config::File::validate)
            .expect("valid")
    }

    /// The line names the cap to lower: the one taking the most.
    #[test]
    fn the_cap_named_is_the_one_taking_the_most_descriptors() {
        assert_eq!(largest(&config("")).0, "max_connections");
        let pool = config("pool_max_idle_per_host = 18446744073709551615");
        assert_eq!(largest(&pool).0, "pool_max_idle_per_host");
        let metrics = config("max_connections = 100\nmetrics_max_connections = 300");
        assert_eq!(largest(&metrics).0, "metrics_max_connections");
        assert_eq!(
            largest(&config(
                "max_connections = 200\nmetrics_max_connections = 300"
            ))
            .0,
            "max_connections"
        );
    }

    #[test]
    fn the_defaults_need_two_descriptors_per_connection_and_headroom() {
        let config = crate::config::File::parse("upstream = \"http://127.0.0.1:8000\"", "t")
            .and_then(crate::config::File::validate)
            .expect("valid");
        assert_eq!(needed(&config), 2 * 4096 + 256 + 64 + RESERVED);
        // The shipped systemd unit's LimitNOFILE leaves room to raise max_connections.
        let unit = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/deploy/systemd/tokenclock.service"
        ));
        let limit: u64 = unit
            .lines()
            .find_map(|l| l.strip_prefix("LimitNOFILE="))
            .and_then(|v| v.trim().parse().ok())
            .expect("the unit sets LimitNOFILE");
        assert!(limit >= 4 * needed(&config), "{limit}");
    }
}
