//! The one error type of relax-rpc-server: why the server (or a session's process)
//! could not start. Every message names what failed and the fix. What happens to a
//! client once the server runs (a refusal, a limit, a crash) is logged and told to the
//! client instead, and the server goes on.

use std::io;
use std::path::PathBuf;

use crate::env;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `--key` has a character TVM's tracker splits keys on.
    #[error("--key `{key}` may not contain `:` or spaces (TVM's tracker splits keys on them)")]
    InvalidKey { key: String },

    /// `--tracker` without `--key`.
    #[error("--tracker needs --key: the name clients ask the tracker for")]
    TrackerNeedsKey,

    /// A count that must be positive is 0.
    #[error("{flag} must be at least 1")]
    NotPositive { flag: &'static str },

    /// The token file could not be read.
    #[error("reading the token file {} (--token-file): {source}", path.display())]
    TokenFile { path: PathBuf, source: io::Error },

    /// The token file or variable holds no usable token.
    #[error(
        "{origin} holds no token: its first line must be the secret, without spaces \
         (make one with `head -c 24 /dev/urandom | base64 > FILE`; clients set {} to it)",
        env::TOKEN
    )]
    NoToken { origin: String },

    /// An `--allow` value is not an address or a network.
    #[error(
        "--allow `{value}`: {reason}; expected an address or a network, e.g. --allow 192.168.1.20 \
         or --allow 10.0.0.0/8"
    )]
    Allow { value: String, reason: String },

    /// TVM's runtime could not be loaded, or the server's functions registered in it.
    #[error("loading TVM's runtime: {source}")]
    Runtime { source: relax_runtime::Error },

    /// This program's own path, needed to run each session in a process of its own.
    #[error("finding this program's path, to run each session in a process of its own: {source}")]
    Executable { source: io::Error },

    /// The port is taken.
    #[error("port {port} on {host} is in use (another server?): choose another with --port")]
    PortInUse { host: String, port: u16 },

    /// Listening failed otherwise.
    #[error("listening on {host}:{port}: {source} (check --host)")]
    Listen {
        host: String,
        port: u16,
        source: io::Error,
    },

    /// The tracker could not be reached at start.
    #[error(
        "cannot reach the tracker at {address}: {source} (start one with `cargo relax tracker`)"
    )]
    Tracker { address: String, source: io::Error },

    /// A session's process could not set itself up (its lock, its socket pair).
    #[error("{what}: {source}")]
    Session {
        what: &'static str,
        source: io::Error,
    },

    /// The internal flags of a session's process are incomplete.
    #[error("--serve-session-fd is internal to relax-rpc-server: it needs --session-folder and --session-lock")]
    SessionFlags,
}

pub type Result<T> = std::result::Result<T, Error>;
