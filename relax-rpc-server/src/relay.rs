//! The relay between a client and TVM's `rpc.ServerLoop`, in the session's child process.
//!
//! TVM's server loop gets one end of a socket pair; the relay copies the client's bytes
//! to it and its answers back, message by message (see `packet.rs`), and enforces the
//! session's limits on the way, which TVM's loop has none of:
//!
//! - a message over `--max-message-mib` is never passed on: the client is answered with
//!   an exception naming the limit (TVM's client raises it as an `RPCError`), the rest
//!   of the message is read and dropped so that the client reads the answer, and the
//!   session ends;
//! - a client that sends nothing for `--idle-timeout` while the server waits for it (not
//!   while its call runs) ends the session, with an exception saying so;
//! - so does a session older than `--max-session`.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::limits::Limits;
use crate::packet::{self, HEADER_BYTES};

/// At most this much of a refused message is read and dropped after the refusal; a
/// larger rest is cut off (the client may then miss the answer).
const MAX_DRAINED: u64 = 256 << 20;

/// How often the relay looks at its clocks while the client is silent.
const TICK: Duration = Duration::from_millis(200);

/// How a relayed session ended.
#[derive(Debug)]
pub enum Ending {
    /// The client closed the connection.
    ClientClosed,
    /// TVM's server loop ended the session (the client asked it to), or the client
    /// stopped reading.
    ServerClosed,
    /// The client sent a message of this many bytes, over the limit.
    MessageTooLarge(u64),
    /// The client was silent for the idle timeout while the server waited for it.
    Idle,
    /// The session lasted its longest.
    TooLong,
    /// Reading from the client failed.
    Failed(io::Error),
}

impl Ending {
    /// The exception the client is sent when the session ended by a limit.
    pub fn limit_message(&self, limits: &Limits) -> Option<String> {
        match self {
            Ending::MessageTooLarge(bytes) => Some(limits.message_too_large(*bytes)),
            Ending::Idle => Some(limits.idle_message()),
            Ending::TooLong => Some(limits.too_long_message()),
            Ending::ClientClosed | Ending::ServerClosed | Ending::Failed(_) => None,
        }
    }
}

/// What the two directions share.
#[derive(Default)]
struct Shared {
    /// The last whole message was the client's: it waits for the server's answer, so
    /// its silence is not idleness.
    client_waits: AtomicBool,
    /// The server's side ended.
    server_done: AtomicBool,
}

/// Relays between `client` and `server` (TVM's loop) within `limits`, until either
/// side ends the session or a limit does. Both connections are shut down when it returns.
pub fn relay(client: TcpStream, server: UnixStream, limits: &Limits) -> Ending {
    let started = Instant::now();
    let shared = Arc::new(Shared::default());
    let clones = client.try_clone().and_then(|writer| {
        writer.set_write_timeout(Some(limits.idle_timeout.max(TICK)))?;
        Ok((writer, server.try_clone()?))
    });
    let (writer, server_reader) = match clones {
        Ok(clones) => clones,
        Err(error) => return Ending::Failed(error),
    };
    let writer = Arc::new(Mutex::new(writer));
    let (pump_done, pump_ended) = mpsc::channel();
    {
        let (writer, shared) = (Arc::clone(&writer), Arc::clone(&shared));
        std::thread::spawn(move || {
            server_to_client(server_reader, &writer, &shared);
            let _ = pump_done.send(());
        });
    }
    let ending = client_to_server(&client, &server, limits, started, &shared);
    if let Some(message) = ending.limit_message(limits) {
        send_exception(&writer, &message);
        if let Ending::MessageTooLarge(bytes) = ending {
            drain(&client, bytes, limits);
        }
        let _ = server.shutdown(Shutdown::Both);
    } else {
        // TVM's loop sees the end of its input, finishes what it was sending and returns.
        let _ = server.shutdown(Shutdown::Write);
        let _ = pump_ended.recv_timeout(Duration::from_secs(5));
    }
    let _ = client.shutdown(Shutdown::Both);
    ending
}

