use std::io::Cursor;

use super::*;

/// The bytes a TVM client sends to connect with `key`.
fn client_hello(key: &str) -> Vec<u8> {
    let mut bytes = RPC_MAGIC.to_le_bytes().to_vec();
    bytes.extend((key.len() as i32).to_le_bytes());
    bytes.extend(key.as_bytes());
    bytes
}

/// A stream that reads `input` and records what is written.
struct Exchange {
    input: Cursor<Vec<u8>>,
    output: Vec<u8>,
}

impl Read for Exchange {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.input.read(buffer)
    }
}

impl Write for Exchange {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.output.extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn exchange(input: Vec<u8>) -> Exchange {
    Exchange {
        input: Cursor::new(input),
        output: Vec::new(),
    }
}

#[test]
fn a_client_with_the_matchkey_is_answered_with_the_server_key() {
    let mut stream = exchange(client_hello("client:board:7.1 -timeout=10"));
    assert_eq!(
        answer_client(&mut stream, "board:7.1", "board").unwrap(),
        Client::Accepted
    );
    let mut expected = RPC_MAGIC.to_le_bytes().to_vec();
    expected.extend(12i32.to_le_bytes());
    expected.extend(b"server:board");
    assert_eq!(stream.output, expected);
}

#[test]
fn a_client_with_another_key_is_told_of_the_mismatch() {
    let mut stream = exchange(client_hello("client:other:1"));
    assert_eq!(
        answer_client(&mut stream, "board:7.1", "board").unwrap(),
        Client::WrongKey("client:other:1".to_string())
    );
    assert_eq!(stream.output, RPC_MISMATCH.to_le_bytes());
}

#[test]
fn a_direct_client_without_a_key_matches_an_empty_key() {
    let mut stream = exchange(client_hello("client:"));
    assert_eq!(
        answer_client(&mut stream, "", "").unwrap(),
        Client::Accepted
    );
}

#[test]
fn other_protocols_and_oversized_keys_are_not_served() {
    let mut http = exchange(b"GET / HTTP/1.1\r\n\r\n".to_vec());
    assert_eq!(answer_client(&mut http, "", "").unwrap(), Client::NotRpc);
    assert!(http.output.is_empty());
    let mut huge = RPC_MAGIC.to_le_bytes().to_vec();
    huge.extend(i32::MAX.to_le_bytes());
    assert!(answer_client(&mut exchange(huge), "", "").is_err());
    let mut negative = RPC_MAGIC.to_le_bytes().to_vec();
    negative.extend((-4i32).to_le_bytes());
    assert!(answer_client(&mut exchange(negative), "", "").is_err());
}

#[test]
fn a_truncated_handshake_is_an_error_not_a_hang() {
    let mut bytes = client_hello("client:board");
    bytes.truncate(bytes.len() - 3);
    assert!(answer_client(&mut exchange(bytes), "board", "board").is_err());
}
