//! The one error type of relax-runtime.

use std::path::PathBuf;

use crate::dtype::DType;

/// What went wrong while loading TVM, a model, or calling a model function.
///
/// Every message names what failed and, where there is one, the fix. `Debug` prints the
/// same message, so `fn main() -> relax_runtime::Result<()>` shows it readably.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `libtvm_ffi.so` or `libtvm_runtime.so` was not found in any searched folder.
    #[error(
        "relax-runtime could not find {library}; searched:\n{}\n\
         Fix: set RELAX_RUNTIME_DIR to a folder that holds libtvm_ffi.so and libtvm_runtime.so \
         (the `tvm_ffi/lib` and `tvm/lib` folders of the apache-tvm wheel, copied into one folder), \
         or put both libraries next to the executable.",
        searched.iter().map(|path| format!("  {}", path.display())).collect::<Vec<_>>().join("\n")
    )]
    RuntimeNotFound {
        library: &'static str,
        searched: Vec<PathBuf>,
    },

    /// A shared library was found but could not be loaded.
    #[error("relax-runtime could not load {}: {message}", path.display())]
    LibraryLoad { path: PathBuf, message: String },

    /// TVM raised an error; `kind` is TVM's error kind (`ValueError`, `InternalError`, ...).
    #[error("TVM {kind} while {context}: {message}")]
    Tvm {
        kind: String,
        message: String,
        context: String,
    },

    /// A model function was called with the wrong number of inputs.
    #[error(
        "model `{model}`, function `{function}`: expected {expected} input(s) ({names}), found {found}"
    )]
    ArgumentCount {
        model: String,
        function: String,
        expected: usize,
        found: usize,
        names: String,
    },

    /// An input's shape does not match the compiled signature.
    #[error(
        "model `{model}`, function `{function}`, argument `{argument}`: expected shape {expected}, found {found}"
    )]
    ShapeMismatch {
        model: String,
        function: String,
        argument: String,
        expected: String,
        found: String,
    },

    /// An input's dtype does not match the compiled signature.
    #[error(
        "model `{model}`, function `{function}`, argument `{argument}`: expected dtype {expected}, found {found}"
    )]
    DTypeMismatch {
        model: String,
        function: String,
        argument: String,
        expected: DType,
        found: DType,
    },

    /// A tensor could not be built from the given data.
    #[error("invalid tensor: {message}")]
    InvalidTensor { message: String },

    /// `as_slice::<T>()` was asked for a different element type than the tensor holds.
    #[error("tensor holds {found} elements, not {requested}")]
    ElementType { requested: DType, found: DType },

    /// The weights embedded for a model do not fit its compiled signature.
    #[error("model `{model}`: weights {message}")]
    Weights { model: String, message: String },

    /// A function returned something other than what its signature promises.
    #[error(
        "model `{model}`, function `{function}`: expected {expected} as output, found {found}"
    )]
    UnexpectedOutput {
        model: String,
        function: String,
        expected: String,
        found: String,
    },

    /// The compiled model has no function of that name.
    #[error("model `{model}` has no function `{function}`; it has: {available}")]
    FunctionNotFound {
        model: String,
        function: String,
        available: String,
    },

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl std::fmt::Debug for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

/// `Result` with relax-runtime's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
