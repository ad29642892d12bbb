//! The server's side of a session's child process: started by running this program
//! again with the hidden `--serve-session-fd` flag (a fresh process, not a fork of one
//! that has loaded TVM and started threads), watched until it exits, killed if it
//! outlives its session's longest by a margin, and its exit explained.
//!
//! Under qemu-user without binfmt_misc (the way `tests/rpc.rs` runs the aarch64 server),
//! this program cannot be executed directly: the child is started through the same
//! emulator and options the server was (`/proc/thread-self/`, which qemu does not
//! redirect, shows the emulator's own executable and command line).

use std::ffi::OsString;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::folders::SessionFolder;
use crate::limits::Limits;
use crate::session;

/// How long past its `--max-session` a child may run before it is killed (it ends the
/// session itself at `--max-session`, unless the client's code holds it).
const KILL_MARGIN: Duration = Duration::from_secs(10);

/// How to run this program again: the program, and the arguments before this program's
/// own (the emulator's, under qemu-user).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launcher {
    program: PathBuf,
    prefix: Vec<OsString>,
}

impl Launcher {
    /// This program, run directly or through the emulator that runs it.
    pub fn current() -> Result<Launcher, Error> {
        let executable = std::env::current_exe().map_err(|source| Error::Executable { source })?;
        let host = std::fs::read_link("/proc/thread-self/exe").ok();
        let command_line = std::fs::read("/proc/thread-self/cmdline").ok();
        let arguments: Vec<OsString> = std::env::args_os().collect();
        Ok(launcher(executable, host, command_line, &arguments))
    }

    fn command(&self) -> Command {
        match self.prefix.split_first() {
            None => Command::new(&self.program),
            Some((emulator, options)) => {
                let mut command = Command::new(emulator);
                command.args(options).arg(&self.program);
                command
            }
        }
    }
}

/// The launcher of `executable` given what the kernel says runs (`host`, its command
/// line NUL-separated) and this program's `arguments`: when the kernel runs another
/// program, an emulator, whose command line ends with this program's arguments, the
/// emulator with the options before them.
fn launcher(
    executable: PathBuf,
    host: Option<PathBuf>,
    command_line: Option<Vec<u8>>,
    arguments: &[OsString],
) -> Launcher {
    let direct = Launcher {
        program: executable.clone(),
        prefix: Vec::new(),
    };
    let (Some(host), Some(command_line)) = (host, command_line) else {
        return direct;
    };
    if host == executable || arguments.is_empty() {
        return direct;
    }
    let host_arguments: Vec<OsString> = command_line
        .split(|byte| *byte == 0)
        .filter(|argument| !argument.is_empty())
        .map(|argument| OsString::from_vec(argument.to_vec()))
        .collect();
    let Some(start) = host_arguments.len().checked_sub(arguments.len()) else {
        return direct;
    };
    if start == 0 || host_arguments[start + 1..] != arguments[1..] {
        return direct;
    }
    let mut prefix = vec![host.into_os_string()];
    prefix.extend(host_arguments[1..start].iter().cloned());
    Launcher {
        program: executable,
        prefix,
    }
}

/// A session's child process, running.
pub struct SessionProcess {
    child: Child,
    started: Instant,
    limits: Limits,
}

/// Starts the child process that serves the session of `client` in `folder`.
pub fn start(
    launcher: &Launcher,
    client: &TcpStream,
    folder: &SessionFolder,
    peer: &str,
    limits: &Limits,
) -> std::io::Result<SessionProcess> {
    let descriptor = client.as_raw_fd();
    let mut command = launcher.command();
    command
        .arg("--serve-session-fd")
        .arg(descriptor.to_string())
        .arg("--session-folder")
        .arg(folder.path())
        .arg("--session-lock")
        .arg(folder.lock_path())
        .arg("--session-peer")
        .arg(peer)
        .args(limits.to_args())
        .stdin(Stdio::null());
    // SAFETY: the closure runs in the forked child before exec and calls only fcntl and
    // prctl, which are async-signal-safe, on a descriptor open in the parent (so in the
    // child) and on the child itself.
    unsafe {
        command.pre_exec(move || {
            // The client's socket is close-on-exec (as std opens every descriptor); in
            // this child alone, it is kept open through the exec.
            if libc::fcntl(descriptor, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            // A session does not outlive the server (killed, say, by its supervisor):
            // the thread that starts it waits for it, so it ends only after the child.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(SessionProcess {
        child: command.spawn()?,
        started: Instant::now(),
        limits: limits.clone(),
    })
}

impl SessionProcess {
    /// Waits for the child to exit (killing it once it outlives its session's longest
    /// by [`KILL_MARGIN`]) and says how the session ended: `Ok` for a normal end, `Err`
    /// with the reason otherwise.
    pub fn wait(mut self) -> Result<Duration, String> {
        let mut killed = false;
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {}
                Err(error) => return Err(format!("waiting for the session's process: {error}")),
            }
            if !killed && self.started.elapsed() > self.limits.max_session + KILL_MARGIN {
                let _ = self.child.kill();
                killed = true;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let elapsed = self.started.elapsed();
        if killed {
            return Err(format!(
                "its process did not end at --max-session ({} s; the client's code held it) and was killed",
                self.limits.max_session.as_secs()
            ));
        }
        explain(status).map(|()| elapsed)
    }
}

/// How a session's child exited: `Ok` for a normal end, else why not.
fn explain(status: ExitStatus) -> Result<(), String> {
    match (status.code(), status.signal()) {
        (Some(code), _) if code == i32::from(session::ENDED) => Ok(()),
        (Some(code), _) if code == i32::from(session::BROKE_A_LIMIT) => {
            Err("it broke a limit (the line above says which; the client was told)".to_string())
        }
        (Some(code), _) => Err(format!(
            "its process exited with status {code} (the line above says why)"
        )),
        (None, Some(signal)) => Err(format!(
            "its process was killed by signal {signal} ({}): the client's code crashed it \
             (an uploaded module that aborts, say); the server goes on",
            signal_name(signal)
        )),
        (None, None) => Err(format!("its process ended ({status})")),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGABRT => "SIGABRT",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGBUS => "SIGBUS",
        libc::SIGILL => "SIGILL",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        _ => "a signal",
    }
}

#[cfg(test)]
mod tests;
