//! Serving TVM's RPC protocol from this process, for a device server (relax-rpc-server).
//!
//! TVM's runtime has the protocol's server side (`rpc.ServerLoop`: upload, load a module,
//! call, time). A process that loaded it through relax-runtime also has relax-runtime's
//! kernels registered, so the models relax-build compiles, which call them, run in it.
//! Two functions TVM's own (Python) server registers itself are registered here:
//! `tvm.rpc.server.workpath` (a file name in the session's folder) and
//! `tvm.rpc.server.load_module` (a shared library there, checked to be an ELF library
//! for this machine first, so that a module built for another target is refused with a
//! message instead of a loader error).

use std::ffi::c_void;
use std::os::fd::{IntoRawFd, OwnedFd};
use std::panic::catch_unwind;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::api::Api;
use crate::error::{Error, Result};
use crate::globals;
use crate::library;
use crate::locate::Hints;
use crate::object::{self, argument, Callee, Object};
use crate::runtime;
use crate::sys;

/// A server command: a function of one text (JSON, say) returning a text or an error,
/// registered as a global function a client calls through the session.
pub type Command = fn(&str) -> std::result::Result<String, String>;

/// The folder of the session being served (`tvm.rpc.server.workpath` answers in it).
static WORK_DIR: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Held while a session is served: a second caller waits for the first session to end.
static SERVING: Mutex<()> = Mutex::new(());

/// Whether the server-side functions are registered (or why they could not be).
static PREPARED: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Loads TVM's runtime with relax-runtime's kernels (found as the crate docs describe)
/// and registers the server-side functions TVM's runtime leaves to the server. Call it
/// before serving; later calls do nothing more.
pub fn prepare_server() -> Result<()> {
    let api = runtime::load(&Hints {
        tvm_version: crate::private::TVM_VERSION,
        cargo_target: crate::private::CARGO_TARGET,
        relative_to_executable: None,
    })?;
    PREPARED
        .get_or_init(|| {
            let workpath: *mut Command = Box::into_raw(Box::new(workpath as Command));
            // SAFETY: `command_call` reads its handle as the `Command` boxed here, never
            // freed; `load_module_call` reads none.
            unsafe {
                globals::set_global(
                    api,
                    "tvm.rpc.server.workpath",
                    workpath.cast(),
                    command_call,
                )?;
                globals::set_global(
                    api,
                    "tvm.rpc.server.load_module",
                    std::ptr::null_mut(),
                    load_module_call,
                )
            }
        })
        .clone()
        .map_err(|message| registering_failed(message, "the RPC server's functions"))
}

/// Registers `command` as the global function `name` (after [`prepare_server`]).
pub fn register_command(name: &str, command: Command) -> Result<()> {
    let api = loaded_runtime(name)?;
    // The command lives for the process's life, as the registered function does.
    let handle: *mut Command = Box::into_raw(Box::new(command));
    // SAFETY: `command_call` reads its handle as the `Command` boxed here, never freed.
    unsafe { globals::set_global(api, name, handle.cast(), command_call) }
        .map_err(|message| registering_failed(message, &format!("`{name}`")))
}

fn loaded_runtime(what: &str) -> Result<&'static Api> {
    crate::api::loaded_if_any().ok_or_else(|| Error::Tvm {
        kind: "RuntimeError".to_string(),
        message: "TVM's runtime is not loaded: call relax_runtime::rpc::prepare_server first"
            .to_string(),
        context: what.to_string(),
    })
}

fn registering_failed(message: String, what: &str) -> Error {
    Error::Tvm {
        kind: "RuntimeError".to_string(),
        message,
        context: format!("registering {what}"),
    }
}

/// Serves one client session on `socket` (a connected stream socket: the client's TCP
/// connection after the protocol's handshake, which the caller did, or one end of a
/// socket pair whose other end relays the client), with `work_dir` as the session's
/// folder, until the peer ends it or the connection drops. The socket is closed when it
/// returns. Sessions are served one at a time: a call from another thread waits for the
/// current session to end.
pub fn serve_session(socket: impl Into<OwnedFd>, work_dir: &Path) -> Result<()> {
    // One session at a time per process: the session's folder is the process's.
    let _serving = SERVING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *WORK_DIR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(work_dir.to_path_buf());
    let api = loaded_runtime("serving an RPC session")?;
    let server_loop = global_function(api, "rpc.ServerLoop")?;
    // rpc.ServerLoop takes the descriptor over and closes it when the session ends.
    let descriptor = socket.into().into_raw_fd();
    let mut arguments = [argument::int(i64::from(descriptor))];
    let served = object::call(Callee::Object(&server_loop), &mut arguments, || {
        "serving an RPC session".to_string()
    });
    *WORK_DIR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = None;
    served.map(drop)
}

