use std::net::TcpListener;

use super::*;

fn limits(idle_ms: u64) -> Limits {
    Limits {
        max_message_bytes: 1000,
        max_repeat: 10,
        idle_timeout: Duration::from_millis(idle_ms),
        max_session: Duration::from_secs(30),
    }
}

/// A relay over a real loopback connection: the test's client end, the test's "TVM
/// loop" end, and the relay's ending.
fn relayed(limits: Limits) -> (TcpStream, UnixStream, std::thread::JoinHandle<Ending>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (accepted, _) = listener.accept().unwrap();
    let (server_end, loop_end) = UnixStream::pair().unwrap();
    let relay = std::thread::spawn(move || relay(accepted, server_end, &limits));
    client
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    loop_end
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    (client, loop_end, relay)
}

fn message(body: &[u8]) -> Vec<u8> {
    let mut bytes = (body.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(body);
    bytes
}

/// Reads one message and returns its body.
fn read_message(stream: &mut impl Read) -> Vec<u8> {
    let length = packet::read_header(stream).unwrap().unwrap();
    let mut body = vec![0u8; length as usize];
    stream.read_exact(&mut body).unwrap();
    body
}

#[test]
fn messages_pass_both_ways_and_the_client_s_end_ends_the_session() {
    let (mut client, mut tvm, relay) = relayed(limits(5000));
    client.write_all(&message(b"call")).unwrap();
    assert_eq!(read_message(&mut tvm), b"call");
    tvm.write_all(&message(b"answer")).unwrap();
    assert_eq!(read_message(&mut client), b"answer");
    drop(client);
    // TVM's loop sees the end of its input.
    assert_eq!(tvm.read(&mut [0u8; 1]).unwrap(), 0);
    drop(tvm);
    assert!(matches!(relay.join().unwrap(), Ending::ClientClosed));
}

#[test]
fn a_message_over_the_limit_is_refused_with_the_limit_named_and_not_passed_on() {
    let (mut client, mut tvm, relay) = relayed(limits(5000));
    client.write_all(&message(&[7u8; 1001])).unwrap();
    let answer = read_message(&mut client);
    assert_eq!(answer[..4], packet::EXCEPTION.to_le_bytes());
    let text = String::from_utf8_lossy(&answer[20..]).into_owned();
    assert!(
        text.contains("1001 bytes") && text.contains("--max-message-mib"),
        "{text}"
    );
    assert!(matches!(
        relay.join().unwrap(),
        Ending::MessageTooLarge(1001)
    ));
    assert_eq!(tvm.read(&mut [0u8; 64]).unwrap(), 0, "nothing reached TVM");
}

#[test]
fn a_silent_client_ends_the_session_but_a_client_waiting_for_an_answer_does_not() {
    let (mut client, mut tvm, relay) = relayed(limits(600));
    client.write_all(&message(b"slow call")).unwrap();
    assert_eq!(read_message(&mut tvm), b"slow call");
    // The call runs for three idle timeouts: the client waits, it is not idle.
    std::thread::sleep(Duration::from_millis(1800));
    tvm.write_all(&message(b"done")).unwrap();
    assert_eq!(read_message(&mut client), b"done");
    // Now the server waits for the client, which says nothing.
    let answer = read_message(&mut client);
    let text = String::from_utf8_lossy(&answer[20..]).into_owned();
    assert!(text.contains("--idle-timeout"), "{text}");
    assert!(matches!(relay.join().unwrap(), Ending::Idle));
}
