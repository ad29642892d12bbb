//! The two handshakes of TVM's RPC stack a device server speaks itself (the session
//! that follows is TVM's runtime's, see `relax_runtime::rpc`):
//!
//! - a client's: it sends `RPC_MAGIC`, then its key (`client:<matchkey>`, options after
//!   a space: `-timeout=SECONDS`, and `-token=SECRET` for relax-rpc-server); the server
//!   answers `RPC_MAGIC` and its own key (`server:<key>`), or `RPC_MISMATCH` for a wrong
//!   key or token;
//! - the tracker's: the server sends `TRACKER_MAGIC` (echoed back), then JSON messages,
//!   each framed by its length: `[UPDATE_INFO, {"key": "server:<key>", "addr": [host, port]}]`
//!   once, `[PUT, key, [port, matchkey], host]` to offer itself to the next client asking
//!   for `key` (the tracker hands that client the address and matchkey), and
//!   `[GET_PENDING_MATCHKEYS]` to learn whether a client took the offer.
//!
//! Integers are 32-bit little-endian, as in TVM's `tvm/rpc/base.py`.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

pub const RPC_MAGIC: i32 = 0xFF271;
pub const RPC_MISMATCH: i32 = 0xFF273;
pub const TRACKER_MAGIC: i32 = 0x2F271;

const PUT: i32 = 3;
const UPDATE_INFO: i32 = 5;
const GET_PENDING_MATCHKEYS: i32 = 7;

/// A key, or a tracker message, longer than this is refused (the tracker's own bound).
const MAX_MESSAGE: usize = 1 << 20;

pub fn read_i32(stream: &mut impl Read) -> io::Result<i32> {
    let mut bytes = [0u8; 4];
    stream.read_exact(&mut bytes)?;
    Ok(i32::from_le_bytes(bytes))
}

pub fn write_i32(stream: &mut impl Write, value: i32) -> io::Result<()> {
    stream.write_all(&value.to_le_bytes())
}

/// Reads a length-prefixed byte string (a key, a tracker message).
fn read_framed(stream: &mut impl Read) -> io::Result<Vec<u8>> {
    let length = read_i32(stream)?;
    let length = usize::try_from(length)
        .ok()
        .filter(|&length| length <= MAX_MESSAGE)
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a message of {length} bytes"),
            )
        })?;
    let mut bytes = vec![0u8; length];
    stream.read_exact(&mut bytes)?;
    Ok(bytes)
}

fn write_framed(stream: &mut impl Write, bytes: &[u8]) -> io::Result<()> {
    let length = i32::try_from(bytes.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "message too long"))?;
    write_i32(stream, length)?;
    stream.write_all(bytes)
}

/// A client's handshake: the first word of its key and the options after it.
#[derive(Debug, PartialEq, Eq)]
pub struct Hello {
    /// `client:<matchkey>`.
    pub key: String,
    /// `-token=SECRET`, the shared secret it presents (see `access.rs`).
    pub token: Option<String>,
    /// `-timeout=SECONDS`, how long it wants the session to last at most.
    pub timeout: Option<u64>,
}

impl Hello {
    /// Parses a client's key: `client:<matchkey>`, then options such as `-timeout=10`.
    pub fn parse(key: &str) -> Hello {
        let mut words = key.split_whitespace();
        let first = words.next().unwrap_or("").to_string();
        let mut hello = Hello {
            key: first,
            token: None,
            timeout: None,
        };
        for option in words {
            if let Some(token) = option.strip_prefix("-token=") {
                hello.token = Some(token.to_string());
            } else if let Some(seconds) = option.strip_prefix("-timeout=") {
                // TVM's Python client writes a float (`-timeout=600.0`) as often as an int.
                hello.timeout = seconds
                    .parse::<f64>()
                    .ok()
                    .filter(|seconds| seconds.is_finite() && *seconds > 0.0)
                    .map(|seconds| seconds.ceil() as u64);
            }
        }
        hello
    }

    /// Whether the client asked for `matchkey`.
    pub fn matches(&self, matchkey: &str) -> bool {
        self.key == format!("client:{matchkey}")
    }
}

