//! `relax-rpc-server`: a TVM RPC device server with relax-runtime's kernels.
//!
//! It serves TVM's RPC protocol (upload, load a module, call, time: TVM's runtime's own
//! server side) in a process that has relax-runtime loaded, so the models relax-build
//! compiles, which call relax-runtime's kernels, run on it; TVM's Python server cannot
//! run them. No Python is needed on the device: copy this binary and TVM's two runtime
//! libraries (`cargo relax bundle -p relax-rpc-server --target T`) to the board.
//!
//! ```text
//! relax-rpc-server --port 9090                                # clients on this machine (or through ssh -L)
//! relax-rpc-server --host 0.0.0.0 --token-file ~/.relax-rpc-token --tracker 192.168.1.10:9190 --key rk3588
//! ```
//!
//! A client uploads native code and the server runs it: the server listens on loopback
//! unless `--host` says otherwise (and then warns), can require a token, and serves each
//! session in a child process of its own (`session.rs`), within limits (`limits.rs`)
//! that a relay between the client and TVM's server loop enforces (`relay.rs`); a
//! session that crashes ends alone. Each session's folder is deleted after it
//! (`folders.rs`). Besides TVM's functions, a client may call `relax_rpc.time_model`
//! (see `measure.rs`), which `cargo relax bench --rpc` uses. docs/remote.md has the
//! workflow and its security.
//!
//! Modules: `listen.rs` (accepting, handshakes, the tracker's offers), `protocol.rs`
//! (TVM's handshakes and tracker messages), `access.rs` (token, `--allow`), `child.rs`
//! (starting and watching a session's process), `session.rs` and `relay.rs` (the
//! session's process), `packet.rs` (TVM's message framing), `folders.rs`, `limits.rs`,
//! `measure.rs`.

use std::io;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;

mod access;
mod child;
mod env;
mod error;
mod folders;
mod limits;
mod listen;
mod measure;
mod packet;
mod protocol;
mod relay;
mod session;

use access::{AllowList, Token};
use error::{Error, Result};
use limits::Limits;
use listen::Server;
use protocol::Tracker;

#[derive(Parser)]
#[command(
    name = "relax-rpc-server",
    about = "Serve TVM's RPC protocol with relax-runtime's kernels, so models compiled by relax-build run, are timed and are tuned on this device.",
    after_help = "SECURITY: clients upload shared libraries and this server runs them, as this user. \
It listens on 127.0.0.1 by default; with another --host, anyone who reaches the port runs code \
here unless a token is required (--token-file, or RELAX_RPC_TOKEN) and --allow limits who may \
connect. On a network others share, prefer the default and an SSH tunnel (ssh -L / ssh -R); \
see docs/remote.md, \"Security\"."
)]
struct Cli {
    /// The address to listen on. Anything but a loopback address lets other machines
    /// upload code that this server runs: require a token then (--token-file).
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// The port to listen on (0: any free port, printed at start).
    #[arg(long, default_value_t = 9090)]
    port: u16,
    /// Register with the tracker at HOST:PORT (else clients connect directly).
    #[arg(long, value_name = "HOST:PORT")]
    tracker: Option<String>,
    /// The device's key: clients ask the tracker for a device of this key (with --tracker),
    /// or must send it (without). No `:` and no spaces.
    #[arg(long, default_value = "")]
    key: String,
    /// The host clients are sent to by the tracker (default: the address the tracker sees).
    #[arg(long, value_name = "HOST")]
    custom_addr: Option<String>,
    /// Where each session's folder is made (default: the system's temporary folder).
    #[arg(long, value_name = "DIR")]
    work_dir: Option<PathBuf>,
    /// A file whose first line is a secret clients must present (they set RELAX_RPC_TOKEN
    /// to it). Without this flag, the server's own RELAX_RPC_TOKEN, when set, is required.
    #[arg(long, value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Accept clients from this address or network only (e.g. 192.168.1.20, 10.0.0.0/8);
    /// repeat it for more. Default: any address that reaches the port.
    #[arg(long, value_name = "ADDRESS[/PREFIX]")]
    allow: Vec<String>,
    /// Sessions served at once, each in a process of its own; a client beyond them is
    /// told the server is busy.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_MAX_SESSIONS)]
    max_sessions: usize,
    /// The largest message a client may send (an upload, a call's arguments), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = limits::DEFAULT_MAX_MESSAGE_MIB)]
    max_message_mib: u64,
    /// The largest `repeat` (and `warmup`) `relax_rpc.time_model` accepts.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_MAX_REPEAT)]
    max_repeat: usize,
    /// A session whose client sends nothing for this long while the server waits for it
    /// ends (a call that runs long is not idleness), in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = limits::DEFAULT_IDLE_SECONDS)]
    idle_timeout: u64,
    /// A session ends after this long, in seconds (or the client's own session timeout,
    /// when shorter).
    #[arg(long, value_name = "SECONDS", default_value_t = limits::DEFAULT_MAX_SESSION_SECONDS)]
    max_session: u64,
    /// A client must finish its handshake within this long, in seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = limits::DEFAULT_HANDSHAKE_SECONDS)]
    handshake_timeout: u64,

