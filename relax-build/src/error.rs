//! The one error type of relax-build.

use std::path::PathBuf;

/// Why compiling the models of a package failed.
///
/// Messages name the model, the manifest key (`package.metadata.relax.models.<name>.<key>`)
/// or the file, what was expected, and what to do.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// `Cargo.toml` could not be read or parsed.
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A key of `[package.metadata.relax]` is missing or wrong.
    ManifestKey {
        /// The manifest (or `environment` for a variable).
        path: PathBuf,
        /// The full key path (`package.metadata.relax.models.digits.source`) or variable.
        key: String,
        /// What was expected, what was found, and the fix.
        message: String,
    },
    /// A model failed in the compile driver (import, export, compile).
    Model {
        /// The model's name.
        model: String,
        /// The manifest key the failure is about, when there is one.
        key: Option<String>,
        /// What failed and the fix.
        message: String,
        /// More lines: a trimmed traceback, a compiler's output.
        detail: String,
    },
    /// TVM's ONNX importer does not support (or failed on) operators of the model.
    UnsupportedOperator {
        /// The model's name.
        model: String,
        /// The model's `source` key.
        key: String,
        /// The op types, each once.
        operators: Vec<String>,
        /// Every unsupported operator with its count and first nodes, and the fix.
        message: String,
    },
    /// No usable Python with the pinned TVM was found, and none could be provisioned.
    Toolchain {
        /// What was tried, why it failed, and the fix.
        message: String,
    },
    /// pip refused a package of the managed toolchain's hash lock: the index served a
    /// file whose sha256 the lock does not allow.
    HashMismatch {
        /// The lock (`relax-build/locks/linux-x86_64/cp311/toolchain.txt`).
        lock: String,
        /// The refused packages, `name==version`.
        packages: Vec<String>,
        /// Each package with the expected and the served sha256, what it means, and the fix.
        message: String,
    },
    /// A required environment variable is missing (relax-build runs outside a build script).
    MissingEnv {
        /// The variable.
        variable: &'static str,
        /// How to run relax-build instead.
        hint: &'static str,
    },
    /// The Cargo target has no TVM target mapping.
    UnsupportedTarget {
        /// The Cargo target triple.
        target: String,
        /// Why, and what to do.
        message: String,
    },
    /// Reading or writing a file failed.
    Io {
        /// What was being done, naming the file.
        context: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// `Result` with relax-build's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Manifest { path, message } => write!(f, "{}: {message}", path.display()),
            Error::ManifestKey { path, key, message } => {
                write!(f, "{}: `{key}`: {message}", path.display())
            }
            Error::Model {
                model,
                key,
                message,
                detail,
            } => {
                write!(f, "model `{model}`")?;
                if let Some(key) = key {
                    write!(f, " (`{key}`)")?;
                }
                write!(f, ": {message}")?;
                if !detail.is_empty() {
                    write!(f, "\n{detail}")?;
                }
                Ok(())
            }
            Error::UnsupportedOperator {
                model,
                key,
                message,
                ..
            } => {
                write!(f, "model `{model}` (`{key}`): {message}")
            }
            Error::Toolchain { message } | Error::HashMismatch { message, .. } => {
                f.write_str(message)
            }
            Error::MissingEnv { variable, hint } => {
                write!(f, "environment variable {variable} is not set; {hint}")
            }
            Error::UnsupportedTarget { target, message } => {
                write!(f, "Cargo target `{target}`: {message}")
            }
            Error::Io { context, source } => write!(f, "{context}: {source}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Wraps an I/O error with what was being done.
pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let context = context.into();
    move |source| Error::Io { context, source }
}
