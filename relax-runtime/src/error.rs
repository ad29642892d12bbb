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
    ///
    /// The message lists every folder searched (see the crate docs for the order).
    #[error(
        "relax-runtime could not find {library}; searched:\n{}\n\
         Fix: set RELAX_RUNTIME_DIR to a folder that holds libtvm_ffi.so and libtvm_runtime.so \
         (the `tvm_ffi/lib` and `tvm/lib` folders of the apache-tvm wheel, copied into one folder), \
         or put both libraries next to the executable.",
        searched.iter().map(|path| format!("  {}", path.display())).collect::<Vec<_>>().join("\n")
    )]
    RuntimeNotFound {
        /// The library's file name.
        library: &'static str,
        /// The folders searched, in order.
        searched: Vec<PathBuf>,
    },

    /// A shared library was found but could not be loaded.
    #[error("relax-runtime could not load {}: {message}", path.display())]
    LibraryLoad {
        /// The library (or a description of an embedded one).
        path: PathBuf,
        /// Why, and what to do.
        message: String,
    },

    /// The library embedded for a model does not match what relax-build recorded.
    #[error("model `{model}`: {message}")]
    CorruptedLibrary {
        /// The model's name.
        model: String,
        /// What does not match.
        message: String,
    },

    /// TVM raised an error; `kind` is TVM's error kind (`ValueError`, `InternalError`, ...).
    #[error("TVM {kind} while {context}: {message}")]
    Tvm {
        /// TVM's error kind.
        kind: String,
        /// TVM's message.
        message: String,
        /// What relax-runtime was doing.
        context: String,
    },

    /// A model function was called with the wrong number of inputs.
    #[error(
        "model `{model}`, function `{function}`: expected {expected} input(s) ({names}), found {found}"
    )]
    ArgumentCount {
        /// The model's name.
        model: String,
        /// The function's name.
        function: String,
        /// The number of inputs the function takes.
        expected: usize,
        /// The number given.
        found: usize,
        /// The inputs' names, comma-separated.
        names: String,
    },

    /// An input's shape does not match the compiled signature.
    #[error(
        "model `{model}`, function `{function}`, argument `{argument}`: expected shape {expected}, found {found}"
    )]
    ShapeMismatch {
        /// The model's name.
        model: String,
        /// The function's name.
        function: String,
        /// The argument's name.
        argument: String,
        /// The compiled shape (with bound symbolic dims).
        expected: String,
        /// The tensor's shape.
        found: String,
    },

    /// An input's dtype does not match the compiled signature.
    #[error(
        "model `{model}`, function `{function}`, argument `{argument}`: expected dtype {expected}, found {found}"
    )]
    DTypeMismatch {
        /// The model's name.
        model: String,
        /// The function's name.
        function: String,
        /// The argument's name.
        argument: String,
        /// The compiled dtype.
        expected: DType,
        /// The tensor's dtype.
        found: DType,
    },

    /// A tensor could not be built from the given data.
    #[error("invalid tensor: {message}")]
    InvalidTensor {
        /// What is wrong.
        message: String,
    },

    /// `as_slice::<T>()` was asked for a different element type than the tensor holds.
    #[error("tensor holds {found} elements, not {requested}")]
    ElementType {
        /// The element type asked for.
        requested: DType,
        /// The tensor's.
        found: DType,
    },

    /// The weights embedded for a model do not fit its compiled signature.
    #[error("model `{model}`: weights {message}")]
    Weights {
        /// The model's name.
        model: String,
        /// What is wrong with them.
        message: String,
    },

    /// A function returned something other than what its signature promises.
    #[error(
        "model `{model}`, function `{function}`: expected {expected} as output, found {found}"
    )]
    UnexpectedOutput {
        /// The model's name.
        model: String,
        /// The function's name.
        function: String,
        /// What the signature promises.
        expected: String,
        /// What TVM returned.
        found: String,
    },

    /// The compiled model has no function of that name.
    #[error("model `{model}` has no function `{function}`; it has: {available}")]
    FunctionNotFound {
        /// The model's name.
        model: String,
        /// The name asked for.
        function: String,
        /// The model's functions.
        available: String,
    },

    /// A stream's state declaration does not fit the function, or a push got the wrong
    /// number of inputs.
    #[error("model `{model}`, function `{function}`, streamed with state: {message}")]
    Stream {
        /// The model's name.
        model: String,
        /// The function's name.
        function: String,
        /// What does not fit, and the fix.
        message: String,
    },

    /// An operating-system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The operating system's error.
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
