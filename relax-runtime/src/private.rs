//! What the code relax-build generates uses; not part of the API.

use crate::locate::Hints;

/// The apache-tvm version whose runtime these bindings were written for (used to find
/// the managed toolchain when no generated code says otherwise).
pub const TVM_VERSION: &str = "0.27.0.post1";

/// The Cargo target of this process, as relax-build names it.
pub const CARGO_TARGET: &str = if cfg!(target_arch = "aarch64") {
    "aarch64-unknown-linux-gnu"
} else {
    "x86_64-unknown-linux-gnu"
};

/// A model embedded in the executable by `include_model!`.
#[derive(Debug)]
pub struct EmbeddedModel {
    /// The model's name.
    pub name: &'static str,
    /// The Cargo target it was compiled for.
    pub cargo_target: &'static str,
    /// The apache-tvm version that compiled it.
    pub tvm_version: &'static str,
    /// The runtime libraries' folder relative to the executable's, when known.
    pub runtime_hint: Option<&'static str>,
    /// The signature JSON written by relax-build's driver.
    pub signature_json: &'static str,
    /// The exported library.
    pub library: &'static [u8],
    /// The library's sha256, recorded at build time (lowercase hex).
    pub library_sha256: &'static str,
    /// Safetensors weights bound at load time, when the model has any.
    pub weights: Option<&'static [u8]>,
}

impl EmbeddedModel {
    pub(crate) fn hints(&self) -> Hints<'static> {
        Hints {
            tvm_version: self.tvm_version,
            cargo_target: self.cargo_target,
            relative_to_executable: self.runtime_hint,
        }
    }
}