/// Reads a client's handshake on `stream`; `None` when it is not TVM's RPC protocol.
pub fn read_hello(stream: &mut impl Read) -> io::Result<Option<Hello>> {
    if read_i32(stream)? != RPC_MAGIC {
        return Ok(None);
    }
    let key = String::from_utf8_lossy(&read_framed(stream)?).into_owned();
    Ok(Some(Hello::parse(&key)))
}

/// Accepts a client: `RPC_MAGIC` and the server's key (`server:<key>`).
pub fn accept(stream: &mut impl Write, server_key: &str) -> io::Result<()> {
    write_i32(stream, RPC_MAGIC)?;
    write_framed(stream, format!("server:{server_key}").as_bytes())
}

/// Refuses a client: `RPC_MISMATCH` (TVM's client reports that no server matches its key).
pub fn refuse(stream: &mut impl Write) -> io::Result<()> {
    write_i32(stream, RPC_MISMATCH)
}

/// A device's registration with a tracker, over one connection.
pub struct Tracker {
    stream: TcpStream,
    key: String,
    port: u16,
    /// The address clients are sent to (None: the one the tracker sees).
    custom_host: Option<String>,
    matchkey: String,
    offers: u64,
}

impl Tracker {
    /// Connects to the tracker at `address` and registers a device of key `key`
    /// listening on `port`.
    pub fn connect(
        address: &str,
        key: &str,
        port: u16,
        custom_host: Option<&str>,
    ) -> io::Result<Tracker> {
        let mut stream = connect_with_timeout(address, Duration::from_secs(10))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        write_i32(&mut stream, TRACKER_MAGIC)?;
        let echo = read_i32(&mut stream)?;
        if echo != TRACKER_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{address} answered {echo:#x}, not TVM's tracker magic: is it a tracker?"),
            ));
        }
        let mut tracker = Tracker {
            stream,
            key: key.to_string(),
            port,
            custom_host: custom_host.map(str::to_string),
            matchkey: String::new(),
            offers: 0,
        };
        let info = json!([UPDATE_INFO, {"key": format!("server:{key}"), "addr": [tracker.custom_host, port]}]);
        tracker.expect_success(&info)?;
        Ok(tracker)
    }

    /// Makes the matchkey of the next offer ([`Tracker::offer`] sends it): the server
    /// expects it before the tracker can hand it to a client, who sends
    /// `client:<matchkey>`.
    pub fn next_matchkey(&mut self) -> &str {
        self.offers += 1;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default();
        self.matchkey = format!(
            "{}:{}.{nanos}.{}",
            self.key,
            std::process::id(),
            self.offers
        );
        &self.matchkey
    }

    /// Offers this device to the next client asking for its key, under the matchkey
    /// [`Tracker::next_matchkey`] made.
    pub fn offer(&mut self) -> io::Result<()> {
        let put = json!([PUT, self.key, [self.port, self.matchkey], self.custom_host]);
        self.expect_success(&put)
    }

    /// Whether the current offer is still waiting for a client (false: a client took it,
    /// and should connect soon).
    pub fn offer_pending(&mut self) -> io::Result<bool> {
        match self.exchange(&json!([GET_PENDING_MATCHKEYS]))? {
            Value::Array(keys) => Ok(keys.iter().any(|key| key.as_str() == Some(&self.matchkey))),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the tracker answered {other} to GET_PENDING_MATCHKEYS"),
            )),
        }
    }

    fn exchange(&mut self, message: &Value) -> io::Result<Value> {
        write_framed(&mut self.stream, message.to_string().as_bytes())?;
        let reply = read_framed(&mut self.stream)?;
        serde_json::from_slice(&reply)
            .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
    }

    fn expect_success(&mut self, message: &Value) -> io::Result<()> {
        match self.exchange(message)? {
            Value::Number(code) if code.as_i64() == Some(0) => Ok(()),
            other => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the tracker refused {message}: it answered {other}"),
            )),
        }
    }
}

/// Connects to `address` (HOST:PORT), trying each address it resolves to.
pub fn connect_with_timeout(address: &str, timeout: Duration) -> io::Result<TcpStream> {
    use std::net::ToSocketAddrs;
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        format!("{address} resolves to no address"),
    );
    for resolved in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&resolved, timeout) {
            Ok(stream) => return Ok(stream),
            Err(error) => last = error,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests;
