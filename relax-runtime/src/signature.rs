//! The compiled signature of a model, as relax-build writes it into the generated code,
//! and the checks that inputs match it before any call crosses the C ABI.

use std::fmt;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A compiled model: its name, its functions, and where its toolchain's runtime libraries were.
#[derive(Debug)]
pub struct ModelSignature {
    pub name: &'static str,
    /// The TVM target the library was compiled for (a JSON dict).
    pub target: &'static str,
    pub functions: &'static [FunctionSignature],
    /// `:`-separated folders that held `libtvm_ffi.so` / `libtvm_runtime.so` on the
    /// build machine (searched last).
    pub runtime_library_dirs: &'static str,
}

/// One Relax function of a model.
#[derive(Debug)]
pub struct FunctionSignature {
    pub name: &'static str,
    /// Arguments the caller passes.
    pub inputs: &'static [TensorSignature],
    /// Trailing arguments bound from the model's weights by `load()`.
    pub weights: &'static [TensorSignature],
    pub outputs: &'static [TensorSignature],
    /// Whether the function returns a tuple (even of one tensor).
    pub returns_tuple: bool,
}

/// A tensor argument or output: name (empty for outputs), dtype and dims.
#[derive(Debug)]
pub struct TensorSignature {
    pub name: &'static str,
    pub dtype: DType,
    pub shape: &'static [Dim],
}

/// One dimension of a compiled shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    /// A fixed size.
    Static(i64),
    /// A named size (`batch`) that must be equal wherever the name appears.
    Symbolic(&'static str),
    /// A size computed from others (`n * 2`); TVM checks it.
    Expression(&'static str),
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dim::Static(size) => write!(f, "{size}"),
            Dim::Symbolic(name) | Dim::Expression(name) => f.write_str(name),
        }
    }
}

/// Formats a shape as `[batch, 64]`.
pub(crate) fn format_dims(dims: &[Dim]) -> String {
    let parts: Vec<String> = dims.iter().map(Dim::to_string).collect();
    format!("[{}]", parts.join(", "))
}

fn format_shape(shape: &[i64]) -> String {
    let parts: Vec<String> = shape.iter().map(i64::to_string).collect();
    format!("[{}]", parts.join(", "))
}

impl FunctionSignature {
    /// Checks count, dtypes and shapes of `inputs`, binding each symbolic dim on first use.
    pub fn check_inputs(&self, model: &str, inputs: &[&Tensor]) -> Result<()> {
        if inputs.len() != self.inputs.len() {
            return Err(Error::ArgumentCount {
                model: model.to_string(),
                function: self.name.to_string(),
                expected: self.inputs.len(),
                found: inputs.len(),
                names: self
                    .inputs
                    .iter()
                    .map(|input| input.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        let mut bound: Vec<(&str, i64, &str)> = Vec::new();
        for (expected, tensor) in self.inputs.iter().zip(inputs) {
            if tensor.dtype() != expected.dtype {
                return Err(Error::DTypeMismatch {
                    model: model.to_string(),
                    function: self.name.to_string(),
                    argument: expected.name.to_string(),
                    expected: expected.dtype,
                    found: tensor.dtype(),
                });
            }
            let shape = tensor.shape();
            let mismatch = |detail: String| Error::ShapeMismatch {
                model: model.to_string(),
                function: self.name.to_string(),
                argument: expected.name.to_string(),
                expected: format!("{}{detail}", format_dims(expected.shape)),
                found: format_shape(shape),
            };
            if shape.len() != expected.shape.len() {
                return Err(mismatch(String::new()));
            }
            for (dim, &size) in expected.shape.iter().zip(shape) {
                match *dim {
                    Dim::Static(expected_size) if expected_size != size => {
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
                        None => bound.push((name, size, expected.name)),
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

    static ADD: FunctionSignature = FunctionSignature {
        name: "add",
        inputs: &[
            TensorSignature {
                name: "a",
                dtype: DType::F32,
                shape: &[Dim::Symbolic("n"), Dim::Static(4)],
            },
            TensorSignature {
                name: "b",
                dtype: DType::F32,
                shape: &[Dim::Symbolic("n"), Dim::Static(4)],
            },
        ],
        weights: &[],
        outputs: &[],
        returns_tuple: false,
    };

    fn zeros(n: usize, m: usize) -> Tensor {
        Tensor::from_slice(&vec![0f32; n * m], &[n, m]).unwrap()
    }

    #[test]
    fn accepts_matching_inputs() {
        ADD.check_inputs("pair", &[&zeros(3, 4), &zeros(3, 4)])
            .unwrap();
    }

    #[test]
    fn static_dim_mismatch_names_everything() {
        let error = ADD
            .check_inputs("pair", &[&zeros(3, 5), &zeros(3, 4)])
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "model `pair`, function `add`, argument `a`: expected shape [n, 4], found [3, 5]"
        );
    }

    #[test]
    fn symbolic_dim_must_agree_across_arguments() {
        let error = ADD
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
        let error = ADD
            .check_inputs("pair", &[&flat, &zeros(1, 4)])
            .unwrap_err();
        assert!(matches!(error, Error::ShapeMismatch { .. }), "{error}");
    }

    #[test]
    fn dtype_mismatch_names_both_types() {
        let ints = Tensor::from_slice(&[0i32; 8], &[2, 4]).unwrap();
        let error = ADD
            .check_inputs("pair", &[&zeros(2, 4), &ints])
            .unwrap_err();
        assert_eq!(
            error.to_string(),
            "model `pair`, function `add`, argument `b`: expected dtype float32, found int32"
        );
    }

    #[test]
    fn wrong_argument_count_lists_the_names() {
        let error = ADD.check_inputs("pair", &[&zeros(2, 4)]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "model `pair`, function `add`: expected 2 input(s) (a, b), found 1"
        );
    }
}
