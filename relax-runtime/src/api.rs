//! TVM's runtime, loaded once per process: `libtvm_ffi.so` (the C ABI) and
//! `libtvm_runtime.so` (the Relax VM, its executable loader and builtins), both with
//! `RTLD_GLOBAL` so that model libraries resolve their TVM symbols against them.

use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::locate::{self, Hints};
use crate::sys;

const FFI_LIBRARY: &str = "libtvm_ffi.so";
const RUNTIME_LIBRARY: &str = "libtvm_runtime.so";

/// The global functions relax-runtime calls, by name.
pub(crate) const GLOBALS: [&str; 5] = [
    "ffi.Module.load_from_file.so",
    "ffi.ModuleGetFunction",
    "ffi.ArraySize",
    "ffi.ArrayGetItem",
    "ffi.Array",
];

/// `int TVMFFIEnvModRegisterContextSymbol(const char* name, void* symbol)` of tvm-ffi's
/// `c_env_api.h`: every library loaded afterwards gets `symbol` in its variable `name`
/// (a later registration of a name wins), which is how a model library finds
/// `TVMBackendParallelLaunch` and the other functions its code calls.
pub(crate) type RegisterContextSymbol =
    unsafe extern "C" fn(name: *const c_char, symbol: *mut c_void) -> i32;

/// The loaded runtime: the C ABI's function table and raw handles of the global
/// functions in [`GLOBALS`] (owned for the process's lifetime, never released).
pub(crate) struct Api {
    pub(crate) ffi: sys::TvmFfiLibrary,
    pub(crate) register_context_symbol: RegisterContextSymbol,
    pub(crate) globals: [sys::TVMFFIObjectHandle; GLOBALS.len()],
    _runtime_library: libloading::Library,
}

// SAFETY: the function table is immutable after loading; the global function objects are
// never released and TVM's registry functions may be called from any thread.
unsafe impl Send for Api {}
// SAFETY: as above; `Api` has no interior mutability.
unsafe impl Sync for Api {}

static API: OnceLock<Api> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

/// The runtime, loading it on first use from the folders [`locate`] names for `hints`.
pub(crate) fn get_or_load(hints: &Hints<'_>, register: Register) -> Result<&'static Api> {
    if let Some(api) = API.get() {
        return Ok(api);
    }
    let _guard = LOADING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(api) = API.get() {
        return Ok(api);
    }
    let api = load(&locate::search_dirs(hints), register)?;
    Ok(API.get_or_init(|| api))
}

/// The runtime, which must already be loaded (every TVM object implies it is).
pub(crate) fn loaded() -> &'static Api {
    API.get()
        .expect("the TVM runtime is loaded before any TVM object exists")
}

/// The runtime, if it is loaded.
pub(crate) fn loaded_if_any() -> Option<&'static Api> {
    API.get()
}

/// Registers global functions with a just-loaded runtime, before any model loads.
pub(crate) type Register = fn(&Api) -> std::result::Result<(), String>;

fn load(dirs: &[PathBuf], register: Register) -> Result<Api> {
    let not_found = |library| Error::RuntimeNotFound {
        library,
        searched: dirs.to_vec(),
    };
    let ffi_path = locate::find(FFI_LIBRARY, dirs).ok_or_else(|| not_found(FFI_LIBRARY))?;
    let runtime_path =
        locate::find(RUNTIME_LIBRARY, dirs).ok_or_else(|| not_found(RUNTIME_LIBRARY))?;
    let ffi_library = open_global(&ffi_path)?;
    // SAFETY: the symbols are looked up by the names of tvm-ffi's C ABI, whose types the
    // bindings were generated from (apache-tvm-ffi 0.1).
    let ffi = unsafe { sys::TvmFfiLibrary::from_library(ffi_library) }.map_err(|error| {
        Error::LibraryLoad {
            path: ffi_path.clone(),
            message: format!(
                "it lacks a tvm-ffi C ABI symbol ({error}); is it apache-tvm-ffi 0.1.x? \
                 (found through the folders listed in relax-runtime's docs; set RELAX_RUNTIME_DIR to choose)"
            ),
        }
    })?;
    // libtvm_runtime.so needs libtvm_ffi.so, which the loader now finds by its soname.
    let runtime_library = open_global(&runtime_path)?;
    // SAFETY: the symbol has this signature in tvm-ffi's c_env_api.h (looked up through
    // libtvm_runtime.so, which loads libtvm_ffi.so).
    let register_context_symbol = unsafe {
        runtime_library.get::<RegisterContextSymbol>(b"TVMFFIEnvModRegisterContextSymbol\0")
    }
    .map(|symbol| *symbol)
    .map_err(|error| Error::LibraryLoad {
        path: ffi_path.clone(),
        message: format!(
            "it lacks TVMFFIEnvModRegisterContextSymbol ({error}); is it apache-tvm-ffi 0.1.x?"
        ),
    })?;
    let mut globals = [std::ptr::null_mut(); GLOBALS.len()];
    for (slot, name) in globals.iter_mut().zip(GLOBALS) {
        *slot = global_function_handle(&ffi, name).ok_or_else(|| Error::LibraryLoad {
            path: runtime_path.clone(),
            message: format!(
                "TVM's global function `{name}` is not registered; {} and {} do not match apache-tvm 0.27",
                ffi_path.display(),
                runtime_path.display()
            ),
        })?;
    }
    let api = Api {
        ffi,
        register_context_symbol,
        globals,
        _runtime_library: runtime_library,
    };
    register(&api).map_err(|message| Error::LibraryLoad {
        path: runtime_path.clone(),
        message: format!(
            "registering relax-runtime's kernels and output allocator failed: {message}"
        ),
    })?;
    Ok(api)
}

/// An owned handle to a registered global function, or None.
fn global_function_handle(ffi: &sys::TvmFfiLibrary, name: &str) -> Option<sys::TVMFFIObjectHandle> {
    let bytes = sys::TVMFFIByteArray {
        data: name.as_ptr().cast(),
        size: name.len(),
    };
    let mut handle: sys::TVMFFIObjectHandle = std::ptr::null_mut();
    // SAFETY: `bytes` describes a live string; `handle` receives an owned function or null.
    let status = unsafe { (ffi.TVMFFIFunctionGetGlobal)(&bytes, &mut handle) };
    (status == 0 && !handle.is_null()).then_some(handle)
}

fn open_global(path: &Path) -> Result<libloading::Library> {
    // SAFETY: loading TVM's libraries runs their static initializers, which only
    // register functions and types.
    let library = unsafe {
        libloading::os::unix::Library::open(
            Some(path),
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
        )
    }
    .map_err(|error| Error::LibraryLoad {
        path: path.to_path_buf(),
        message: error.to_string(),
    })?;
    Ok(library.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_lists_every_folder_searched_and_the_fix() {
        let dirs = [
            PathBuf::from("/nonexistent/one"),
            PathBuf::from("/nonexistent/two"),
        ];
        let error = load(&dirs, |_| Ok(())).err().expect("nothing to load");
        assert_eq!(
            error.to_string(),
            "relax-runtime could not find libtvm_ffi.so; searched:\n  /nonexistent/one\n  /nonexistent/two\n\
             Fix: set RELAX_RUNTIME_DIR to a folder that holds libtvm_ffi.so and libtvm_runtime.so \
             (the `tvm_ffi/lib` and `tvm/lib` folders of the apache-tvm wheel, copied into one folder), \
             or put both libraries next to the executable."
        );
    }
}
