//! The environment variables relax-rpc-server reads, by name, and the one function
//! that reads them (relax-build's `docs/environment.md` documents each).

/// The shared secret clients must present (see `access.rs`); `cargo relax bench --rpc`
/// and `cargo relax tune --rpc` read it too, to present it.
pub const TOKEN: &str = "RELAX_RPC_TOKEN";

/// The value of the variable `name`, when it is set.
pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}
