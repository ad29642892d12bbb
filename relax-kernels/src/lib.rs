//! relax-cargo's compute kernels: matrix multiplications, convolutions, recurrent layers,
//! softmax and layer normalization that models compiled by relax-build call instead of
//! TVM's untuned loops. Pure Rust over slices and shapes: no TVM, no FFI.
//!
//! relax-runtime adapts TVM's arguments to [`Argument`]s and registers every entry of
//! [`KERNELS`] as a TVM global, run on its thread pool through a [`Launch`]; a test or
//! a benchmark calls the same kernels on plain threads ([`threads`]):
//!
//! ```
//! use relax_kernels::{kernel, threads, Argument, Arguments};
//!
//! // softmax over the last axis of a 2x3 tensor
//! let x = [1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0];
//! let mut out = [0f32; 6];
//! let args = [
//!     Argument::input(&x, &[2, 3]).unwrap(),
//!     Argument::output(&mut out, &[2, 3]).unwrap(),
//! ];
//! let softmax = kernel("relax_runtime.softmax").unwrap();
//! softmax(&Arguments::new("relax_runtime.softmax", &args, threads::<2>)).unwrap();
//! assert!((out[3] - 1.0 / 3.0).abs() < 1e-6);
//! ```
//!
//! ## Safety and threads
//! The API is safe: an [`Argument`] is made from a slice that must hold its shape's
//! elements, an output from a `&mut` slice, so that an output cannot also reach the
//! kernel as another argument:
//!
//! ```compile_fail
//! use relax_kernels::Argument;
//! let mut buffer = [0f32; 4];
//! let output = Argument::output(&mut buffer, &[4]).unwrap();
//! let input = Argument::input(&buffer, &[4]).unwrap(); // `buffer` is borrowed mutably
//! let _both = [output, input];
//! ```
//!
//! nor twice (an `Argument` is not `Clone`):
//!
//! ```compile_fail
//! use relax_kernels::Argument;
//! let mut buffer = [0f32; 4];
//! let output = Argument::output(&mut buffer, &[4]).unwrap();
//! let _twice = [output.clone(), output];
//! ```
//!
//! A runtime passing its own buffers uses the `unsafe` [`Argument::from_raw`], whose
//! contract says the same. `Argument` and `Arguments` are neither `Send` nor `Sync`
//! (they hold borrowed views): build them on the thread that calls the kernel. The
//! kernels are plain functions, called from any number of threads at once
//! (`tests/threads.rs`); a [`Launch`] splits one call's work.
//!
//! ## Layout
//! One module per algorithm family (`gemm`, `conv`, `winograd`, `blocked`,
//! `blocked_winograd`, `depthwise`, `blocked_depthwise`, `direct`, `filter_panels`, `strips`,
//! `rows`, `recurrent`, `resize`, `layout`), over leaves for the shared pieces: `simd`
//! (instruction-set dispatch: AVX-512, AVX2 + FMA, or portable), `epilogue`, `panels`,
//! `parallel`, `scratch`, `edges`, `caches`, `tensor`, `amx` (Intel's tile registers:
//! permission, configuration, instructions).
//! Each tile is tested against the portable path and a naive loop. Per-layer figures:
//! `cargo bench -p relax-kernels` (see `benches/layers.rs`).
//!
//! ## The kernels
//!
//! relax-build's driver rewrites a model's matmuls and convolutions into
//! `R.call_dps_packed("relax_runtime.<kernel>", ...)`; relax-runtime registers the
//! kernels under those names when the TVM runtime is loaded, before any model. They
//! compute with the `gemm` crate (AVX-512, AVX2 or NEON, chosen at run time) or their own tiles: for weights
//! relax-runtime converted at load ([`weights`]: `panels`, `winograd`, `filter_panels`), for
//! convolutions on channel-blocked tensors (`blocked`), and, on AVX-512 CPUs, for
//! convolutions' products (`strips`); split over the [`Launch`]'s tasks.
//!
//! | name | arguments (outputs last) |
//! |---|---|
//! | `relax_runtime.dense` | `x[.., K], w, transpose_w, epilogue, out[.., N]` |
//! | | `w` may be `[ceil(N / 64), K, 64]` instead: packed in column panels at load (see `panels`) |
//! | `relax_runtime.dense_bias` | `x[.., K], w, bias[N], transpose_w, epilogue, out[.., N]` |
//! | `relax_runtime.dense_bf16` (and `_bias`, `_add`, `_bias_add`) | as `dense` with `w[ceil(N / 64), ceil(K / 2), 64]` and `transpose_w = 0`: in bf16 with float32 sums, `w` packed in panels of bf16 pairs at load (a model declared with `precision = "bf16"`; see `bf16_panels`) |
//! | `relax_runtime.batch_matmul` | `a[B.., M, K], b[B.., K, N] or [K, N], transpose_b, alpha, out[B.., M, N]` |
//! | `relax_runtime.conv2d` | `x[N, C, H, W], w[O, C/g, KH, KW], strides(2), padding(4), dilation(2), groups, epilogue, out` |
//! | | `w` may be `[16, C, O]` or `[36, C, O]` instead: a 3x3 kernel in Winograd F(2x2, 3x3) or F(4x4, 3x3) form (stride 1, no dilation, one group; relax-runtime transforms such weights when it loads them) |
//! | | or `[ceil(O / 64), C, KH, KW, 64]`: packed in filter panels at load (one group; see `filter_panels`) |
//! | | `x` `[N, C / 16, H, W, 16]` (or NCHW) and `out` `[N, O / 16, OH, OW, 16]`: channel-blocked, the kernel in filter panels (one group; see `blocked`) |
//! | | or, blocked `out`, an NCHW `x` and an OIHW `w` of one group (a network's stem: see `direct`) |
//! | | or, blocked, `w` `[16 or 36, ceil(O / 64), C, 64]`: a 3x3 kernel in blocked Winograd F(2x2, 3x3) or F(4x4, 3x3) form (stride 1, a blocked `x`; see `blocked_winograd`) |
//! | | or, blocked, `w` `[C, 1, KH, KW]` with `groups = C = O`: a depthwise convolution (a blocked `x`; see `blocked_depthwise`) |
//! | `relax_runtime.conv2d_bf16` (and `_bias`, `_bn`, `_add`, `_bias_add`, `_bn_add`) | as `conv2d` on blocked `x` and `out` with `w[ceil(O / 64), C / 2, KH, KW, 64]`, one group: in bf16 with float32 sums, `w` packed in filter panels of bf16 pairs at load (a model declared with `precision = "bf16"`; see `blocked::bf16`) |
//! | `relax_runtime.conv2d_bias` | as `conv2d`, with `bias[O]` after `w` |
//! | `relax_runtime.conv2d_bn` | as `conv2d`, with `gamma[O], beta[O], mean[O], variance[O], epsilon` after `w` |
//! | `relax_runtime.<dense or conv2d kernel>_add` | as the kernel, with `residual` (the output's shape) before `out`, added before the activation |
//! | `relax_runtime.conv2d_transpose` | `x[N, C, H, W], w[C, F/g, KH, KW], strides(2), padding(4), dilation(2), groups, epilogue, out[N, F, OH, OW]`: ONNX's ConvTranspose, the output padding read from `out`'s shape (see `conv_transpose`) |
//! | `relax_runtime.conv2d_transpose_bias` | as `conv2d_transpose`, with `bias[F]` after `w` |
//! | `relax_runtime.softmax` | `x, out`: along the last axis |
//! | `relax_runtime.softmax_add` | `x, mask, out`: `softmax(x + mask)`, `mask` of x's rank broadcast where its dims are 1 |
//! | `relax_runtime.layer_norm` | `x[.., N], gamma[N], beta[N], epsilon, out` |
//! | `relax_runtime.reduce_trailing` | `x, axes, kind, out`: sum (`kind` 0), mean (1), max (2) or min (3) over the last `axes` axes |
//! | `relax_runtime.recurrent` | an RNN, GRU or LSTM layer's steps over its input projection (see `recurrent`) |
//! | `relax_runtime.resize` | ONNX's Resize with scales or sizes known at run time (see `resize`) |
//! | `relax_runtime.resize2d` | `x, method, coordinates, rounding, out`: TVM's `image.resize2d`, nearest or bilinear, NCHW or blocked (see `resize2d`) |
//! | `relax_runtime.layout_blocked` | `x, out`: `[N, C, H, W]` to `[N, C / 16, H, W, 16]` or back, `C` a multiple of 16 (see `layout`) |
//!
//! `w` is `[N, K]` with `transpose_w = 1` (`x · wᵀ`, as `nn.Linear` stores it), else
//! `[K, N]`; `epilogue` is the activation that follows: 0 none, 1 ReLU, 2 GELU (erf),
//! 3 GELU (tanh), 4 ReLU6, 5 SiLU, 6 hard-swish. Every argument is checked (dtype,
//! shapes) before any memory is touched: a mismatch is an error, not UB.

