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

/// Reads the hello in `input` and answers it as the server does: accepted when it asks
/// for `matchkey`.
fn answer(
    input: Vec<u8>,
    matchkey: &str,
    server_key: &str,
) -> io::Result<(Option<Hello>, Vec<u8>)> {
    let mut stream = exchange(input);
    let hello = read_hello(&mut stream)?;
    match &hello {
        Some(hello) if hello.matches(matchkey) => accept(&mut stream, server_key)?,
        Some(_) => refuse(&mut stream)?,
        None => {}
    }
    Ok((hello, stream.output))
}

#[test]
fn a_client_with_the_matchkey_is_answered_with_the_server_key() {
    let (hello, output) = answer(
        client_hello("client:board:7.1 -timeout=10 -token=abc"),
        "board:7.1",
        "board",
    )
    .unwrap();
    assert_eq!(
        hello.unwrap(),
        Hello {
            key: "client:board:7.1".to_string(),
            token: Some("abc".to_string()),
            timeout: Some(10),
        }
    );
    let mut expected = RPC_MAGIC.to_le_bytes().to_vec();
    expected.extend(12i32.to_le_bytes());
    expected.extend(b"server:board");
    assert_eq!(output, expected);
}

#[test]
fn a_client_with_another_key_is_told_of_the_mismatch() {
    let (hello, output) = answer(client_hello("client:other:1"), "board:7.1", "board").unwrap();
    assert_eq!(hello.unwrap().key, "client:other:1");
    assert_eq!(output, RPC_MISMATCH.to_le_bytes());
}

#[test]
fn a_direct_client_without_a_key_matches_an_empty_key() {
    let (hello, _) = answer(client_hello("client:"), "", "").unwrap();
    assert!(hello.unwrap().matches(""));
}

#[test]
fn options_are_read_whatever_their_order_and_malformed_ones_are_ignored() {
    let hello = Hello::parse("client:k -token=t -timeout=600.0");
    assert_eq!(
        (hello.token.as_deref(), hello.timeout),
        (Some("t"), Some(600))
    );
    let hello = Hello::parse("client:k -timeout=soon -other=1");
    assert_eq!((hello.token, hello.timeout), (None, None));
    assert_eq!(Hello::parse("").key, "");
}

#[test]
fn other_protocols_and_oversized_keys_are_not_served() {
    let (hello, output) = answer(b"GET / HTTP/1.1\r\n\r\n".to_vec(), "", "").unwrap();
    assert!(hello.is_none() && output.is_empty());
    let mut huge = RPC_MAGIC.to_le_bytes().to_vec();
    huge.extend(i32::MAX.to_le_bytes());
    assert!(answer(huge, "", "").is_err());
    let mut negative = RPC_MAGIC.to_le_bytes().to_vec();
    negative.extend((-4i32).to_le_bytes());
    assert!(answer(negative, "", "").is_err());
}

#[test]
fn a_truncated_handshake_is_an_error_not_a_hang() {
    let mut bytes = client_hello("client:board");
    bytes.truncate(bytes.len() - 3);
    assert!(answer(bytes, "board", "board").is_err());
}
