//! The bounds every session is served within, the flags that set them, and the child
//! process's copy of them (passed on its command line).

use std::time::Duration;

/// A message from a client (an upload, a call's arguments, a tensor copied to the
/// device) larger than this is refused, in MiB (`--max-message-mib`).
pub const DEFAULT_MAX_MESSAGE_MIB: u64 = 1024;
/// `repeat` or `warmup` of `relax_rpc.time_model` above this is refused (`--max-repeat`).
pub const DEFAULT_MAX_REPEAT: usize = 10_000;
/// A session whose client sends nothing for this long while the server waits for it
/// ends, in seconds (`--idle-timeout`).
pub const DEFAULT_IDLE_SECONDS: u64 = 60;
/// A session ends after this long whatever it does, in seconds (`--max-session`).
pub const DEFAULT_MAX_SESSION_SECONDS: u64 = 3600;
/// A client must finish its handshake within this long, in seconds (`--handshake-timeout`).
pub const DEFAULT_HANDSHAKE_SECONDS: u64 = 10;
/// Sessions served at once (`--max-sessions`); a client beyond it is told the server is busy.
pub const DEFAULT_MAX_SESSIONS: usize = 2;
/// Connections whose handshake is still under way at once; more are closed at once.
pub const MAX_PENDING_HANDSHAKES: usize = 16;

const MIB: u64 = 1 << 20;

/// What a session may do, and for how long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The largest message a client may send, in bytes.
    pub max_message_bytes: u64,
    /// The largest `repeat` (and `warmup`) of `relax_rpc.time_model`.
    pub max_repeat: usize,
    /// How long a client that the server waits for may stay silent.
    pub idle_timeout: Duration,
    /// How long a session may last (the server's bound, or the client's `-timeout=`
    /// when shorter).
    pub max_session: Duration,
}

impl Limits {
    /// The same limits with the session's length bounded by the client's own
    /// `-timeout=SECONDS` too (TVM's clients send it; its Python server honours it).
    pub fn with_client_timeout(&self, seconds: Option<u64>) -> Limits {
        let mut limits = self.clone();
        if let Some(seconds) = seconds.filter(|seconds| *seconds > 0) {
            limits.max_session = limits.max_session.min(Duration::from_secs(seconds));
        }
        limits
    }

    /// The flags that give a child process these limits.
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--max-message-bytes".to_string(),
            self.max_message_bytes.to_string(),
            "--max-repeat".to_string(),
            self.max_repeat.to_string(),
            "--idle-timeout".to_string(),
            self.idle_timeout.as_secs().to_string(),
            "--max-session".to_string(),
            self.max_session.as_secs().to_string(),
        ]
    }

    /// The message a client gets for a message of `bytes` bytes over the limit.
    pub fn message_too_large(&self, bytes: u64) -> String {
        format!(
            "relax-rpc-server refused a message of {bytes} bytes (an upload, a call's arguments or a \
             tensor copy): the limit is {} bytes ({} MiB); start the server with a larger \
             --max-message-mib to allow it. The session has ended.",
            self.max_message_bytes,
            self.max_message_bytes / MIB
        )
    }

    /// The message a client gets when it was silent for `--idle-timeout`.
    pub fn idle_message(&self) -> String {
        format!(
            "relax-rpc-server ended the session: the client sent nothing for {} s while the \
             server waited for it (--idle-timeout SECONDS on the server raises it)",
            self.idle_timeout.as_secs()
        )
    }

    /// The message a client gets when its session outlived `--max-session`.
    pub fn too_long_message(&self) -> String {
        format!(
            "relax-rpc-server ended the session after {} s, its longest (--max-session SECONDS \
             on the server, or the client's session timeout, raises it)",
            self.max_session.as_secs()
        )
    }
}

/// Converts `--max-message-mib` to bytes.
pub fn mib_to_bytes(mib: u64) -> u64 {
    mib.saturating_mul(MIB)
}

#[cfg(test)]
mod tests;