#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(clippy::undocumented_unsafe_blocks)]

mod amx;
mod bf16_panels;
mod blocked;
mod blocked_depthwise;
mod blocked_winograd;
mod caches;
mod conv;
mod conv_operands;
mod conv_transpose;
mod depthwise;
mod direct;
mod dots;
mod edges;
mod epilogue;
mod filter_panels;
mod gemm;
mod layout;
mod panels;
mod parallel;
mod recurrent;
mod resize;
mod resize2d;
mod rows;
mod scratch;
mod simd;
mod strips;
mod tensor;
mod winograd;

pub use parallel::{inline, threads, Launch};
#[doc(hidden)]
pub use parallel::{number_units_by_panels, test_values};
pub use tensor::{Argument, Arguments};

/// The weight layouts relax-runtime converts parameters to when it loads them, which
/// the kernels then read (see the table above).
pub mod weights {
    pub use crate::bf16_panels::{pack as pack_bf16_panels, round as round_bf16};
    pub use crate::blocked::bf16::pack as pack_bf16_filter_panels;
    pub use crate::blocked_winograd::transform_weights as blocked_winograd;
    pub use crate::panels::{pack as pack_panels, PANEL};
    pub use crate::winograd::{transform_weights as winograd, Tile as WinogradTile};
}

