//! `relax_rpc.time_model`: the server command that loads an uploaded model with
//! relax-runtime (its weights packed as an app's `Model::load()` packs them) and times
//! its functions on inputs of the requested shapes, on the device.
//!
//! The request is JSON: `{"library": "m.so", "signature": "m.json", "weights": null or
//! "m.safetensors", "dims": {"batch": 8, ...} (other symbolic dims are 1), "warmup": 2, "repeat": 10}` (file names
//! in the session's folder, as uploaded). The answer is JSON: `{"model", "target",
//! "functions": [{"name", "inputs": [[dims]...], "runs_us": [...]}]}`. A `repeat` or
//! `warmup` over the server's `--max-repeat` is refused before anything is loaded.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use relax_runtime::signature::{Dim, TensorSignature};
use relax_runtime::{DType, Device, Session, Tensor};
use serde::Deserialize;
use serde_json::json;

/// The command's global function name.
pub const COMMAND: &str = "relax_rpc.time_model";

/// The largest `repeat` and `warmup` a request may ask for (`--max-repeat`).
static MAX_REPEAT: AtomicUsize = AtomicUsize::new(crate::limits::DEFAULT_MAX_REPEAT);

/// Sets the largest `repeat` and `warmup` a request may ask for.
pub fn set_max_repeat(max: usize) {
    MAX_REPEAT.store(max, Ordering::Relaxed);
}

#[derive(Deserialize)]
struct Request {
    library: String,
    signature: String,
    weights: Option<String>,
    #[serde(default)]
    dims: BTreeMap<String, i64>,
    warmup: usize,
    repeat: usize,
}

/// The command (see the module docs).
pub fn time_model(request: &str) -> Result<String, String> {
    let request: Request = serde_json::from_str(request)
        .map_err(|error| format!("a malformed {COMMAND} request: {error}"))?;
    check_counts(&request, MAX_REPEAT.load(Ordering::Relaxed))?;
    let library = relax_runtime::rpc::session_path(&request.library)?;
    let signature_path = relax_runtime::rpc::session_path(&request.signature)?;
    let signature = std::fs::read_to_string(&signature_path)
        .map_err(|error| format!("reading the uploaded {}: {error}", request.signature))?;
    let weights = match &request.weights {
        Some(name) => Some(
            std::fs::read(relax_runtime::rpc::session_path(name)?)
                .map_err(|error| format!("reading the uploaded {name}: {error}"))?,
        ),
        None => None,
    };
    // SAFETY: the library is what the client uploaded to be run: running a client's
    // code is what an RPC device server is for (run it on a device you test on).
    let session =
        unsafe { Session::load_file(&library, &signature, weights.as_deref(), Device::cpu()) }
            .map_err(|error| error.to_string())?;
    let mut functions = Vec::new();
    for function in &session.signature().functions {
        let shapes = function
            .inputs
            .iter()
            .map(|input| concrete_shape(input, &request.dims, &function.name))
            .collect::<Result<Vec<_>, _>>()?;
        let inputs = function
            .inputs
            .iter()
            .zip(&shapes)
            .map(|(input, shape)| sample_tensor(input.dtype, shape))
            .collect::<Result<Vec<_>, _>>()?;
        let borrowed: Vec<&Tensor> = inputs.iter().collect();
        let call = || {
            session
                .call(&function.name, &borrowed)
                .map_err(|error| error.to_string())
        };
        for _ in 0..request.warmup {
            call()?;
        }
        let mut runs_us = Vec::with_capacity(request.repeat);
        for _ in 0..request.repeat {
            let started = Instant::now();
            call()?;
            runs_us.push(started.elapsed().as_secs_f64() * 1e6);
        }
        functions.push(json!({"name": function.name, "inputs": shapes, "runs_us": runs_us}));
    }
    let signature = session.signature();
    Ok(
        json!({"model": signature.name, "target": signature.target, "functions": functions})
            .to_string(),
    )
}

/// Refuses a `repeat` of 0 and a `repeat` or `warmup` over `max`, before anything is
/// loaded or allocated.
fn check_counts(request: &Request, max: usize) -> Result<(), String> {
    if request.repeat == 0 {
        return Err("repeat must be at least 1".to_string());
    }
    for (name, count) in [("repeat", request.repeat), ("warmup", request.warmup)] {
        if count > max {
            return Err(format!(
                "{COMMAND}: {name} {count} is over this server's limit of {max} runs; ask for \
                 fewer, or start relax-rpc-server with a larger --max-repeat"
            ));
        }
    }
    Ok(())
}

/// The largest input made for a run (4 GiB): larger dims are refused, not allocated.
const MAX_INPUT_BYTES: usize = 1 << 32;

/// The size of a symbolic dim the request does not give.
pub const DEFAULT_DIM: i64 = 1;

/// The dims of `input`, its symbolic ones from `dims` (else DEFAULT_DIM).
fn concrete_shape(
    input: &TensorSignature,
    dims: &BTreeMap<String, i64>,
    function: &str,
) -> Result<Vec<usize>, String> {
    input
        .shape
        .iter()
        .map(|dim| {
            let size = match dim {
                Dim::Static(size) => *size,
                Dim::Symbolic(name) => dims.get(name).copied().unwrap_or(DEFAULT_DIM),
                Dim::Expression(text) => {
                    return Err(format!(
                        "input `{}` of `{function}` has a dim computed as `{text}`, which cannot be chosen",
                        input.name
                    ))
                }
            };
            usize::try_from(size).map_err(|_| format!("input `{}` of `{function}`: dim {size} is negative", input.name))
        })
        .collect()
}

/// A tensor of `shape` with reproducible values: floats in [0, 1), integers 0 or 1
/// (an index that is always in range), false for booleans.
fn sample_tensor(dtype: DType, shape: &[usize]) -> Result<Tensor, String> {
    let count = shape
        .iter()
        .try_fold(1usize, |count, &dim| count.checked_mul(dim))
        .ok_or("the input's shape is too large")?;
    let bytes_per = dtype.size_in_bytes();
    let bytes = count
        .checked_mul(bytes_per)
        .filter(|&bytes| bytes <= MAX_INPUT_BYTES)
        .ok_or_else(|| {
            format!(
                "an input of shape {shape:?} is over {MAX_INPUT_BYTES} bytes: choose smaller dims"
            )
        })?;
    let mut data = vec![0u8; bytes];
    let mut state = 0x2545_f491_u32;
    for element in data.chunks_exact_mut(bytes_per) {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        let unit = f64::from(state >> 8) / f64::from(1u32 << 24);
        if dtype == DType::F32 {
            element.copy_from_slice(&(unit as f32).to_le_bytes());
        } else if dtype == DType::F64 {
            element.copy_from_slice(&unit.to_le_bytes());
        } else if dtype.is_integer() {
            // 0 or 1 in the lowest byte (little-endian): a valid index of any dim.
            element[0] = (state >> 31) as u8;
        }
        // bool and the other floats (float16, bfloat16, float8): zero, a valid value of each.
    }
    Tensor::from_bytes(dtype, shape, &data).map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests;