    // The session's child process (see child.rs): not for users.
    #[arg(long, hide = true)]
    serve_session_fd: Option<i32>,
    #[arg(long, hide = true)]
    session_folder: Option<PathBuf>,
    #[arg(long, hide = true)]
    session_lock: Option<PathBuf>,
    #[arg(long, hide = true)]
    session_peer: Option<String>,
    #[arg(long, hide = true)]
    max_message_bytes: Option<u64>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(descriptor) = cli.serve_session_fd {
        let code = serve_session(&cli, descriptor);
        // SAFETY: _exit ends the process at once; nothing of this process is needed
        // after the session (the parent reaps it). It skips static destructors, which
        // would run under TVM's server loop still inside them on another thread.
        unsafe { libc::_exit(i32::from(code)) }
    }
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("relax-rpc-server: error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn limits(cli: &Cli) -> Limits {
    Limits {
        max_message_bytes: cli
            .max_message_bytes
            .unwrap_or_else(|| limits::mib_to_bytes(cli.max_message_mib)),
        max_repeat: cli.max_repeat,
        idle_timeout: Duration::from_secs(cli.idle_timeout.max(1)),
        max_session: Duration::from_secs(cli.max_session.max(1)),
    }
}

/// The session's child process.
fn serve_session(cli: &Cli, descriptor: i32) -> u8 {
    let (Some(folder), Some(lock)) = (&cli.session_folder, &cli.session_lock) else {
        eprintln!("relax-rpc-server: error: {}", Error::SessionFlags);
        return session::FAILED;
    };
    session::serve(&session::SessionArgs {
        descriptor,
        folder,
        lock,
        peer: cli.session_peer.as_deref().unwrap_or("the client"),
        limits: limits(cli),
    })
}

fn run(cli: &Cli) -> Result<()> {
    if cli.key.contains(':') || cli.key.contains(char::is_whitespace) {
        return Err(Error::InvalidKey {
            key: cli.key.clone(),
        });
    }
    if cli.tracker.is_some() && cli.key.is_empty() {
        return Err(Error::TrackerNeedsKey);
    }
    if cli.max_sessions == 0 {
        return Err(Error::NotPositive {
            flag: "--max-sessions",
        });
    }
    let token = Token::load(cli.token_file.as_deref(), env::var(env::TOKEN))?;
    let allow = AllowList::parse(&cli.allow)?;
    // Loaded here too, so that a missing runtime is reported at start; this process
    // never runs a client's code (each session's process does).
    relax_runtime::rpc::prepare_server().map_err(|source| Error::Runtime { source })?;
    let launcher = child::Launcher::current()?;
    let work_dir = cli.work_dir.clone().unwrap_or_else(std::env::temp_dir);
    match folders::sweep(&work_dir) {
        Ok(removed) if !removed.is_empty() => eprintln!(
            "relax-rpc-server: removed {} stale session folders in {}",
            removed.len(),
            work_dir.display()
        ),
        Ok(_) => {}
        Err(error) => eprintln!(
            "relax-rpc-server: sweeping stale session folders in {}: {error}",
            work_dir.display()
        ),
    }
    let listener =
        TcpListener::bind((cli.host.as_str(), cli.port)).map_err(|source| match source.kind() {
            io::ErrorKind::AddrInUse => Error::PortInUse {
                host: cli.host.clone(),
                port: cli.port,
            },
            _ => Error::Listen {
                host: cli.host.clone(),
                port: cli.port,
                source,
            },
        })?;
    let address = listener.local_addr().map_err(|source| Error::Listen {
        host: cli.host.clone(),
        port: cli.port,
        source,
    })?;
    if let Some(warning) = listen::exposure_warning(address, token.is_some()) {
        eprintln!("relax-rpc-server: warning: {warning}");
    }
    let server = Arc::new(Server::new(
        cli.key.clone(),
        token,
        allow,
        limits(cli),
        Duration::from_secs(cli.handshake_timeout.max(1)),
        cli.max_sessions,
        work_dir,
        launcher,
        cli.tracker.is_some(),
    ));
    match &cli.tracker {
        None => {
            eprintln!(
                "relax-rpc-server: listening on {address} (key `{}`)",
                cli.key
            );
            server.accept_forever(&listener);
            Ok(())
        }
        Some(tracker_address) => {
            let tracker = Tracker::connect(
                tracker_address,
                &cli.key,
                address.port(),
                cli.custom_addr.as_deref(),
            )
            .map_err(|source| Error::Tracker {
                address: tracker_address.clone(),
                source,
            })?;
            eprintln!(
                "relax-rpc-server: listening on {address}, registered with the tracker at {tracker_address} as `{}`",
                cli.key
            );
            {
                let server = Arc::clone(&server);
                std::thread::spawn(move || server.accept_forever(&listener));
            }
            serve_tracked(&server, tracker, tracker_address, cli, address.port())
        }
    }
}

/// Offers the device through the tracker, serves the client that takes the offer, and
/// offers it again; reconnects to the tracker when the connection drops.
fn serve_tracked(
    server: &Server,
    mut tracker: Tracker,
    address: &str,
    cli: &Cli,
    port: u16,
) -> Result<()> {
    loop {
        if let Err(error) = server.offer_and_serve(&mut tracker) {
            eprintln!("relax-rpc-server: lost the tracker at {address} ({error}); reconnecting");
            tracker = loop {
                std::thread::sleep(Duration::from_secs(2));
                match Tracker::connect(address, &cli.key, port, cli.custom_addr.as_deref()) {
                    Ok(tracker) => break tracker,
                    Err(error) => eprintln!("relax-rpc-server: the tracker at {address}: {error}"),
                }
            };
        }
    }
}
