//! Loading TVM's two runtime libraries and compiled model libraries.
//!
//! `libtvm_ffi.so` (the C ABI) and `libtvm_runtime.so` (which registers the Relax
//! executable loader and the VM builtins) are loaded once per process, with
//! `RTLD_GLOBAL` so that model libraries resolve their TVM symbols against them.
//! Each library is searched for in, in order:
//!
//! 1. `RELAX_RUNTIME_DIR`, when set;
//! 2. the folder of the running executable;
//! 3. the folders relax-build recorded for the toolchain that compiled the model.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};
use crate::object::{self, argument, Object, Value};
use crate::sys;

/// Environment variable naming a folder that holds both TVM runtime libraries.
pub const RUNTIME_DIR_VARIABLE: &str = "RELAX_RUNTIME_DIR";

const FFI_LIBRARY: &str = "libtvm_ffi.so";
const RUNTIME_LIBRARY: &str = "libtvm_runtime.so";

/// The loaded TVM runtime: the C ABI and the global functions relax-runtime calls.
pub(crate) struct Runtime {
    pub(crate) api: sys::TvmFfiLibrary,
    _runtime_library: libloading::Library,
    pub(crate) load_shared_library: Object,
    pub(crate) module_get_function: Object,
    pub(crate) array_size: Object,
    pub(crate) array_get_item: Object,
}

static RUNTIME: OnceLock<Runtime> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

impl Runtime {
    /// The runtime, loading it on first use from the folders described in the module docs.
    ///
    /// `recorded_dirs` are the `:`-separated folders relax-build recorded at build time (searched last).
    pub(crate) fn get_or_load(recorded_dirs: &str) -> Result<&'static Runtime> {
        if let Some(runtime) = RUNTIME.get() {
            return Ok(runtime);
        }
        let _guard = LOADING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(runtime) = RUNTIME.get() {
            return Ok(runtime);
        }
        let dirs = search_dirs(recorded_dirs);
        let runtime = Runtime::load(&dirs)?;
        Ok(RUNTIME.get_or_init(|| runtime))
    }

    /// The runtime, which must already be loaded (every [`Object`] implies it is).
    pub(crate) fn loaded() -> &'static Runtime {
        RUNTIME
            .get()
            .expect("the TVM runtime is loaded before any TVM object exists")
    }

    fn load(dirs: &[PathBuf]) -> Result<Runtime> {
        let ffi_path = find_library(FFI_LIBRARY, dirs)?;
        let runtime_path = find_library(RUNTIME_LIBRARY, dirs)?;
        let ffi_library = open_global(&ffi_path)?;
        // SAFETY: libtvm_ffi.so exports the C ABI that the bindings were generated from.
        let api = unsafe { sys::TvmFfiLibrary::from_library(ffi_library) }.map_err(|error| {
            Error::LibraryLoad {
                path: ffi_path.clone(),
                message: format!(
                    "it lacks a tvm-ffi C ABI symbol ({error}); is it apache-tvm-ffi 0.1.x?"
                ),
            }
        })?;
        // libtvm_runtime.so needs libtvm_ffi.so, which the loader now finds by its soname.
        let runtime_library = open_global(&runtime_path)?;
        let handles = [
            "ffi.Module.load_from_file.so",
            "ffi.ModuleGetFunction",
            "ffi.ArraySize",
            "ffi.ArrayGetItem",
        ]
        .map(|name| global_function_handle(&api, name));
        // Objects are made only once every lookup succeeded: dropping one needs a
        // published runtime, and on failure the few found handles are simply leaked.
        let [load_shared_library, module_get_function, array_size, array_get_item] =
            handles.map(|handle| handle.map(|handle| unsafe { Object::from_owned(handle) }));
        Ok(Runtime {
            api,
            _runtime_library: runtime_library,
            load_shared_library: load_shared_library?.expect("non-null"),
            module_get_function: module_get_function?.expect("non-null"),
            array_size: array_size?.expect("non-null"),
            array_get_item: array_get_item?.expect("non-null"),
        })
    }

    /// Looks up a method of a module (`vm_load_executable`, a Relax function, ...).
    pub(crate) fn module_function(&self, module: &Object, name: &str) -> Result<Option<Object>> {
        let name_c = CString::new(name).expect("function names have no NUL byte");
        let mut arguments = [
            module.as_argument(),
            argument::str(&name_c),
            argument::bool(true),
        ];
        match object::call(&self.module_get_function, &mut arguments, || {
            format!("looking up function `{name}`")
        })? {
            Value::Object(function)
                if function.type_index() == sys::TVMFFITypeIndex_kTVMFFIFunction =>
            {
                Ok(Some(function))
            }
            _ => Ok(None),
        }
    }

    /// Loads a compiled model library from its bytes.
    ///
    /// The bytes go to a new private temporary file (random name, mode 0600) that is
    /// deleted as soon as TVM has loaded it. Every load gets its own path: the dynamic
    /// loader returns an already loaded library when a path repeats, so reusing a name
    /// (such as a recycled `/proc/self/fd/N` of an in-memory file) would hand a second
    /// model the first one's code.
    pub(crate) fn load_module_from_bytes(&self, model: &str, bytes: &[u8]) -> Result<Object> {
        let file = temporary_library(model, bytes)?;
        self.load_module_from_file(model, file.path())
    }

    /// Loads a compiled model library from a file.
    pub(crate) fn load_module_from_file(&self, model: &str, path: &Path) -> Result<Object> {
        let path_c =
            CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Error::LibraryLoad {
                path: path.to_path_buf(),
                message: "the path contains a NUL byte".to_string(),
            })?;
        let mut arguments = [argument::str(&path_c), argument::str(c"so")];
        match object::call(&self.load_shared_library, &mut arguments, || {
            format!(
                "loading the library of model `{model}` from {}",
                path.display()
            )
        })? {
            Value::Object(module) => Ok(module),
            other => Err(Error::LibraryLoad {
                path: path.to_path_buf(),
                message: format!("TVM returned {} instead of a module", other.describe()),
            }),
        }
    }

    /// The items of a tvm-ffi array (a Relax tuple).
    pub(crate) fn array_items(&self, array: &Object) -> Result<Vec<Value>> {
        let context = || "reading a tuple returned by a model".to_string();
        let size = match object::call(&self.array_size, &mut [array.as_argument()], context)? {
            Value::Int(size) => size,
            other => {
                return Err(Error::Tvm {
                    kind: "TypeError".to_string(),
                    message: format!("ffi.ArraySize returned {}", other.describe()),
                    context: context(),
                })
            }
        };
        (0..size)
            .map(|index| {
                let mut arguments = [array.as_argument(), argument::int(index)];
                object::call(&self.array_get_item, &mut arguments, context)
            })
            .collect()
    }
}

