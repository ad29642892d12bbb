//! The compiled signature of a model (the JSON relax-build's driver writes next to each
//! library), and the checks that inputs match it before any call crosses the C ABI.

use std::fmt;

use serde::Deserialize;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A compiled model: its name, target and functions.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelSignature {
    /// The model's name.
    #[serde(rename = "model")]
    pub name: String,
    /// The TVM target the library was compiled for (a JSON dict).
    pub target: String,
    /// The public Relax functions.
    pub functions: Vec<FunctionSignature>,
}

/// One Relax function of a model.
#[derive(Debug, Clone, Deserialize)]
pub struct FunctionSignature {
    /// The Relax function's name.
    pub name: String,
    /// Arguments the caller passes.
    pub inputs: Vec<TensorSignature>,
    /// Trailing arguments bound from the model's weights at load time.
    pub weights: Vec<TensorSignature>,
    /// The outputs (one per tuple field).
    pub outputs: Vec<TensorSignature>,
    /// Whether the function returns a tuple (even of one tensor).
    pub returns_tuple: bool,
}

/// A tensor argument or output: name (empty for outputs), dtype and dims.
#[derive(Debug, Clone, Deserialize)]
pub struct TensorSignature {
    /// The argument's name (empty for outputs).
    #[serde(default)]
    pub name: String,
    /// The element type.
    #[serde(deserialize_with = "dtype_from_name")]
    pub dtype: DType,
    /// The dims, outermost first.
    pub shape: Vec<Dim>,
    /// How a weight is taken, relative to the weights file (converted at load).
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

/// How a function takes a weight, relative to the weights file; relax-runtime converts
/// the stored tensor once, when it loads the weights.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WeightLayout {
    /// As stored.
    #[default]
    Stored,
    /// A float32 `[K, N]` matrix packed for the dense kernel: `[ceil(N / 64), K, 64]`.
    Panels,
    /// The same from a matrix stored `[N, K]` (as `nn.Linear` stores its weight).
    TransposedPanels,
    /// A float32 `[K, N]` matrix rounded to bf16 and packed for the bf16 dense kernels:
    /// `[ceil(N / 64), ceil(K / 2), 64]` words of bf16 pairs (`depth` K, `columns` N).
    Bf16Panels,
    /// The same from a matrix stored `[N, K]`.
    Bf16TransposedPanels,
    /// A float32 3x3 convolution kernel in Winograd F(2x2, 3x3) form, `[16, in, out]`:
    /// stored as `[out, in, 3, 3]`.
    Winograd,
    /// The same in Winograd F(4x4, 3x3) form, `[36, in, out]`.
    Winograd4,
    /// A float32 convolution kernel packed in filter panels, `[ceil(out / 64), in, kh,
    /// kw, 64]`: stored as `[out, in, kh, kw]` (`columns` filters).
    FilterPanels,
    /// A float32 convolution kernel rounded to bf16 and packed for the bf16 blocked
    /// convolutions, `[ceil(out / 64), ceil(in / 2), kh, kw, 64]` words of bf16 pairs:
    /// stored as `[out, in, kh, kw]` (`columns` filters, `depth` in).
    Bf16FilterPanels,
    /// A float32 3x3 convolution kernel in Winograd F(2x2, 3x3) form for channel-blocked
    /// tensors, `[16, ceil(out / 64), in, 64]`: stored as `[out, in, 3, 3]` (`columns`
    /// filters).
    BlockedWinograd,
    /// The same in Winograd F(4x4, 3x3) form, `[36, ceil(out / 64), in, 64]`.
    BlockedWinograd4,
    /// A float32 tensor with its last two dims swapped, `[.., b, a]`: stored `[.., a, b]`
    /// (a recurrent layer's `R`, which the recurrent kernel reads transposed).
    Transposed,
}

