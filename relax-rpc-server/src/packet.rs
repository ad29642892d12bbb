//! TVM's RPC session framing, as far as the relay needs it (TVM's
//! `src/runtime/rpc/rpc_endpoint.cc` and `minrpc/rpc_reference.h`): after the handshake
//! every message, either way, is a little-endian u64 byte count and that many bytes,
//! which begin with an `RPCCode` (i32). An exception answer is
//! `[count][kException][1 argument][kTVMFFIRawStr][u64 length][the text]`; the client
//! raises it as `RPCError: Error caught from RPC call: <text>`.

use std::io::{self, Read};

/// `RPCCode::kException`.
pub const EXCEPTION: i32 = 5;
/// tvm-ffi's `kTVMFFIRawStr` type index (a raw string argument).
pub const RAW_STRING: i32 = 8;
/// The bytes of a message's byte count.
pub const HEADER_BYTES: usize = 8;

/// The byte count of a message, from its header.
pub fn message_length(header: [u8; HEADER_BYTES]) -> u64 {
    u64::from_le_bytes(header)
}

/// Reads a message's header; `None` at the end of the stream before any byte of it.
pub fn read_header(stream: &mut impl Read) -> io::Result<Option<u64>> {
    let mut header = [0u8; HEADER_BYTES];
    let mut filled = 0;
    while filled < HEADER_BYTES {
        match stream.read(&mut header[filled..]) {
            Ok(0) if filled == 0 => return Ok(None),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(read) => filled += read,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => return Err(error),
        }
    }
    Ok(Some(message_length(header)))
}

/// An exception message carrying `text`, header included, as TVM's server sends it.
pub fn exception(text: &str) -> Vec<u8> {
    let body_length = 4 + 4 + 4 + 8 + text.len();
    let mut bytes = Vec::with_capacity(HEADER_BYTES + body_length);
    bytes.extend((body_length as u64).to_le_bytes());
    bytes.extend(EXCEPTION.to_le_bytes());
    bytes.extend(1i32.to_le_bytes());
    bytes.extend(RAW_STRING.to_le_bytes());
    bytes.extend((text.len() as u64).to_le_bytes());
    bytes.extend(text.as_bytes());
    bytes
}

#[cfg(test)]
mod tests;
