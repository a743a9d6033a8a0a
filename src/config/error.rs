//! Configuration errors, each one line naming its key, and the flag and
//! environment values that override the file.

use std::fmt;

/// A configuration problem, displayed as one line naming the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        /// The file.
        path: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// What the parser said.
        message: String,
    },
    /// A key has a bad value, or is unknown.
    #[error("{key}: {message}{origin}")]
    Invalid {
        /// The key, as written in the file (`connect_timeout`).
        key: String,
        /// What is wrong with it.
        message: String,
        /// Where the value came from (` (from TOKENCLOCK_LISTEN)`), or empty.
        origin: Origin,
    },
}

impl ConfigError {
    pub(super) fn invalid(key: &str, message: impl fmt::Display) -> Self {
        Self::Invalid {
            key: key.to_owned(),
            message: message.to_string(),
            origin: Origin::File,
        }
    }
}

/// Where a setting came from, for error messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The config file or the default.
    File,
    /// A command-line flag.
    Flag(&'static str),
    /// An environment variable.
    Env(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File => Ok(()),
            Self::Flag(flag) => write!(f, " (from {flag})"),
            Self::Env(var) => write!(f, " (from {var})"),
        }
    }
}

/// A value given on the command line or in the environment, which wins
/// over the file.
#[derive(Clone, Debug)]
pub struct Override {
    /// The raw text.
    pub value: String,
    /// Where it came from.
    pub origin: Origin,
}

/// Settings that may come from flags or environment variables.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// `--listen` / `TOKENCLOCK_LISTEN`.
    pub listen: Option<Override>,
    /// `--upstream` / `TOKENCLOCK_UPSTREAM`.
    pub upstream: Option<Override>,
    /// `--metrics-listen` / `TOKENCLOCK_METRICS_LISTEN`.
    pub metrics_listen: Option<Override>,
    /// `--log-format`.
    pub log_format: Option<Override>,
    /// `--worker-threads`.
    pub worker_threads: Option<Override>,
}