/// A kernel: reads its arguments, writes its outputs, or says why it cannot.
pub type Kernel = fn(&Arguments<'_>) -> Result<(), String>;

/// Every kernel, by the global name relax-build's driver calls it by.
pub const KERNELS: &[(&str, Kernel)] = &[
    ("relax_runtime.dense", gemm::dense),
    ("relax_runtime.dense_bias", gemm::dense_bias),
    ("relax_runtime.dense_add", gemm::dense_add),
    ("relax_runtime.dense_bias_add", gemm::dense_bias_add),
    ("relax_runtime.dense_bf16", bf16_panels::dense_bf16),
    (
        "relax_runtime.dense_bf16_bias",
        bf16_panels::dense_bf16_bias,
    ),
    ("relax_runtime.dense_bf16_add", bf16_panels::dense_bf16_add),
    (
        "relax_runtime.dense_bf16_bias_add",
        bf16_panels::dense_bf16_bias_add,
    ),
    ("relax_runtime.batch_matmul", gemm::batch_matmul),
    ("relax_runtime.conv2d", conv::conv2d),
    ("relax_runtime.conv2d_bias", conv::conv2d_bias),
    ("relax_runtime.conv2d_bn", conv::conv2d_bn),
    ("relax_runtime.conv2d_add", conv::conv2d_add),
    ("relax_runtime.conv2d_bias_add", conv::conv2d_bias_add),
    ("relax_runtime.conv2d_bn_add", conv::conv2d_bn_add),
    ("relax_runtime.conv2d_bf16", conv::conv2d_bf16),
    ("relax_runtime.conv2d_bf16_bias", conv::conv2d_bf16_bias),
    ("relax_runtime.conv2d_bf16_bn", conv::conv2d_bf16_bn),
    ("relax_runtime.conv2d_bf16_add", conv::conv2d_bf16_add),
    (
        "relax_runtime.conv2d_bf16_bias_add",
        conv::conv2d_bf16_bias_add,
    ),
    ("relax_runtime.conv2d_bf16_bn_add", conv::conv2d_bf16_bn_add),
    (
        "relax_runtime.conv2d_transpose",
        conv_transpose::conv2d_transpose,
    ),
    (
        "relax_runtime.conv2d_transpose_bias",
        conv_transpose::conv2d_transpose_bias,
    ),
    ("relax_runtime.softmax", rows::softmax),
    ("relax_runtime.softmax_add", rows::softmax_add),
    ("relax_runtime.layer_norm", rows::layer_norm),
    ("relax_runtime.reduce_trailing", rows::reduce_trailing),
    ("relax_runtime.recurrent", recurrent::recurrent),
    ("relax_runtime.resize", resize::resize),
    ("relax_runtime.resize2d", resize2d::resize2d),
    ("relax_runtime.layout_blocked", layout::layout_blocked),
];

/// The kernel registered as `name`, if there is one.
pub fn kernel(name: &str) -> Option<Kernel> {
    KERNELS
        .iter()
        .find(|(registered, _)| *registered == name)
        .map(|(_, kernel)| *kernel)
}

/// What the bf16 kernels (`precision = "bf16"`) run on this CPU: `"AMX-BF16"` (tiles for
/// convolutions and dense layers; Linux gave this process their state on this call, see
/// `RELAX_KERNELS_NO_AMX` in the README), `"AVX512-BF16"`, or `"portable"` (float32
/// arithmetic giving AVX512-BF16's results, slower than float32 itself).
pub fn bf16_instructions() -> &'static str {
    match bf16_panels::Bf16Isa::best() {
        bf16_panels::Bf16Isa::Amx => "AMX-BF16",
        bf16_panels::Bf16Isa::Avx512Bf16 => "AVX512-BF16",
        bf16_panels::Bf16Isa::Portable => "portable",
    }
}