impl WeightLayout {
    /// The dims stored for a weight taken as `shape` (`columns`: N of a packed one,
    /// `depth`: K of a bf16 one), or None when the dims do not fit the layout.
    pub fn stored_shape(
        self,
        shape: &[Dim],
        columns: Option<i64>,
        depth: Option<i64>,
    ) -> Option<Vec<Dim>> {
        // Whether `panels` panels of 64 hold exactly `columns` columns.
        let holds = |panels: i64, columns: i64| {
            columns > 0 && panels == columns / 64 + i64::from(columns % 64 != 0)
        };
        match (self, shape, columns) {
            (WeightLayout::Stored, _, _) => Some(shape.to_vec()),
            (WeightLayout::Transposed, [outer @ .., b, a], _) => {
                Some(outer.iter().chain([a, b]).cloned().collect())
            }
            (
                WeightLayout::Panels,
                [Dim::Static(panels), depth @ Dim::Static(_), Dim::Static(64)],
                Some(columns),
            ) if holds(*panels, columns) => Some(vec![depth.clone(), Dim::Static(columns)]),
            (
                WeightLayout::TransposedPanels,
                [Dim::Static(panels), depth @ Dim::Static(_), Dim::Static(64)],
                Some(columns),
            ) if holds(*panels, columns) => Some(vec![Dim::Static(columns), depth.clone()]),
            (
                WeightLayout::Bf16Panels | WeightLayout::Bf16TransposedPanels,
                [Dim::Static(panels), Dim::Static(pairs), Dim::Static(64)],
                Some(columns),
            ) if holds(*panels, columns)
                && depth.is_some_and(|depth| depth > 0 && *pairs == (depth + 1) / 2) =>
            {
                let (depth, columns) = (Dim::Static(depth?), Dim::Static(columns));
                Some(if self == WeightLayout::Bf16Panels {
                    vec![depth, columns]
                } else {
                    vec![columns, depth]
                })
            }
            (WeightLayout::Winograd, [Dim::Static(16), channels, filters], _)
            | (WeightLayout::Winograd4, [Dim::Static(36), channels, filters], _) => Some(vec![
                filters.clone(),
                channels.clone(),
                Dim::Static(3),
                Dim::Static(3),
            ]),
            (
                WeightLayout::FilterPanels,
                [Dim::Static(panels), channels, kernel_h, kernel_w, Dim::Static(64)],
                Some(columns),
            ) if holds(*panels, columns) => Some(vec![
                Dim::Static(columns),
                channels.clone(),
                kernel_h.clone(),
                kernel_w.clone(),
            ]),
            (
                WeightLayout::Bf16FilterPanels,
                [Dim::Static(panels), Dim::Static(pairs), kernel_h, kernel_w, Dim::Static(64)],
                Some(columns),
            ) if holds(*panels, columns)
                && depth.is_some_and(|depth| depth > 0 && *pairs == (depth + 1) / 2) =>
            {
                Some(vec![
                    Dim::Static(columns),
                    Dim::Static(depth?),
                    kernel_h.clone(),
                    kernel_w.clone(),
                ])
            }
            (
                WeightLayout::BlockedWinograd,
                [Dim::Static(16), Dim::Static(panels), channels, Dim::Static(64)],
                Some(columns),
            )
            | (
                WeightLayout::BlockedWinograd4,
                [Dim::Static(36), Dim::Static(panels), channels, Dim::Static(64)],
                Some(columns),
            ) if holds(*panels, columns) => Some(vec![
                Dim::Static(columns),
                channels.clone(),
                Dim::Static(3),
                Dim::Static(3),
            ]),
            _ => None,
        }
    }
}

/// One dimension of a compiled shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Static(i64),
    /// A named size (`batch`) that must be equal wherever the name appears.
    Symbolic(String),
    /// A size computed from others (`n * 2`), or unknown (`?`); TVM checks it.
    Expression(String),
}

impl<'de> Deserialize<'de> for Dim {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Dim, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Size(i64),
            Text(String),
        }
        Ok(match Raw::deserialize(deserializer)? {
            Raw::Size(size) => Dim::Static(size),
            Raw::Text(text) if is_plain_name(&text) => Dim::Symbolic(text),
            Raw::Text(text) => Dim::Expression(text),
        })
    }
}

fn dtype_from_name<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<DType, D::Error> {
    let name = String::deserialize(deserializer)?;
    DType::parse(&name).ok_or_else(|| {
        serde::de::Error::custom(format!("dtype {name} is not supported by relax-runtime"))
    })
}

fn is_plain_name(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(size) => write!(f, "{size}"),
            Dim::Symbolic(name) | Dim::Expression(name) => f.write_str(name),
        }
    }
}

/// Formats dims as `[batch, 64]`.
pub(crate) fn format_dims(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims.iter().map(Dim::to_string).collect();
    format!("[{}]", parts.join(", "))
}

fn format_shape(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", parts.join(", "))
}

impl ModelSignature {
    /// Parses the signature JSON relax-build wrote; `model` names it in errors.
    pub fn from_json(model: &str, json: &str) -> Result<ModelSignature> {
        serde_json::from_str(json).map_err(|error| Error::LibraryLoad {
            path: format!("<signature of model `{model}`>").into(),
            message: format!("the signature is not valid: {error}"),
        })
    }

