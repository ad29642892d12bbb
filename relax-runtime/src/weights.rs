//! Model weights: a safetensors file, read into tensors by parameter name, once per
//! loaded model and shared by all its VMs.

use std::collections::HashMap;

use safetensors::{Dtype as StDtype, SafeTensors};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::signature::{format_dims, Dim, ModelSignature};
use crate::tensor::Tensor;

/// Reads every weight the model's functions take from safetensors bytes, checking
/// dtype and shape against the compiled signature; returns, per function, its weights
/// in argument order (a weight several functions take is loaded once per layout: as
/// stored, and transposed for the functions that take it so).
pub(crate) fn load(signature: &ModelSignature, bytes: Option<&[u8]>) -> Result<Vec<Vec<Tensor>>> {
    let wanted: Vec<_> = signature
        .functions
        .iter()
        .flat_map(|function| &function.weights)
        .collect();
    if wanted.is_empty() {
        return Ok(vec![Vec::new(); signature.functions.len()]);
    }
    let error = |message: String| Error::Weights {
        model: signature.name.clone(),
        message,
    };
    let bytes = bytes.ok_or_else(|| {
        error("are missing: the model takes weights but none were embedded".to_string())
    })?;
    let file = SafeTensors::deserialize(bytes)
        .map_err(|cause| error(format!("are not a valid safetensors file: {cause}")))?;
    let mut tensors: HashMap<(&str, bool), Tensor> = HashMap::new();
    for expected in wanted {
        if tensors.contains_key(&(expected.name.as_str(), expected.transpose)) {
            continue;
        }
        let view = file
            .tensor(&expected.name)
            .map_err(|_| error(format!("have no tensor `{}`", expected.name)))?;
        let dtype = dtype_of(view.dtype()).ok_or_else(|| {
            error(format!(
                "tensor `{}` has unsupported dtype {:?}",
                expected.name,
                view.dtype()
            ))
        })?;
        let mut stored = expected.shape.clone();
        if expected.transpose {
            stored.reverse();
        }
        let shape_matches = view.shape().len() == stored.len()
            && (!expected.transpose || stored.len() == 2)
            && stored.iter().zip(view.shape()).all(
                |(dim, &size)| !matches!(dim, Dim::Static(expected) if *expected != size as i64),
            );
        if dtype != expected.dtype || !shape_matches {
            return Err(error(format!(
                "tensor `{}` is {dtype}{:?}, but the model expects {}{}",
                expected.name,
                view.shape(),
                expected.dtype,
                format_dims(&stored)
            )));
        }
        let tensor = if expected.transpose {
            transposed(dtype, view.shape(), view.data())?
        } else {
            Tensor::from_bytes(dtype, view.shape(), view.data())?
        };
        tensors.insert((&expected.name, expected.transpose), tensor);
    }
    Ok(signature
        .functions
        .iter()
        .map(|function| {
            function
                .weights
                .iter()
                .map(|weight| tensors[&(weight.name.as_str(), weight.transpose)].clone())
                .collect()
        })
        .collect())
}

/// The transpose of a 2-D tensor's bytes (`rows x columns` elements of `dtype`).
fn transposed(dtype: DType, shape: &[usize], data: &[u8]) -> Result<Tensor> {
    let (rows, columns) = (shape[0], shape[1]);
    let size = dtype.size_in_bytes();
    if data.len() != rows * columns * size {
        return Tensor::from_bytes(dtype, shape, data);
    }
    let mut out = vec![0u8; data.len()];
    // Blocks of 32 x 32 keep both sides in cache.
    const BLOCK: usize = 32;
    for row_block in (0..rows).step_by(BLOCK) {
        for column_block in (0..columns).step_by(BLOCK) {
            for row in row_block..(row_block + BLOCK).min(rows) {
                for column in column_block..(column_block + BLOCK).min(columns) {
                    let from = (row * columns + column) * size;
                    let to = (column * rows + row) * size;
                    out[to..to + size].copy_from_slice(&data[from..from + size]);
                }
            }
        }
    }
    Tensor::from_bytes(dtype, &[columns, rows], &out)
}

fn dtype_of(dtype: StDtype) -> Option<DType> {
    Some(match dtype {
        StDtype::BOOL => DType::BOOL,
        StDtype::U8 => DType::U8,
        StDtype::I8 => DType::I8,
        StDtype::I16 => DType::I16,
        StDtype::U16 => DType::U16,
        StDtype::F16 => DType::F16,
        StDtype::BF16 => DType::BF16,
        StDtype::I32 => DType::I32,
        StDtype::U32 => DType::U32,
        StDtype::F32 => DType::F32,
        StDtype::F64 => DType::F64,
        StDtype::I64 => DType::I64,
        StDtype::U64 => DType::U64,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// safetensors bytes holding one float32 tensor `w` of shape [2, 3] = 0..6.
    fn file() -> Vec<u8> {
        let data: Vec<u8> = (0..6)
            .flat_map(|value| (value as f32).to_le_bytes())
            .collect();
        let view = safetensors::tensor::TensorView::new(StDtype::F32, vec![2, 3], &data).unwrap();
        safetensors::serialize([("w", view)], &None).unwrap()
    }

    #[test]
    fn a_weight_taken_transposed_by_one_function_stays_as_stored_for_another() {
        let function = |name: &str, shape: &str, transpose: bool| {
            format!(
                r#"{{"name": "{name}", "inputs": [], "outputs": [], "returns_tuple": false,
                "weights": [{{"name": "w", "dtype": "float32", "shape": {shape}, "transpose": {transpose}}}]}}"#
            )
        };
        let json = format!(
            r#"{{"model": "m", "tvm_version": "0.27.0.post1", "target": "{{}}", "functions": [{}, {}]}}"#,
            function("plain", "[2, 3]", false),
            function("transposing", "[3, 2]", true)
        );
        let signature = ModelSignature::from_json("m", &json).unwrap();
        let weights = load(&signature, Some(&file())).unwrap();
        assert_eq!(weights[0][0].shape(), [2, 3]);
        assert_eq!(
            weights[0][0].as_slice::<f32>().unwrap(),
            [0., 1., 2., 3., 4., 5.]
        );
        assert_eq!(weights[1][0].shape(), [3, 2]);
        assert_eq!(
            weights[1][0].as_slice::<f32>().unwrap(),
            [0., 3., 1., 4., 2., 5.]
        );
    }
}
