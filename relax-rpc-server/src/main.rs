//! `relax-rpc-server`: a TVM RPC device server with relax-runtime's kernels.
//!
//! It serves TVM's RPC protocol (upload, load a module, call, time: TVM's runtime's own
//! server side) in a process that has relax-runtime loaded, so the models relax-build
//! compiles, which call relax-runtime's kernels, run on it; TVM's Python server cannot
//! run them. No Python is needed on the device: copy this binary and TVM's two runtime
//! libraries (`cargo relax bundle -p relax-rpc-server --target T`) to the board.
//!
//! ```text
//! relax-rpc-server --tracker 192.168.1.10:9190 --key rk3588   # register with a tracker
//! relax-rpc-server --port 9090                                # or listen for clients directly
//! ```
//!
//! Sessions are served one at a time, each in a fresh folder that is deleted after it.
//! Besides TVM's functions, a client may call `relax_rpc.time_model` (see `measure.rs`),
//! which `cargo relax bench --rpc` uses.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;

mod measure;
mod protocol;

use protocol::{answer_client, Client, Tracker};

#[derive(Parser)]
#[command(
    name = "relax-rpc-server",
    about = "Serve TVM's RPC protocol with relax-runtime's kernels, so models compiled by relax-build run, are timed and are tuned on this device."
)]
struct Cli {
    /// The address to listen on.
    #[arg(long, default_value = "0.0.0.0")]
    host: String,
    /// The port to listen on.
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("relax-rpc-server: error: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: &Cli) -> Result<(), String> {
    if cli.key.contains(':') || cli.key.contains(char::is_whitespace) {
        return Err(format!(
            "--key `{}` may not contain `:` or spaces (TVM's tracker splits keys on them)",
            cli.key
        ));
    }
    if cli.tracker.is_some() && cli.key.is_empty() {
        return Err("--tracker needs --key: the name clients ask the tracker for".to_string());
    }
    relax_runtime::rpc::prepare_server()
        .map_err(|error| format!("loading TVM's runtime: {error}"))?;
    relax_runtime::rpc::register_command(measure::COMMAND, measure::time_model)
        .map_err(|error| error.to_string())?;
    let listener =
        TcpListener::bind((cli.host.as_str(), cli.port)).map_err(|error| match error.kind() {
            io::ErrorKind::AddrInUse => format!(
                "port {} on {} is in use (another server?): choose another with --port",
                cli.port, cli.host
            ),
            _ => format!("listening on {}:{}: {error}", cli.host, cli.port),
        })?;
    let port = listener
        .local_addr()
        .map_err(|error| error.to_string())?
        .port();
    let sessions = Sessions {
        work_dir: cli.work_dir.clone().unwrap_or_else(std::env::temp_dir),
        key: cli.key.clone(),
    };
    match &cli.tracker {
        None => {
            eprintln!(
                "relax-rpc-server: listening on {}:{port} (key `{}`)",
                cli.host, cli.key
            );
            serve_direct(&listener, &sessions)
        }
        Some(address) => {
            let tracker = Tracker::connect(address, &cli.key, port, cli.custom_addr.as_deref()).map_err(|error| {
                format!("cannot reach the tracker at {address}: {error} (start one with `cargo relax tracker`)")
            })?;
            eprintln!(
                "relax-rpc-server: listening on {}:{port}, registered with the tracker at {address} as `{}`",
                cli.host, cli.key
            );
            serve_tracked(&listener, &sessions, tracker, address, cli)
        }
    }
}

struct Sessions {
    work_dir: PathBuf,
    key: String,
}

impl Sessions {
    /// Answers a client's handshake (expecting `matchkey`) and serves its session.
    fn serve(&self, mut stream: TcpStream, matchkey: &str) {
        let peer = stream
            .peer_addr()
            .map(|peer| peer.to_string())
            .unwrap_or_default();
        // A client that connects and says nothing must not hold the server.
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        match answer_client(&mut stream, matchkey, &self.key) {
            Ok(Client::Accepted) => {}
            Ok(Client::WrongKey(key)) => {
                eprintln!("relax-rpc-server: refused {peer}: it asked for `{key}`, expected `client:{matchkey}`");
                return;
            }
            Ok(Client::NotRpc) => return,
            Err(error) => {
                eprintln!("relax-rpc-server: handshake with {peer} failed: {error}");
                return;
            }
        }
        let _ = stream.set_read_timeout(None);
        let folder = match tempfile::Builder::new()
            .prefix("relax-rpc-session-")
            .tempdir_in(&self.work_dir)
        {
            Ok(folder) => folder,
            Err(error) => {
                eprintln!(
                    "relax-rpc-server: making a session folder in {}: {error}",
                    self.work_dir.display()
                );
                return;
            }
        };
        eprintln!("relax-rpc-server: session with {peer}");
        let started = Instant::now();
        match relax_runtime::rpc::serve_session(stream, folder.path()) {
            Ok(()) => eprintln!(
                "relax-rpc-server: session with {peer} ended after {:.1?}",
                started.elapsed()
            ),
            Err(error) => eprintln!("relax-rpc-server: session with {peer} failed: {error}"),
        }
    }
}

fn serve_direct(listener: &TcpListener, sessions: &Sessions) -> Result<(), String> {
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => sessions.serve(stream, &sessions.key),
            Err(error) => eprintln!("relax-rpc-server: accepting a connection: {error}"),
        }
    }
    Ok(())
}

/// Offers the device through the tracker, serves the client that takes the offer, and
/// offers it again; reconnects to the tracker when the connection drops.
fn serve_tracked(
    listener: &TcpListener,
    sessions: &Sessions,
    mut tracker: Tracker,
    address: &str,
    cli: &Cli,
) -> Result<(), String> {
    listener
        .set_nonblocking(true)
        .map_err(|error| error.to_string())?;
    let port = listener
        .local_addr()
        .map_err(|error| error.to_string())?
        .port();
    loop {
        if let Err(error) = offer_and_serve(listener, sessions, &mut tracker) {
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

/// One offer: waits for the client that takes it and serves it. An offer taken by a
/// client that never comes is replaced after a few seconds, as TVM's server does.
fn offer_and_serve(
    listener: &TcpListener,
    sessions: &Sessions,
    tracker: &mut Tracker,
) -> io::Result<()> {
    tracker.offer()?;
    let mut last_poll = Instant::now();
    let mut taken_for = 0;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                let matchkey = tracker.matchkey().to_string();
                sessions.serve(stream, &matchkey);
                return Ok(());
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(error) => return Err(error),
        }
        if last_poll.elapsed() >= Duration::from_secs(2) {
            last_poll = Instant::now();
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