fn client_to_server(
    client: &TcpStream,
    mut server: &UnixStream,
    limits: &Limits,
    started: Instant,
    shared: &Shared,
) -> Ending {
    if let Err(error) = client.set_read_timeout(Some(TICK)) {
        return Ending::Failed(error);
    }
    let mut buffer = vec![0u8; 64 << 10];
    let mut header = [0u8; HEADER_BYTES];
    let mut header_filled = 0;
    let mut body_left = 0u64;
    let mut last_byte = Instant::now();
    loop {
        let read = if body_left > 0 {
            let wanted = buffer
                .len()
                .min(usize::try_from(body_left).unwrap_or(usize::MAX));
            (&*client).read(&mut buffer[..wanted])
        } else {
            (&*client).read(&mut header[header_filled..])
        };
        match read {
            Ok(0) => return Ending::ClientClosed,
            Ok(count) => {
                last_byte = Instant::now();
                let forwarded = if body_left > 0 {
                    body_left -= count as u64;
                    // Marked before the last bytes go: the answer may come at once.
                    if body_left == 0 {
                        shared.client_waits.store(true, Ordering::SeqCst);
                    }
                    server.write_all(&buffer[..count])
                } else {
                    header_filled += count;
                    if header_filled < HEADER_BYTES {
                        Ok(())
                    } else {
                        header_filled = 0;
                        let length = packet::message_length(header);
                        if length > limits.max_message_bytes {
                            return Ending::MessageTooLarge(length);
                        }
                        body_left = length;
                        // (TVM's loop skips an empty message, and answers nothing.)
                        shared.client_waits.store(false, Ordering::SeqCst);
                        server.write_all(&header)
                    }
                };
                if forwarded.is_err() {
                    return Ending::ServerClosed;
                }
            }
            Err(error) if is_timeout(&error) => {}
            Err(error) => return Ending::Failed(error),
        }
        if shared.server_done.load(Ordering::SeqCst) {
            return Ending::ServerClosed;
        }
        if started.elapsed() >= limits.max_session {
            return Ending::TooLong;
        }
        let between_messages = header_filled == 0 && body_left == 0;
        let answer_pending = between_messages && shared.client_waits.load(Ordering::SeqCst);
        if !answer_pending && last_byte.elapsed() >= limits.idle_timeout {
            return Ending::Idle;
        }
    }
}

/// Copies the server's messages to the client, each whole under the writer's lock (an
/// exception the relay sends never lands inside one).
fn server_to_client(mut server: UnixStream, writer: &Mutex<TcpStream>, shared: &Shared) {
    while let Ok(Some(length)) = packet::read_header(&mut server) {
        let mut client = writer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if client.write_all(&length.to_le_bytes()).is_err() {
            break;
        }
        match io::copy(&mut (&server).take(length), &mut *client) {
            Ok(copied) if copied == length => {}
            _ => break,
        }
        drop(client);
        shared.client_waits.store(false, Ordering::SeqCst);
    }
    shared.server_done.store(true, Ordering::SeqCst);
}

/// Sends an exception to the client between the server's messages (given up after a
/// few seconds of the server writing to a client that does not read).
fn send_exception(writer: &Mutex<TcpStream>, message: &str) {
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        match writer.try_lock() {
            Ok(mut client) => {
                let _ = client.write_all(&packet::exception(message));
                let _ = client.flush();
                return;
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return,
        }
    }
}

/// Reads and drops the rest of a refused message of `length` bytes (at most
/// MAX_DRAINED, within the idle timeout), so that the client, which reads only once it
/// has sent it all, reads the refusal instead of a reset connection.
fn drain(client: &TcpStream, length: u64, limits: &Limits) {
    let mut left = length.min(MAX_DRAINED);
    let mut buffer = vec![0u8; 64 << 10];
    let mut last_byte = Instant::now();
    while left > 0 && last_byte.elapsed() < limits.idle_timeout {
        let wanted = buffer
            .len()
            .min(usize::try_from(left).unwrap_or(usize::MAX));
        match (&*client).read(&mut buffer[..wanted]) {
            Ok(0) => return,
            Ok(count) => {
                left -= count as u64;
                last_byte = Instant::now();
            }
            Err(error) if is_timeout(&error) => {}
            Err(_) => return,
        }
    }
}

fn is_timeout(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests;
