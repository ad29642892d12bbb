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
    /// How a weight the model takes differs from the weights file's tensor.
    #[serde(default)]
    pub layout: WeightLayout,
    /// A weight packed in panels: the matrix's N (the panels pad it to a multiple of 64).
    #[serde(default)]
    pub columns: Option<i64>,
    /// A weight packed in bf16 panels: the matrix's K (the panels hold `ceil(K / 2)` rows
    /// of pairs).
    #[serde(default)]
    pub depth: Option<i64>,
}

/// How the model takes a weight, relative to the weights file (relax-runtime converts
/// it once, when it loads the weights).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightLayout {
    /// As stored.
    #[default]
    Stored,
    /// A `[K, N]` matrix packed for the dense kernel, `[ceil(N / 64), K, 64]`: the file
    /// holds `[K, columns]`.
    Panels,
    /// The same from a matrix the file holds as `[columns, K]`.
    TransposedPanels,
    /// A `[K, N]` matrix packed for the bf16 dense kernels, `[ceil(N / 64), ceil(K / 2),
    /// 64]` words of bf16 pairs: the file holds float32 `[depth, columns]`.
    Bf16Panels,
    /// The same from a matrix the file holds as `[columns, depth]`.
    Bf16TransposedPanels,
    /// A 3x3 convolution kernel in Winograd F(2x2, 3x3) form, `[16, in, out]`: the file
    /// holds `[out, in, 3, 3]`.
    Winograd,
    /// The same in Winograd F(4x4, 3x3) form, `[36, in, out]`.
    Winograd4,
    /// A convolution kernel packed in filter panels, `[ceil(out / 64), in, kh, kw, 64]`:
    /// the file holds `[columns, in, kh, kw]` (OIHW, `columns` filters).
    FilterPanels,
    /// A convolution kernel packed for the bf16 blocked convolutions, `[ceil(out / 64),
    /// ceil(in / 2), kh, kw, 64]` words of bf16 pairs: the file holds float32 `[columns,
    /// depth, kh, kw]` (OIHW).
    Bf16FilterPanels,
    /// A 3x3 convolution kernel in Winograd F(2x2, 3x3) form for channel-blocked tensors,
    /// `[16, ceil(out / 64), in, 64]`: the file holds `[columns, in, 3, 3]`.
    BlockedWinograd,
    /// The same in Winograd F(4x4, 3x3) form, `[36, ceil(out / 64), in, 64]`.
    BlockedWinograd4,
    /// A tensor with its last two dims swapped, `[.., b, a]`: the file holds `[.., a, b]`
    /// (a recurrent layer's `R`).
    Transposed,
}

