//! The signature JSON the compile driver writes next to each library.

use serde::Deserialize;

/// A compiled model's functions.
#[derive(Debug, Clone, Deserialize)]
pub struct Signature {
    pub model: String,
    pub tvm_version: String,
    pub target: String,
    pub functions: Vec<Function>,
    /// Whether the driver wrote the weights file itself (ONNX initializers kept external).
    #[serde(default)]
    pub weights_written: bool,
}

/// One public Relax function: caller inputs, trailing weights, outputs.
#[derive(Debug, Clone, Deserialize)]
pub struct Function {
    pub name: String,
    pub inputs: Vec<TensorType>,
    pub weights: Vec<TensorType>,
    pub outputs: Vec<TensorType>,
    pub returns_tuple: bool,
}

/// A tensor's name (absent for outputs), dtype and dims.
#[derive(Debug, Clone, Deserialize)]
pub struct TensorType {
    #[serde(default)]
    pub name: String,
    pub dtype: String,
    pub shape: Vec<Dim>,
}

/// A static size, or the text of a symbolic dim (`batch`) or expression (`n * 2`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum Dim {
    Static(i64),
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
