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

/// What `include_model!` embeds of a model: plain data, safe to build, and loadable
/// only once [`EmbeddedModel::new`] (an `unsafe fn`) vouches for it.
#[derive(Debug)]
pub struct EmbeddedParts {
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

/// A model embedded in the executable by `include_model!`, which the safe
/// `Session::load_embedded` loads: its library's native code runs then, so only
/// `unsafe` code can make one (the generated code, whose `// SAFETY:` comment says why
/// the bytes are relax-build's library).
///
/// Safe code can neither call [`EmbeddedModel::new`]:
///
/// ```compile_fail,E0133
/// use relax_runtime::__private::{EmbeddedModel, EmbeddedParts};
/// static ANY_BYTES: EmbeddedModel = EmbeddedModel::new(EmbeddedParts {
///     name: "m",
///     cargo_target: "x86_64-unknown-linux-gnu",
///     tvm_version: "0.27.0.post1",
///     runtime_hint: None,
///     signature_json: "{}",
///     library: b"\x7fELF any code",
///     library_sha256: "",
///     weights: None,
/// });
/// ```
///
/// nor build one field by field:
///
/// ```compile_fail,E0451
/// use relax_runtime::__private::{EmbeddedModel, EmbeddedParts};
/// static ANY_BYTES: EmbeddedModel = EmbeddedModel {
///     parts: EmbeddedParts {
///         name: "m",
///         cargo_target: "x86_64-unknown-linux-gnu",
///         tvm_version: "0.27.0.post1",
///         runtime_hint: None,
///         signature_json: "{}",
///         library: b"\x7fELF any code",
///         library_sha256: "",
///         weights: None,
///     },
/// };
/// ```
#[derive(Debug)]
pub struct EmbeddedModel {
    parts: EmbeddedParts,
}

impl EmbeddedModel {
    /// A model that `Session::load_embedded` may load.
    ///
    /// # Safety
    ///
    /// Loading it runs `parts.library` as native code. The library must be the one
    /// relax-build compiled for this model, for `parts.cargo_target` and for
    /// `parts.signature_json`, and `parts.library_sha256` the sha256 relax-build recorded
    /// of it (the bytes are checked against it before they are loaded, which guards
    /// against damage, not against a library from elsewhere with its own hash).
    pub const unsafe fn new(parts: EmbeddedParts) -> EmbeddedModel {
        EmbeddedModel { parts }
    }

    /// What the model embeds.
    pub(crate) fn parts(&self) -> &EmbeddedParts {
        &self.parts
    }

    pub(crate) fn hints(&self) -> Hints<'static> {
        Hints {
            tvm_version: self.parts.tvm_version,
            cargo_target: self.parts.cargo_target,
            relative_to_executable: self.parts.runtime_hint,
        }
    }
}