impl TensorType {
    /// The dims the weights file must hold.
    pub fn stored_shape(&self) -> Vec<Dim> {
        match self.layout {
            WeightLayout::Stored => self.shape.clone(),
            WeightLayout::Panels | WeightLayout::TransposedPanels => {
                let ([_, depth, _], Some(columns)) = (self.shape.as_slice(), self.columns) else {
                    return self.shape.clone();
                };
                let (depth, columns) = (depth.clone(), Dim::Static(columns));
                if self.layout == WeightLayout::Panels {
                    vec![depth, columns]
                } else {
                    vec![columns, depth]
                }
            }
            WeightLayout::Bf16Panels | WeightLayout::Bf16TransposedPanels => {
                let (Some(columns), Some(depth)) = (self.columns, self.depth) else {
                    return self.shape.clone();
                };
                let (depth, columns) = (Dim::Static(depth), Dim::Static(columns));
                if self.layout == WeightLayout::Bf16Panels {
                    vec![depth, columns]
                } else {
                    vec![columns, depth]
                }
            }
            WeightLayout::Winograd | WeightLayout::Winograd4 => match self.shape.as_slice() {
                [_, channels, filters] => vec![
                    filters.clone(),
                    channels.clone(),
                    Dim::Static(3),
                    Dim::Static(3),
                ],
                other => other.to_vec(),
            },
            WeightLayout::FilterPanels => match (self.shape.as_slice(), self.columns) {
                ([_, channels, kernel_h, kernel_w, _], Some(columns)) => vec![
                    Dim::Static(columns),
                    channels.clone(),
                    kernel_h.clone(),
                    kernel_w.clone(),
                ],
                (other, _) => other.to_vec(),
            },
            WeightLayout::Bf16FilterPanels => {
                match (self.shape.as_slice(), self.columns, self.depth) {
                    ([_, _, kernel_h, kernel_w, _], Some(columns), Some(depth)) => vec![
                        Dim::Static(columns),
                        Dim::Static(depth),
                        kernel_h.clone(),
                        kernel_w.clone(),
                    ],
                    (other, _, _) => other.to_vec(),
                }
            }
            WeightLayout::Transposed => match self.shape.as_slice() {
                [outer @ .., b, a] => outer.iter().chain([a, b]).cloned().collect(),
                other => other.to_vec(),
            },
            WeightLayout::BlockedWinograd | WeightLayout::BlockedWinograd4 => {
                match (self.shape.as_slice(), self.columns) {
                    ([_, _, channels, _], Some(columns)) => vec![
                        Dim::Static(columns),
                        channels.clone(),
                        Dim::Static(3),
                        Dim::Static(3),
                    ],
                    (other, _) => other.to_vec(),
                }
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn weight(shape: &str, layout: &str) -> TensorType {
        serde_json::from_str(&format!(
            r#"{{"name": "w", "dtype": "float32", "shape": {shape}, "layout": "{layout}"}}"#
        ))
        .unwrap()
    }

    #[test]
    fn the_weights_file_holds_the_stored_layout() {
        let dims = |values: &[i64]| values.iter().map(|&v| Dim::Static(v)).collect::<Vec<_>>();
        assert_eq!(weight("[2, 3]", "stored").stored_shape(), dims(&[2, 3]));
        let packed = |layout: &str| -> TensorType {
            serde_json::from_str(&format!(
                r#"{{"name": "w", "dtype": "float32", "shape": [2, 384, 64], "layout": "{layout}", "columns": 100}}"#
            ))
            .unwrap()
        };
        assert_eq!(packed("panels").stored_shape(), dims(&[384, 100]));
        assert_eq!(
            packed("transposed_panels").stored_shape(),
            dims(&[100, 384])
        );
        let bf16 = |layout: &str| -> TensorType {
            serde_json::from_str(&format!(
                r#"{{"name": "w", "dtype": "float32", "shape": [2, 192, 64], "layout": "{layout}", "columns": 100, "depth": 383}}"#
            ))
            .unwrap()
        };
        assert_eq!(bf16("bf16_panels").stored_shape(), dims(&[383, 100]));
        assert_eq!(
            bf16("bf16_transposed_panels").stored_shape(),
            dims(&[100, 383])
        );
        assert_eq!(
            weight("[16, 64, 128]", "winograd").stored_shape(),
            dims(&[128, 64, 3, 3])
        );
        assert_eq!(
            weight("[36, 64, 128]", "winograd4").stored_shape(),
            dims(&[128, 64, 3, 3])
        );
        let conv: TensorType = serde_json::from_str(
            r#"{"name": "w", "dtype": "float32", "shape": [3, 64, 3, 3, 64], "layout": "filter_panels", "columns": 130}"#,
        )
        .unwrap();
        assert_eq!(conv.stored_shape(), dims(&[130, 64, 3, 3]));
        let bf16_conv: TensorType = serde_json::from_str(
            r#"{"name": "w", "dtype": "float32", "shape": [3, 32, 3, 3, 64], "layout": "bf16_filter_panels", "columns": 130, "depth": 64}"#,
        )
        .unwrap();
        assert_eq!(bf16_conv.stored_shape(), dims(&[130, 64, 3, 3]));
        let blocked_winograd: TensorType = serde_json::from_str(
            r#"{"name": "w", "dtype": "float32", "shape": [16, 3, 64, 64], "layout": "blocked_winograd", "columns": 130}"#,
        )
        .unwrap();
        assert_eq!(blocked_winograd.stored_shape(), dims(&[130, 64, 3, 3]));
        let blocked_winograd4: TensorType = serde_json::from_str(
            r#"{"name": "w", "dtype": "float32", "shape": [36, 3, 64, 64], "layout": "blocked_winograd4", "columns": 130}"#,
        )
        .unwrap();
        assert_eq!(blocked_winograd4.stored_shape(), dims(&[130, 64, 3, 3]));
        let transposed: TensorType = serde_json::from_str(
            r#"{"name": "r", "dtype": "float32", "shape": [2, 128, 512], "layout": "transposed"}"#,
        )
        .unwrap();
        assert_eq!(transposed.stored_shape(), dims(&[2, 512, 128]));
        let plain: TensorType =
            serde_json::from_str(r#"{"name": "w", "dtype": "float32", "shape": [4]}"#).unwrap();
        assert_eq!(plain.layout, WeightLayout::Stored);
    }
}
