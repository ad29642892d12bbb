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
/// in argument order (a weight several functions take is loaded once).
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
    let mut tensors: HashMap<&str, Tensor> = HashMap::new();
    for expected in wanted {
        if tensors.contains_key(expected.name.as_str()) {
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
        let shape_matches = view.shape().len() == expected.shape.len()
            && expected.shape.iter().zip(view.shape()).all(
                |(dim, &size)| !matches!(dim, Dim::Static(expected) if *expected != size as i64),
            );
        if dtype != expected.dtype || !shape_matches {
            return Err(error(format!(
                "tensor `{}` is {dtype}{:?}, but the model expects {}{}",
                expected.name,
                view.shape(),
                expected.dtype,
                format_dims(&expected.shape)
            )));
        }
        tensors.insert(
            &expected.name,
            Tensor::from_bytes(dtype, view.shape(), view.data())?,
        );
    }
    Ok(signature
        .functions
        .iter()
        .map(|function| {
            function
                .weights
                .iter()
                .map(|weight| tensors[weight.name.as_str()].clone())
                .collect()
        })
        .collect())
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
