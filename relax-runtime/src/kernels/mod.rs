//! relax-runtime's kernels: matrix multiplications, convolutions, softmax and layer
//! normalization that compiled models call instead of TVM's untuned loops.
//!
//! relax-build's driver rewrites a model's matmuls and convolutions into
//! `R.call_dps_packed("relax_runtime.<kernel>", ...)`; the functions below are
//! registered under those names (`TVMFFIFunctionCreate` + `TVMFFIFunctionSetGlobal`)
//! when the TVM runtime is loaded, before any model. They compute with the `gemm` crate
//! (AVX-512, AVX2 or NEON, chosen at run time) or their own tiles: for weights
//! relax-runtime converted at load (`panels`, `winograd`, `filter_panels`), for
//! convolutions on channel-blocked tensors (`blocked`), and, on AVX-512 CPUs, for
//! convolutions' products (`strips`); split over TVM's thread pool.
//!
//! | name | arguments (outputs last) |
//! |---|---|
//! | `relax_runtime.dense` | `x[.., K], w, transpose_w, epilogue, out[.., N]` |
//! | | `w` may be `[ceil(N / 64), K, 64]` instead: packed in column panels at load (see `panels`) |
//! | `relax_runtime.dense_bias` | `x[.., K], w, bias[N], transpose_w, epilogue, out[.., N]` |
//! | `relax_runtime.batch_matmul` | `a[B.., M, K], b[B.., K, N] or [K, N], transpose_b, alpha, out[B.., M, N]` |
//! | `relax_runtime.conv2d` | `x[N, C, H, W], w[O, C/g, KH, KW], strides(2), padding(4), dilation(2), groups, epilogue, out` |
//! | | `w` may be `[16, C, O]` or `[36, C, O]` instead: a 3x3 kernel in Winograd F(2x2, 3x3) or F(4x4, 3x3) form (stride 1, no dilation, one group; relax-runtime transforms such weights when it loads them) |
//! | | or `[ceil(O / 64), C, KH, KW, 64]`: packed in filter panels at load (one group; see `filter_panels`) |
//! | | `x` `[N, C / 16, H, W, 16]` (or NCHW) and `out` `[N, O / 16, OH, OW, 16]`: channel-blocked, the kernel in filter panels (one group; see `blocked`) |
//! | | or, blocked, `w` `[16 or 36, ceil(O / 64), C, 64]`: a 3x3 kernel in blocked Winograd F(2x2, 3x3) or F(4x4, 3x3) form (stride 1, a blocked `x`; see `blocked_winograd`) |
//! | `relax_runtime.conv2d_bias` | as `conv2d`, with `bias[O]` after `w` |
//! | `relax_runtime.conv2d_bn` | as `conv2d`, with `gamma[O], beta[O], mean[O], variance[O], epsilon` after `w` |
//! | `relax_runtime.<dense or conv2d kernel>_add` | as the kernel, with `residual` (the output's shape) before `out`, added before the activation |
//! | `relax_runtime.softmax` | `x, out`: along the last axis |
//! | `relax_runtime.softmax_add` | `x, mask, out`: `softmax(x + mask)`, `mask` of x's rank broadcast where its dims are 1 |
//! | `relax_runtime.layer_norm` | `x[.., N], gamma[N], beta[N], epsilon, out` |
//! | `relax_runtime.reduce_trailing` | `x, axes, mean, out`: sum (mean when `mean` is 1) over the last `axes` axes |
//! | `relax_runtime.recurrent` | an RNN, GRU or LSTM layer's steps over its input projection (see `recurrent`) |
//!
//! `w` is `[N, K]` with `transpose_w = 1` (`x · wᵀ`, as `nn.Linear` stores it), else
//! `[K, N]`; `epilogue` is [`Epilogue`]'s code. Every argument is checked (dtype,
//! shapes, contiguity) before any memory is touched: a mismatch is a TVM error, not UB.

mod blocked;
mod blocked_winograd;
mod caches;
mod conv;
mod conv_operands;
mod depthwise;
mod edges;
mod epilogue;
mod filter_panels;
mod gemm;
mod panels;
mod parallel;
mod recurrent;
mod rows;
mod scratch;
mod simd;
mod strips;
mod tensor;
mod winograd;

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::api::Api;
use crate::globals;
use crate::sys;

pub(crate) use blocked_winograd::transform_weights as blocked_winograd_weights;
pub(crate) use epilogue::Epilogue;
pub(crate) use panels::{pack as pack_panels, PANEL};
pub(crate) use tensor::Arguments;
pub(crate) use winograd::{transform_weights as winograd_weights, Tile as WinogradTile};

/// A kernel: reads its arguments, writes its outputs, or says why it cannot.
type Kernel = fn(&Arguments<'_>) -> Result<(), String>;

/// The registered kernels, by global name.
const KERNELS: &[(&str, Kernel)] = &[
    ("relax_runtime.dense", gemm::dense),
    ("relax_runtime.dense_bias", gemm::dense_bias),
    ("relax_runtime.dense_add", gemm::dense_add),
    ("relax_runtime.dense_bias_add", gemm::dense_bias_add),
    ("relax_runtime.batch_matmul", gemm::batch_matmul),
    ("relax_runtime.conv2d", conv::conv2d),
    ("relax_runtime.conv2d_bias", conv::conv2d_bias),
    ("relax_runtime.conv2d_bn", conv::conv2d_bn),
    ("relax_runtime.conv2d_add", conv::conv2d_add),
    ("relax_runtime.conv2d_bias_add", conv::conv2d_bias_add),
    ("relax_runtime.conv2d_bn_add", conv::conv2d_bn_add),
    ("relax_runtime.softmax", rows::softmax),
    ("relax_runtime.softmax_add", rows::softmax_add),
    ("relax_runtime.layer_norm", rows::layer_norm),
    ("relax_runtime.reduce_trailing", rows::reduce_trailing),
    ("relax_runtime.recurrent", recurrent::recurrent),
];

/// The `safe_call` of every kernel: `handle` points to the kernel's entry of [`KERNELS`].
unsafe extern "C" fn call_kernel(
    handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    _result: *mut sys::TVMFFIAny,
) -> i32 {
    // SAFETY: `register` passed a pointer into the static KERNELS table as the handle
    // (never null: tvm-ffi passes its own object instead of a null handle).
    let (name, kernel) = unsafe { *handle.cast::<(&str, Kernel)>() };
    // SAFETY: TVM passes `count` valid argument values that outlive the call.
    let args = unsafe { globals::arguments(args, count) };
    let outcome = catch_unwind(AssertUnwindSafe(|| kernel(&Arguments::new(name, args))));
    let (kind, message) = match outcome {
        Ok(Ok(())) => return 0,
        Ok(Err(message)) => ("ValueError", message),
        Err(_) => ("InternalError", format!("{name} panicked")),
    };
    globals::raise(crate::api::loaded(), kind, &message);
    -1
}

/// Registers every kernel as a global function of the loaded runtime.
pub(crate) fn register(api: &Api) -> Result<(), String> {
    for entry in KERNELS {
        let handle = (entry as *const (&str, Kernel)).cast_mut().cast::<c_void>();
        // SAFETY: the handle points into a static table, as `call_kernel` reads it.
        unsafe { globals::set_global(api, entry.0, handle, call_kernel)? };
    }
    Ok(())
}