    /// The index of the function called `name`, or an error listing the functions.
    pub fn function_index(&self, name: &str) -> Result<usize> {
        self.functions
            .iter()
            .position(|function| function.name == name)
            .ok_or_else(|| Error::FunctionNotFound {
                model: self.name.clone(),
                function: name.to_string(),
                available: self
                    .functions
                    .iter()
                    .map(|function| function.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl FunctionSignature {
    /// Checks count, dtypes and shapes of `inputs`, binding each symbolic dim on first use.
    pub fn check_inputs(&self, model: &str, inputs: &[&Tensor]) -> Result<()> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::ArgumentCount {
                model: model.to_string(),
                function: self.name.clone(),
                expected: self.inputs.len(),
                found: inputs.len(),
                names: self
                    .inputs
                    .iter()
                    .map(|input| input.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let mut bound: Vec<(&str, i64, &str)> = Vec::new();
        for (expected, tensor) in self.inputs.iter().zip(inputs) {
            if tensor.dtype() != expected.dtype {
                return Err(Error::DTypeMismatch {
                    model: model.to_string(),
                    function: self.name.clone(),
                    argument: expected.name.clone(),
                    expected: expected.dtype,
                    found: tensor.dtype(),
                });
            }
            let shape = tensor.shape();
            let mismatch = |detail: String| Error::ShapeMismatch {
                model: model.to_string(),
                function: self.name.clone(),
                argument: expected.name.clone(),
                expected: format!("{}{detail}", format_dims(&expected.shape)),
                found: format_shape(shape),
            };
            if shape.len() != expected.shape.len() {
                return Err(mismatch(String::new()));
            }
            for (dim, &size) in expected.shape.iter().zip(shape) {
                match dim {
                    Dim::Static(expected_size) if *expected_size != size => {
                        return Err(mismatch(String::new()))
                    }
                    Dim::Symbolic(name) => match bound
                        .iter()
                        .find(|(bound_name, ..)| *bound_name == name)
                    {
                        Some(&(_, value, from)) if value != size => {
                            return Err(mismatch(format!(" with {name} = {value} (from `{from}`)")))
                        }
                        Some(_) => {}
                        None => bound.push((name, size, &expected.name)),
                    },
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add() -> FunctionSignature {
        let input = |name: &str| TensorSignature {
            name: name.to_string(),
            dtype: DType::F32,
            shape: vec![Dim::Symbolic("n".to_string()), Dim::Static(4)],
            layout: WeightLayout::Stored,
            columns: None,
            depth: None,
        };
        FunctionSignature {
            name: "add".to_string(),
            inputs: vec![input("a"), input("b")],
            weights: Vec::new(),
            outputs: Vec::new(),
            returns_tuple: false,
        }
    }

    fn zeros(n: usize, m: usize) -> Tensor {
        Tensor::from_slice(&vec![0f32; n * m], &[n, m]).unwrap()
    }

    #[test]
    fn signatures_parse_from_the_drivers_json() {
        let json = r#"{"model": "pair", "tvm_version": "0.27.0.post1", "target": "{}",
            "functions": [{"name": "f", "inputs": [{"name": "x", "dtype": "float32", "shape": ["n", 4, "n * 2"]}],
            "weights": [], "outputs": [{"dtype": "int64", "shape": []}], "returns_tuple": false}]}"#;
        let signature = ModelSignature::from_json("pair", json).unwrap();
        let function = &signature.functions[0];
        assert_eq!(
            function.inputs[0].shape,
            [
                Dim::Symbolic("n".to_string()),
                Dim::Static(4),
                Dim::Expression("n * 2".to_string())
            ]
        );
        assert_eq!(function.outputs[0].dtype, DType::I64);
        assert_eq!(signature.function_index("f").unwrap(), 0);
        assert_eq!(
            signature.function_index("g").unwrap_err().to_string(),
            "model `pair` has no function `g`; it has: f"
        );
    }

    #[test]
    fn accepts_matching_inputs() {
        add()
            .check_inputs("pair", &[&zeros(3, 4), &zeros(3, 4)])
            .unwrap();
    }

    #[test]
    fn static_dim_mismatch_names_everything() {
        let error = add()
            .check_inputs("pair", &[&zeros(3, 5), &zeros(3, 4)])
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "model `pair`, function `add`, argument `a`: expected shape [n, 4], found [3, 5]"
        );
    }

    #[test]
    fn symbolic_dim_must_agree_across_arguments() {
        let error = add()
            .check_inputs("pair", &[&zeros(3, 4), &zeros(2, 4)])
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "model `pair`, function `add`, argument `b`: expected shape [n, 4] with n = 3 (from `a`), found [2, 4]"
        );
    }

    #[test]
    fn rank_mismatch_is_a_shape_error() {
        let flat = Tensor::from_slice(&[0f32; 4], &[4]).unwrap();
        let error = add()
            .check_inputs("pair", &[&flat, &zeros(1, 4)])
            .unwrap_err();
        assert!(matches!(error, Error::ShapeMismatch { .. }), "{error}");
    }

    #[test]
    fn dtype_mismatch_names_both_types() {
        let ints = Tensor::from_slice(&[0i32; 8], &[2, 4]).unwrap();
        let error = add()
            .check_inputs("pair", &[&zeros(2, 4), &ints])
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "model `pair`, function `add`, argument `b`: expected dtype float32, found int32"
        );
    }

    #[test]
    fn wrong_argument_count_lists_the_names() {
        let error = add().check_inputs("pair", &[&zeros(2, 4)]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "model `pair`, function `add`: expected 2 input(s) (a, b), found 1"
        );
    }
}
