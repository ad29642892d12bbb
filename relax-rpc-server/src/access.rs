//! Who may start a session: the shared secret a client presents (`-token=SECRET` in the
//! options of its handshake key, compared in constant time) and the addresses it may
//! connect from (`--allow`).
//!
//! The token comes from `--token-file PATH` (its first line) or, without that flag, from
//! the environment variable `RELAX_RPC_TOKEN` (`env::TOKEN`), which `cargo relax bench --rpc` and
//! `cargo relax tune --rpc` also read to present it. It authenticates; it does not
//! encrypt: on a network others share, reach the server through an SSH tunnel.

use std::net::IpAddr;
use std::path::Path;

use crate::env;
use crate::error::{Error, Result};

/// A shared secret clients must present.
pub struct Token(Vec<u8>);

impl Token {
    /// The token of `--token-file` (when given) or of the variable's `variable` value
    /// (when set and not empty); `None` when neither is.
    pub fn load(file: Option<&Path>, variable: Option<String>) -> Result<Option<Token>> {
        let (text, origin) = match (file, variable) {
            (Some(file), _) => (
                std::fs::read_to_string(file).map_err(|source| Error::TokenFile {
                    path: file.to_path_buf(),
                    source,
                })?,
                format!("the token file {}", file.display()),
            ),
            (None, Some(value)) if !value.trim().is_empty() => {
                (value, format!("the environment variable {}", env::TOKEN))
            }
            (None, _) => return Ok(None),
        };
        let token = text.lines().next().unwrap_or("").trim();
        if token.is_empty() || token.contains(char::is_whitespace) {
            return Err(Error::NoToken { origin });
        }
        Ok(Some(Token(token.as_bytes().to_vec())))
    }

    /// Whether `presented` is the token; the time taken does not depend on where the two
    /// differ.
    pub fn accepts(&self, presented: Option<&str>) -> bool {
        let presented = presented.unwrap_or("").as_bytes();
        let mut difference = u8::from(presented.len() != self.0.len());
        for index in 0..self.0.len().max(presented.len()) {
            let expected = self.0.get(index).copied().unwrap_or(0);
            let given = presented.get(index).copied().unwrap_or(0xff);
            difference |= expected ^ given;
        }
        std::hint::black_box(difference) == 0
    }
}

/// The client addresses allowed to connect (`--allow`, repeated): addresses and
/// networks (`10.0.0.0/8`, `fd00::/8`). Empty: any address.
#[derive(Debug, Default)]
pub struct AllowList(Vec<(IpAddr, u8)>);

impl AllowList {
    /// Parses the `--allow` values.
    pub fn parse(values: &[String]) -> Result<AllowList> {
        values
            .iter()
            .map(|value| parse_network(value))
            .collect::<Result<_>>()
            .map(AllowList)
    }

    /// Whether a client at `address` may connect.
    pub fn allows(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.is_empty()
            || self
                .0
                .iter()
                .any(|(network, prefix)| in_network(address, *network, *prefix))
    }
}

fn parse_network(value: &str) -> Result<(IpAddr, u8)> {
    let invalid = |reason: String| Error::Allow {
        value: value.to_string(),
        reason,
    };
    let (address, prefix) = match value.split_once('/') {
        Some((address, prefix)) => (address, Some(prefix)),
        None => (value, None),
    };
    let address: IpAddr = address
        .trim()
        .parse()
        .map_err(|_| invalid(format!("`{address}` is not an IP address")))?;
    let address = address.to_canonical();
    let bits = if address.is_ipv4() { 32 } else { 128 };
    let prefix = match prefix {
        None => bits,
        Some(prefix) => prefix
            .trim()
            .parse::<u8>()
            .ok()
            .filter(|prefix| *prefix <= bits)
            .ok_or_else(|| invalid(format!("the prefix length must be 0 to {bits}")))?,
    };
    Ok((address, prefix))
}

fn in_network(address: IpAddr, network: IpAddr, prefix: u8) -> bool {
    let (address, network, bits) = match (address, network) {
        (IpAddr::V4(address), IpAddr::V4(network)) => (
            u128::from(u32::from(address)),
            u128::from(u32::from(network)),
            32,
        ),
        (IpAddr::V6(address), IpAddr::V6(network)) => {
            (u128::from(address), u128::from(network), 128)
        }
        _ => return false,
    };
    let shift = bits - u32::from(prefix);
    shift >= bits || (address >> shift) == (network >> shift)
}

#[cfg(test)]
mod tests;