/// The global function `name`, which TVM's runtime registers.
fn global_function(api: &Api, name: &str) -> Result<Object> {
    globals::global(api, name).ok_or_else(|| Error::Tvm {
        kind: "RuntimeError".to_string(),
        message: format!("this TVM runtime has no `{name}`"),
        context: "looking up TVM's RPC server".to_string(),
    })
}

/// `tvm.rpc.server.workpath(name)`: `name` in the session's folder.
fn workpath(name: &str) -> std::result::Result<String, String> {
    Ok(session_path(name)?.display().to_string())
}

/// The path of `name` in the folder of the session being served (where the client's
/// uploads are), for a server command; an error for a name that leaves the folder or
/// when no session is being served.
pub fn session_path(name: &str) -> std::result::Result<PathBuf, String> {
    let dir = WORK_DIR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
        .ok_or("no RPC session is being served")?;
    if Path::new(name).is_absolute()
        || Path::new(name)
            .components()
            .any(|part| part.as_os_str() == "..")
    {
        return Err(format!(
            "`{name}` is not a file name inside the session's folder"
        ));
    }
    Ok(dir.join(name))
}

/// The one text argument of a call (a raw, small or object string).
fn text_argument(args: &[sys::TVMFFIAny]) -> std::result::Result<String, String> {
    match args {
        // SAFETY: TVM passes valid values that outlive the call.
        [only] => unsafe { object::string_value(only) }
            .ok_or_else(|| "expected a text argument".to_string()),
        _ => Err(format!("expected one text argument, got {}", args.len())),
    }
}

/// The safe call of a registered [`Command`].
///
/// # Safety
/// TVM's safe-call contract, and `handle` is a `Command` boxed by this module.
unsafe extern "C" fn command_call(
    handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
) -> i32 {
    // SAFETY: the caller's contract.
    let command = unsafe { *handle.cast::<Command>() };
    // SAFETY: the caller's contract.
    let args = unsafe { globals::arguments(args, count) };
    let api = crate::api::loaded();
    let message = match catch_unwind(|| command(&text_argument(args)?)) {
        Ok(Ok(text)) => {
            let bytes = sys::TVMFFIByteArray {
                data: text.as_ptr().cast(),
                size: text.len(),
            };
            // SAFETY: `bytes` describes a live string, copied into the owned value
            // written to `result` (the caller's contract).
            if unsafe { (api.ffi.TVMFFIStringFromByteArray)(&bytes, result) } == 0 {
                return 0;
            }
            "could not make a TVM string of the answer".to_string()
        }
        Ok(Err(message)) => message,
        Err(_) => "a relax-runtime server command panicked".to_string(),
    };
    globals::raise(api, "ValueError", &message);
    -1
}

/// The safe call of `tvm.rpc.server.load_module`.
///
/// # Safety
/// TVM's safe-call contract.
unsafe extern "C" fn load_module_call(
    _: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
) -> i32 {
    // SAFETY: the caller's contract.
    unsafe {
        globals::answer("tvm.rpc.server.load_module", args, count, result, |args| {
            loaded_library(&text_argument(args)?)
        })
    }
}

/// `tvm.rpc.server.load_module(name)`: the shared library `name` of the session's
/// folder, loaded (whatever its file name says: meta-schedule uploads its candidates as
/// `tvm_tmp_mod.tar`), once checked to be an ELF library for this machine.
fn loaded_library(name: &str) -> std::result::Result<Object, String> {
    let path = session_path(name)?;
    let bytes =
        std::fs::read(&path).map_err(|error| format!("reading {}: {error}", path.display()))?;
    if bytes.starts_with(b"\x7fELF") {
        library::check_elf(&bytes, bytes.len() as u64)
            .map_err(|message| format!("the uploaded module `{name}` {message}"))?;
    } else {
        return Err(format!(
            "the uploaded module `{name}` is not a shared library (an archive or object file?): \
             relax-rpc-server loads shared libraries only; export the module with \
             export_library and the target's cross compiler"
        ));
    }
    library::load_module(name, &path, &format!("the uploaded module `{name}`"))
        .map_err(|error| error.to_string())
}