/// An owned handle to a registered global function, looked up by name.
fn global_function_handle(api: &sys::TvmFfiLibrary, name: &str) -> Result<sys::TVMFFIObjectHandle> {
    let bytes = sys::TVMFFIByteArray {
        data: name.as_ptr().cast(),
        size: name.len(),
    };
    let mut handle: sys::TVMFFIObjectHandle = std::ptr::null_mut();
    // SAFETY: `bytes` describes a live string; `handle` receives an owned function or null.
    let status = unsafe { (api.TVMFFIFunctionGetGlobal)(&bytes, &mut handle) };
    if status != 0 || handle.is_null() {
        return Err(Error::LibraryLoad {
            path: PathBuf::from(RUNTIME_LIBRARY),
            message: format!(
                "TVM's global function `{name}` is not registered; \
                 the runtime libraries do not match apache-tvm 0.27"
            ),
        });
    }
    Ok(handle)
}

fn search_dirs(recorded_dirs: &str) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os(RUNTIME_DIR_VARIABLE) {
        dirs.push(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    dirs.extend(
        recorded_dirs
            .split(':')
            .filter(|dir| !dir.is_empty())
            .map(PathBuf::from),
    );
    dirs
}

fn find_library(name: &'static str, dirs: &[PathBuf]) -> Result<PathBuf> {
    dirs.iter()
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
        .ok_or_else(|| Error::RuntimeNotFound {
            library: name,
            searched: dirs.to_vec(),
        })
}

fn open_global(path: &Path) -> Result<libloading::Library> {
    // SAFETY: loading TVM's libraries runs their static initializers, which only register functions.
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

/// A private temporary file holding a model library; deleted on drop.
fn temporary_library(model: &str, bytes: &[u8]) -> Result<tempfile::NamedTempFile> {
    use std::io::Write;

    let io_error = |context: String| move |source| Error::Io { context, source };
    let mut file = tempfile::Builder::new()
        .prefix(&format!("relax-model-{model}-"))
        .suffix(".so")
        .tempfile()
        .map_err(io_error(format!(
            "creating a temporary file for the library of model `{model}`"
        )))?;
    file.write_all(bytes)
        .and_then(|()| file.flush())
        .map_err(io_error(format!(
            "writing the library of model `{model}` to {}",
            file.path().display()
        )))?;
    Ok(file)
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
        let error = find_library(FFI_LIBRARY, &dirs).unwrap_err();
        assert_eq!(
            error.to_string(),
            "relax-runtime could not find libtvm_ffi.so; searched:\n  /nonexistent/one\n  /nonexistent/two\n\
             Fix: set RELAX_RUNTIME_DIR to a folder that holds libtvm_ffi.so and libtvm_runtime.so \
             (the `tvm_ffi/lib` and `tvm/lib` folders of the apache-tvm wheel, copied into one folder), \
             or put both libraries next to the executable."
        );
    }

    #[test]
    fn recorded_dirs_come_last() {
        let dirs = search_dirs("/recorded/a:/recorded/b");
        assert_eq!(
            dirs[dirs.len() - 2..],
            [PathBuf::from("/recorded/a"), PathBuf::from("/recorded/b")]
        );
    }
}
