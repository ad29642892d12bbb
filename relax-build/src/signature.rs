//! The signature JSON the compile driver writes next to each library.

use std::path::Path;

use serde::Deserialize;

use crate::error::{io, Error, Result};

/// A compiled model's functions.
#[derive(Debug, Clone, Deserialize)]
pub struct Signature {
    /// The model's name.
    pub model: String,
    /// The apache-tvm version that compiled it.
    pub tvm_version: String,
    /// The TVM target, as TVM prints it (JSON).
    pub target: String,
    /// The public Relax functions, sorted by name.
    pub functions: Vec<Function>,
    /// Whether the driver wrote the weights file itself (ONNX initializers kept external).
    #[serde(default)]
    pub weights_written: bool,
    /// What the driver wants the build to show (a preparation step it had to skip).
    #[serde(default)]
    pub warnings: Vec<String>,
}

impl Signature {
    /// Reads a signature JSON written by the driver for `model`.
    pub fn read(model: &str, path: &Path) -> Result<Signature> {
        let bytes = std::fs::read(path).map_err(io(format!("reading {}", path.display())))?;
        serde_json::from_slice(&bytes).map_err(|error| Error::Model {
            model: model.to_string(),
            key: None,
            message: format!("{} is not a valid signature ({error})", path.display()),
            detail: String::new(),
        })
    }

    /// Every weight the functions take, each once, in order of first use.
    pub fn weights(&self) -> Vec<&TensorType> {
        let mut wanted: Vec<&TensorType> = Vec::new();
        for weight in self.functions.iter().flat_map(|function| &function.weights) {
            if !wanted.iter().any(|known| known.name == weight.name) {
                wanted.push(weight);
            }
        }
        wanted
    }
}

/// One public Relax function: caller inputs, trailing weights, outputs.
#[derive(Debug, Clone, Deserialize)]
pub struct Function {
    /// The Relax function's name.
    pub name: String,
    /// The arguments the caller passes.
    pub inputs: Vec<TensorType>,
    /// The trailing arguments bound from the weights.
    pub weights: Vec<TensorType>,
    /// The outputs, one per tuple field.
    pub outputs: Vec<TensorType>,
    /// Whether the function returns a tuple (even of one tensor).
    pub returns_tuple: bool,
}

/// A tensor's name (absent for outputs), dtype and dims.
#[derive(Debug, Clone, Deserialize)]
pub struct TensorType {
    #[serde(default)]
    /// The argument's name (empty for outputs).
    pub name: String,
    /// TVM's dtype name (`float32`).
    pub dtype: String,
    /// The dims.
    pub shape: Vec<Dim>,
    /// A weight the model takes transposed: the weights file holds it as `[shape[1],
    /// shape[0]]`, and relax-runtime transposes it when it loads it.
    #[serde(default)]
    pub transpose: bool,
}

impl TensorType {
    /// The dims the weights file must hold (the transposed ones for a transposed weight).
    pub fn stored_shape(&self) -> Vec<Dim> {
        let mut shape = self.shape.clone();
        if self.transpose {
            shape.reverse();
        }
        shape
    }
}

/// A static size, or the text of a symbolic dim (`batch`) or expression (`n * 2`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    /// A fixed size.
    Static(i64),
    /// A symbolic dim's name or expression.
    Symbolic(String),
}

impl std::fmt::Display for Dim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dim::Static(size) => write!(f, "{size}"),
            Dim::Symbolic(text) => f.write_str(text),
        }
    }
}

/// Formats dims as `[batch, 64]`.
pub fn format_shape(shape: &[Dim]) -> String {
    format!(
        "[{}]",
        shape
            .iter()
            .map(Dim::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}
