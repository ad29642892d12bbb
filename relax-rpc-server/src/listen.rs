//! The server's main process: it accepts connections, answers each handshake in a
//! thread of its own within an overall deadline, and serves each admitted client in a
//! child process (`child.rs`), a bounded number at once. It never runs a client's code
//! and never waits for one client before accepting the next. With a tracker, it offers
//! the device, serves the client that takes the offer and offers it again.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::access::{AllowList, Token};
use crate::child::{self, Launcher};
use crate::env;
use crate::folders::SessionFolder;
use crate::limits::{Limits, MAX_PENDING_HANDSHAKES};
use crate::packet;
use crate::protocol::{self, Hello, Tracker};

/// How the server admits and serves clients.
pub struct Server {
    /// The device's key (`--key`).
    pub key: String,
    pub token: Option<Token>,
    pub allow: AllowList,
    pub limits: Limits,
    pub handshake_timeout: Duration,
    pub max_sessions: usize,
    pub work_dir: PathBuf,
    pub launcher: Launcher,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    handshakes: usize,
    sessions: usize,
    /// The matchkey a client must ask for (`None`: no offer is open).
    matchkey: Option<String>,
    /// With a tracker: a client took the current offer.
    tracked: bool,
    taken: bool,
}

/// What a client's handshake earned it.
enum Admission {
    Session,
    WrongToken,
    WrongKey(String),
    Busy,
}

