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
    "max_connections: {max_connections} connections need {needed} file descriptors \
     (2 per connection, one to the client and one to the upstream, plus pool_max_idle_per_host, \
     metrics_max_connections and {RESERVED} reserved) but the limit is {limit}; \
     raise it (LimitNOFILE=, ulimit -n) or lower max_connections"
)]
pub struct TooFewDescriptors {
    max_connections: usize,
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
        Some(limit) if limit < needed => Err(TooFewDescriptors {
            max_connections: config.connections.max,
            needed,
            limit,
        }),
        _ => Ok(limit),
    }
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
    use super::{needed, RESERVED};

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
