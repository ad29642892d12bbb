//! One session, served in a child process of the server (`child.rs` starts it): it
//! loads TVM's runtime, gives TVM's `rpc.ServerLoop` one end of a socket pair and relays
//! the client through the other (`relay.rs`). Whatever the client's code does here (an
//! uploaded module that aborts, a call that never returns) ends this process only.
//!
//! Its exit code tells the server how the session ended: [`ENDED`], [`BROKE_A_LIMIT`]
//! (the client was told which) or [`FAILED`].

use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::error::{Error, Result};
use crate::folders;
use crate::limits::Limits;
use crate::measure;
use crate::relay::{self, Ending};

/// The session ended: the client closed it, or asked TVM's loop to.
pub const ENDED: u8 = 0;
/// The session could not be served, or its connection failed (the reason is printed).
pub const FAILED: u8 = 1;
/// The session was ended by a limit (message size, idle time, length); the client was
/// sent an exception naming it.
pub const BROKE_A_LIMIT: u8 = 3;

/// What the server tells a session's child process (its hidden flags).
pub struct SessionArgs<'a> {
    /// The client's connection, inherited from the server.
    pub descriptor: RawFd,
    /// The session's folder (made by the server, removed by it afterwards).
    pub folder: &'a Path,
    /// The folder's lock file, held while the session runs.
    pub lock: &'a Path,
    /// The client's address, for messages.
    pub peer: &'a str,
    pub limits: Limits,
}

/// Serves the session; returns the process's exit code (see the module docs).
pub fn serve(args: &SessionArgs<'_>) -> u8 {
    // SAFETY: the server passed this descriptor, open and connected, to this process
    // only (`child.rs` clears its close-on-exec flag in the child alone), and nothing
    // else in this process owns it.
    let client = TcpStream::from(unsafe { OwnedFd::from_raw_fd(args.descriptor) });
    match serve_client(client, args) {
        Ok(ending) => report(&ending, args),
        Err(error) => {
            eprintln!("relax-rpc-server: {}: {error}", args.peer);
            FAILED
        }
    }
}

fn serve_client(client: TcpStream, args: &SessionArgs<'_>) -> Result<Ending> {
    let _live = folders::hold(args.lock).map_err(|source| Error::Session {
        what: "locking the session folder's lock file",
        source,
    })?;
    relax_runtime::rpc::prepare_server().map_err(|source| Error::Runtime { source })?;
    measure::set_max_repeat(args.limits.max_repeat);
    relax_runtime::rpc::register_command(measure::COMMAND, measure::time_model)
        .map_err(|source| Error::Runtime { source })?;
    let (tvm_end, relay_end) = UnixStream::pair().map_err(|source| Error::Session {
        what: "making the socket pair to TVM's server loop",
        source,
    })?;
    let folder = args.folder.to_path_buf();
    let peer = args.peer.to_string();
    std::thread::spawn(move || {
        if let Err(error) = relax_runtime::rpc::serve_session(tvm_end, &folder) {
            eprintln!("relax-rpc-server: {peer}: TVM's server loop: {error}");
        }
    });
    Ok(relay::relay(client, relay_end, &args.limits))
}

fn report(ending: &Ending, args: &SessionArgs<'_>) -> u8 {
    match ending {
        Ending::ClientClosed | Ending::ServerClosed => ENDED,
        Ending::Failed(error) => {
            eprintln!(
                "relax-rpc-server: {}: the connection failed: {error}",
                args.peer
            );
            FAILED
        }
        limited => {
            let message = limited.limit_message(&args.limits).unwrap_or_default();
            eprintln!("relax-rpc-server: {}: {message}", args.peer);
            BROKE_A_LIMIT
        }
    }
}