impl Server {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: String,
        token: Option<Token>,
        allow: AllowList,
        limits: Limits,
        handshake_timeout: Duration,
        max_sessions: usize,
        work_dir: PathBuf,
        launcher: Launcher,
        tracked: bool,
    ) -> Server {
        Server {
            state: Mutex::new(State {
                handshakes: 0,
                sessions: 0,
                // With a tracker, no client is admitted before the first offer.
                matchkey: (!tracked).then(|| key.clone()),
                tracked,
                taken: false,
            }),
            key,
            token,
            allow,
            limits,
            handshake_timeout,
            max_sessions,
            work_dir,
            launcher,
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Accepts connections forever, each answered in a thread of its own.
    pub fn accept_forever(self: &Arc<Server>, listener: &TcpListener) {
        for stream in listener.incoming() {
            let stream = match stream {
                Ok(stream) => stream,
                Err(error) => {
                    eprintln!("relax-rpc-server: accepting a connection: {error}");
                    // Out of descriptors, say: let sessions end before trying again.
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            let Ok(peer) = stream.peer_addr() else {
                continue;
            };
            if !self.allow.allows(peer.ip()) {
                eprintln!("relax-rpc-server: refused {peer}: its address is not in --allow");
                continue;
            }
            {
                let mut state = self.state();
                if state.handshakes >= MAX_PENDING_HANDSHAKES {
                    eprintln!(
                        "relax-rpc-server: refused {peer}: {MAX_PENDING_HANDSHAKES} connections \
                         are already in their handshake"
                    );
                    continue;
                }
                state.handshakes += 1;
            }
            let server = Arc::clone(self);
            std::thread::spawn(move || server.answer(stream, &peer.to_string()));
        }
    }

    /// Answers one connection's handshake and serves its session.
    fn answer(&self, stream: TcpStream, peer: &str) {
        let deadline = Instant::now() + self.handshake_timeout;
        let mut timed = Timed {
            stream: &stream,
            deadline,
        };
        let hello = protocol::read_hello(&mut timed);
        let admission = match &hello {
            Ok(Some(hello)) => Some(self.admit(hello)),
            _ => None,
        };
        self.state().handshakes -= 1;
        let hello = match hello {
            Ok(Some(hello)) => hello,
            Ok(None) => return,
            Err(error) => {
                eprintln!(
                    "relax-rpc-server: handshake with {peer} failed: {} (a client must finish \
                     it within --handshake-timeout, {} s)",
                    describe(&error),
                    self.handshake_timeout.as_secs()
                );
                return;
            }
        };
        let Some(admission) = admission else {
            return;
        };
        match admission {
            Admission::WrongToken => {
                eprintln!(
                    "relax-rpc-server: refused {peer}: a wrong or missing token (clients present \
                     it with {})",
                    env::TOKEN
                );
                let _ = protocol::refuse(&mut timed);
            }
            Admission::WrongKey(expected) => {
                eprintln!(
                    "relax-rpc-server: refused {peer}: it asked for `{}`, expected `{expected}`",
                    hello.key
                );
                let _ = protocol::refuse(&mut timed);
            }
            Admission::Busy => {
                eprintln!(
                    "relax-rpc-server: refused {peer}: {} sessions are being served (--max-sessions)",
                    self.max_sessions
                );
                self.tell_busy(&mut timed);
            }
            Admission::Session => {
                self.serve(stream, deadline, peer, &hello);
                let mut state = self.state();
                state.sessions -= 1;
                self.changed.notify_all();
            }
        }
    }

    /// Decides a client's fate; a session's slot is taken for it when it gets one.
    fn admit(&self, hello: &Hello) -> Admission {
        if let Some(token) = &self.token {
            if !token.accepts(hello.token.as_deref()) {
                return Admission::WrongToken;
            }
        }
        let mut state = self.state();
        let matches = match &state.matchkey {
            Some(matchkey) => hello.matches(matchkey) && !state.taken,
            None => false,
        };
        if !matches {
            let expected = match &state.matchkey {
                Some(matchkey) if !state.taken => format!("client:{matchkey}"),
                _ => "the matchkey of the tracker's next offer".to_string(),
            };
            return Admission::WrongKey(expected);
        }
        if state.sessions >= self.max_sessions {
            return Admission::Busy;
        }
        state.sessions += 1;
        if state.tracked {
            state.taken = true;
        }
        Admission::Session
    }

    /// Serves an admitted client's session in a child process, and cleans up after it.
    fn serve(&self, stream: TcpStream, deadline: Instant, peer: &str, hello: &Hello) {
        let mut timed = Timed {
            stream: &stream,
            deadline,
        };
        let folder = match SessionFolder::create(&self.work_dir) {
            Ok(folder) => folder,
            Err(error) => {
                eprintln!(
                    "relax-rpc-server: refused {peer}: making a session folder in {}: {error} \
                     (choose another folder with --work-dir)",
                    self.work_dir.display()
                );
                let _ = protocol::refuse(&mut timed);
                return;
            }
        };
        if let Err(error) = protocol::accept(&mut timed, &self.key) {
            eprintln!("relax-rpc-server: handshake with {peer} failed: {error}");
            return;
        }
        let _ = stream.set_read_timeout(None);
        let _ = stream.set_write_timeout(None);
        eprintln!("relax-rpc-server: session with {peer}");
        let limits = self.limits.with_client_timeout(hello.timeout);
        let process = match child::start(&self.launcher, &stream, &folder, peer, &limits) {
            Ok(process) => process,
            Err(error) => {
                eprintln!(
                    "relax-rpc-server: session with {peer} failed: starting its process: {error}"
                );
                return;
            }
        };
        // The connection is the child's now: the client sees it end when the child does.
        drop(stream);
        match process.wait() {
            Ok(elapsed) => {
                eprintln!("relax-rpc-server: session with {peer} ended after {elapsed:.1?}")
            }
            Err(reason) => eprintln!("relax-rpc-server: session with {peer} failed: {reason}"),
        }
        drop(folder);
    }

    /// Tells an admitted-but-for-room client that the server is busy: an exception
    /// answering its first message (TVM's client raises it with the text).
    fn tell_busy(&self, timed: &mut Timed<'_>) {
        if protocol::accept(timed, &self.key).is_err() {
            return;
        }
        // Its first message (the session's init) is read first: a connection closed with
        // unread bytes is reset, and the client would not see the answer.
        let Ok(Some(length)) = packet::read_header(timed) else {
            return;
        };
        if length <= 1 << 16 {
            let _ = io::copy(&mut (&mut *timed).take(length), &mut io::sink());
        }
        let message = format!(
            "relax-rpc-server is busy: it serves {} sessions at once (--max-sessions) and all \
             are in use; retry later, or start it with a larger --max-sessions",
            self.max_sessions
        );
        let _ = timed.write_all(&packet::exception(&message));
        let _ = timed.stream.shutdown(std::net::Shutdown::Write);
        let _ = io::copy(timed, &mut io::sink());
    }

    /// With a tracker: offers the device, waits for the client that takes the offer to
    /// be served, and returns (to be called again); an offer taken by a client that
    /// never comes is replaced after a few seconds, as TVM's server does.
    pub fn offer_and_serve(&self, tracker: &mut Tracker) -> io::Result<()> {
        {
            let mut state = self.state();
            state.matchkey = Some(tracker.next_matchkey().to_string());
            state.taken = false;
        }
        tracker.offer()?;
        let mut taken_for = 0;
        loop {
            let state = self.state();
            let (state, _) = self
                .changed
                .wait_timeout(state, Duration::from_secs(2))
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if state.taken {
                if state.sessions == 0 {
                    return Ok(());
                }
                continue;
            }
            drop(state);
            if tracker.offer_pending()? {
                taken_for = 0;
            } else {
                taken_for += 1;
                if taken_for > 3 {
                    return Ok(());
                }
            }
        }
    }
}

/// A connection read and written within an overall deadline: a client that trickles
/// its handshake a byte at a time does not get a fresh timeout per read.
struct Timed<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Timed<'_> {
    fn left(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the handshake took too long",
            ));
        }
        Ok(left)
    }
}

impl Read for Timed<'_> {
    fn read(&mut self, buffer: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        (&*self.stream).read(buffer)
    }
}

impl Write for Timed<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        (&*self.stream).write(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        (&*self.stream).flush()
    }
}

fn describe(error: &io::Error) -> String {
    match error.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
            "it did not finish in time".to_string()
        }
        io::ErrorKind::UnexpectedEof => "it closed the connection".to_string(),
        _ => error.to_string(),
    }
}

/// The warning printed at start when the server listens on `address`, which other
/// machines can reach (none for a loopback address).
pub fn exposure_warning(address: SocketAddr, token: bool) -> Option<String> {
    if address.ip().to_canonical().is_loopback() {
        return None;
    }
    Some(format!(
        "listening on {address}, which other machines can reach: whoever reaches this port can \
         upload a shared library and run it here as this user{}. Keep the default --host \
         127.0.0.1 and reach it through an SSH tunnel (ssh -L {port}:127.0.0.1:{port} BOARD), \
         or limit clients with --allow (docs/remote.md, Security).",
        if token {
            " if it presents the token".to_string()
        } else {
            format!(
                ", and no token is required (--token-file, or {})",
                env::TOKEN
            )
        },
        port = address.port()
    ))
}

#[cfg(test)]
mod tests;
