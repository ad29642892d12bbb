//! Dense layers in bf16 with float32 sums (issue 56's reduced precision): the weights
//! are rounded to bf16 once, at load, and packed into column panels of pairs,
//! `[ceil(N / 64), ceil(K / 2), 64]` 32-bit words, each word holding the bf16 values of
//! rows `2p` (low half) and `2p + 1` (high half) of one column. That is the operand
//! layout of AVX512-BF16's `vdpbf16ps`, which adds two products to each of 16 float32
//! sums per instruction: twice the multiply-adds of an AVX-512 FMA.
//!
//! Each call rounds `x` to bf16 pairs the same way (round to nearest, ties to even) into
//! a per-thread scratch, then runs 6 x 64 tiles of 24 float32 accumulators. A CPU
//! without AVX512-BF16 runs a portable tile that computes exactly what the instruction
//! does: per pair, `(sum + a1 * b1) + a0 * b0` in float32, each product exact (two 8-bit
//! significands fit float32's 24), so the two paths agree bit for bit on normal values.

use std::cell::RefCell;

use super::epilogue::{add, Epilogue};
use super::parallel::{chunk, Launch, Shared, INLINE_WORK};
use super::scratch::reuse;
use super::tensor::Arguments;

/// Columns per panel.
pub const PANEL: usize = 64;

thread_local! {
    /// `x` rounded to bf16 pairs, kept from call to call.
    static PAIRS: RefCell<Vec<u32>> = RefCell::default();
}

/// `value` rounded to bf16 (to nearest, ties to even; a NaN stays a quiet NaN).
pub fn round(value: f32) -> u16 {
    let bits = value.to_bits();
    if value.is_nan() {
        return ((bits >> 16) | 0x40) as u16;
    }
    let tie_to_even = 0x7FFF + ((bits >> 16) & 1);
    (bits.wrapping_add(tie_to_even) >> 16) as u16
}

/// The float32 value of a bf16 value.
pub fn widen(value: u16) -> f32 {
    f32::from_bits(u32::from(value) << 16)
}

/// One packed word: `low` in the low half, `high` in the high half.
fn pair(low: f32, high: f32) -> u32 {
    u32::from(round(low)) | (u32::from(round(high)) << 16)
}

/// Packs weights into bf16 panels of pairs: `weight(k, n)` reads element (k, n) of the
/// `k x n` matrix the layer multiplies by. The words are returned as float32 bit patterns
/// (what the kernel table's tensors hold); only this module reads them.
pub fn pack(k: usize, n: usize, weight: impl Fn(usize, usize) -> f32) -> Vec<f32> {
    let (panels, pairs) = (n.div_ceil(PANEL), k.div_ceil(2));
    let mut out = vec![0.0; panels * pairs * PANEL];
    let at = |row: usize, column: usize| {
        if row < k {
            weight(row, column)
        } else {
            0.0
        }
    };
    for panel in 0..panels {
        let columns = PANEL.min(n - panel * PANEL);
        for p in 0..pairs {
            let run = &mut out[(panel * pairs + p) * PANEL..][..columns];
            for (offset, slot) in run.iter_mut().enumerate() {
                let column = panel * PANEL + offset;
                *slot = f32::from_bits(pair(at(2 * p, column), at(2 * p + 1, column)));
            }
        }
    }
    out
}

/// Which tile runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bf16Isa {
    /// Plain float32 arithmetic giving the instruction's results.
    Portable,
    /// AVX-512F with AVX512-BF16's `vdpbf16ps`.
    Avx512Bf16,
    /// AVX512-BF16, and AMX-BF16's tiles for the blocked convolutions (see
    /// [`crate::amx`]).
    Amx,
}

impl Bf16Isa {
    /// The best this CPU runs.
    pub(crate) fn best() -> Bf16Isa {
        if Bf16Isa::Amx.runs_here() {
            Bf16Isa::Amx
        } else if Bf16Isa::Avx512Bf16.runs_here() {
            Bf16Isa::Avx512Bf16
        } else {
            Bf16Isa::Portable
        }
    }

    pub(crate) fn runs_here(self) -> bool {
        match self {
            Bf16Isa::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Bf16Isa::Avx512Bf16 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bf16")
            }
            Bf16Isa::Amx => Bf16Isa::Avx512Bf16.runs_here() && crate::amx::bf16_usable(),
            #[cfg(not(target_arch = "x86_64"))]
            Bf16Isa::Avx512Bf16 => false,
        }
    }
}

/// `relax_runtime.dense_bf16(x, w, transpose_w, epilogue, out)`: `x[..., K] · W` with `W`
/// packed by [`pack`] (`[ceil(N / 64), ceil(K / 2), 64]`); the arguments are the float32
/// dense kernel's, `transpose_w` 0 (the panels are what they are).
pub(crate) fn dense_bf16(args: &Arguments<'_>) -> Result<(), String> {
    dense_with(args, false, false)
}

/// `relax_runtime.dense_bf16_bias(x, w, bias, transpose_w, epilogue, out)`.
pub(crate) fn dense_bf16_bias(args: &Arguments<'_>) -> Result<(), String> {
    dense_with(args, true, false)
}

/// `relax_runtime.dense_bf16_add(x, w, transpose_w, epilogue, residual, out)`: `residual`
/// (of the output's shape) is added before the activation.
pub(crate) fn dense_bf16_add(args: &Arguments<'_>) -> Result<(), String> {
    dense_with(args, false, true)
}

/// `relax_runtime.dense_bf16_bias_add(x, w, bias, transpose_w, epilogue, residual, out)`.
pub(crate) fn dense_bf16_bias_add(args: &Arguments<'_>) -> Result<(), String> {
    dense_with(args, true, true)
}

fn dense_with(args: &Arguments<'_>, has_bias: bool, has_residual: bool) -> Result<(), String> {
    args.expect_count(5 + usize::from(has_bias) + usize::from(has_residual))?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let w = args.tensor(1, Some(3))?;
    let bias = if has_bias {
        Some(args.tensor(2, Some(1))?)
    } else {
        None
    };
    let rest = 2 + usize::from(has_bias);
    if args.int(rest)? != 0 {
        return Err(format!(
            "{name}: transpose_w is 1, but bf16 panels are packed as they are read (give 0)"
        ));
    }
    let epilogue = Epilogue::from_code(args.int(rest + 1)?)?;
    let residual = if has_residual {
        Some(args.tensor(rest + 2, Some(x.shape.len()))?)
    } else {
        None
    };
    let out = args.output(rest + 2 + usize::from(has_residual), Some(x.shape.len()))?;
    if x.shape.is_empty() {
        return Err(format!("{name}: x is a scalar"));
    }
    let (m, k, n) = (x.leading(1), x.dim_from_end(1), out.dim_from_end(1));
    let expected_out: Vec<i64> = x.shape[..x.shape.len() - 1]
        .iter()
        .copied()
        .chain([n as i64])
        .collect();
    let panels_fit = w.shape[0] as usize == n.div_ceil(PANEL)
        && w.shape[1] as usize == k.div_ceil(2)
        && w.shape[2] as usize == PANEL;
    if !panels_fit
        || out.shape != expected_out.as_slice()
        || bias.is_some_and(|bias| bias.len() != n)
        || residual.is_some_and(|residual| residual.shape != out.shape)
    {
        return Err(format!(
            "{name}: shapes do not fit: x {:?}, w {:?} (bf16 panels of pairs), bias {:?}, out {:?}",
            x.shape,
            w.shape,
            bias.map(|bias| bias.shape.to_vec()),
            out.shape
        ));
    }
    if let Some(residual) = residual {
        residual.check_disjoint(&out)?;
    }
    // SAFETY: checked float32 tensors of the sizes checked above, read only during the
    // call; TVM's outputs do not alias its inputs (the residual was checked above).
    let (x, panels, bias, residual) = unsafe {
        (
            std::slice::from_raw_parts(x.data.cast_const(), m * k),
            std::slice::from_raw_parts(w.data.cast_const(), w.len()),
            bias.map(|bias| std::slice::from_raw_parts(bias.data.cast_const(), n)),
            residual.map(|residual| std::slice::from_raw_parts(residual.data.cast_const(), m * n)),
        )
    };
    // SAFETY: the output was checked to hold m x n values and aliases no input.
    unsafe {
        dense_into(
            (m, n, k),
            x,
            panels,
            After {
                bias,
                residual,
                epilogue,
            },
            Shared(out.data),
            args.launch,
            Bf16Isa::best(),
        )
    }
}

/// What follows the product: a bias per column, a residual of the output's shape (`m x
/// n`), an activation.
#[derive(Clone, Copy)]
pub(crate) struct After<'a> {
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) residual: Option<&'a [f32]>,
    pub(crate) epilogue: Epilogue,
}

/// `out[m, n] = epilogue(bf16(x) · W + bias + residual)`, split over the pool by panels.
///
/// # Safety
/// `out` addresses `m x n` float32 values that nothing else reads or writes during the
/// call; `isa` runs here. The slices hold `m x k` values, [`pack`]'s words for `k x n`,
/// `n` values and `m x n` values (checked, with a panic otherwise).
pub(crate) unsafe fn dense_into(
    (m, n, k): (usize, usize, usize),
    x: &[f32],
    panels: &[f32],
    after: After<'_>,
    out: Shared,
    launch: Launch,
    isa: Bf16Isa,
) -> Result<(), String> {
    let pairs = k.div_ceil(2);
    let count = n.div_ceil(PANEL);
    assert!(x.len() >= m * k && panels.len() >= count * pairs * PANEL);
    assert!(after.bias.is_none_or(|bias| bias.len() >= n));
    assert!(after
        .residual
        .is_none_or(|residual| residual.len() >= m * n));
    reuse(&PAIRS, |buffer| {
        if buffer.len() < m * pairs {
            buffer.resize(m * pairs, 0);
        }
        let words = &mut buffer[..m * pairs];
        match isa {
            // SAFETY: `isa` runs here (the contract); the slices' sizes were asserted.
            #[cfg(target_arch = "x86_64")]
            Bf16Isa::Avx512Bf16 | Bf16Isa::Amx => unsafe { avx512::round_rows(x, k, words) },
            _ => round_rows(x, k, words),
        }
        let words: &[u32] = words;
        launch(m * n * k < INLINE_WORK, &|task, tasks| {
            for panel in chunk(count, tasks, task, 1) {
                let block = Block {
                    m,
                    n,
                    pairs,
                    x: words,
                    panel: &panels[panel * pairs * PANEL..][..pairs * PANEL],
                    first_column: panel * PANEL,
                    columns: PANEL.min(n - panel * PANEL),
                    bias: after.bias,
                    residual: after.residual,
                    out,
                };
                // SAFETY: the panel's columns of `out` belong to this task alone (the
                // tasks take distinct panels), inside the m x n output (the contract).
                unsafe {
                    match isa {
                        #[cfg(target_arch = "x86_64")]
                        Bf16Isa::Amx if pairs > 0 => amx::block(&block),
                        #[cfg(target_arch = "x86_64")]
                        Bf16Isa::Avx512Bf16 | Bf16Isa::Amx => avx512::block(&block),
                        _ => portable_block(&block),
                    }
                }
                for row in 0..m {
                    // SAFETY: as above: this block's columns of row `row`.
                    let values = unsafe {
                        std::slice::from_raw_parts_mut(
                            out.at(row * n + block.first_column),
                            block.columns,
                        )
                    };
                    after.epilogue.apply(values);
                }
            }
        })
    })
}

/// `values` rounded to bf16 pairs into `words` (`ceil(len / 2)` of them, checked with a
/// panic), with the instructions of `isa`.
///
/// # Safety
/// `isa` runs on this CPU ([`Bf16Isa::runs_here`]).
pub(crate) unsafe fn round_into(values: &[f32], words: &mut [u32], isa: Bf16Isa) {
    let k = values.len();
    let words = &mut words[..k.div_ceil(2)];
    match isa {
        // SAFETY: `isa` runs here (the contract); one row of `k` values into its words.
        #[cfg(target_arch = "x86_64")]
        Bf16Isa::Avx512Bf16 | Bf16Isa::Amx => unsafe { avx512::round_rows(values, k, words) },
        _ => round_rows(values, k, words),
    }
}

/// Each row of `x` (`k` values) as `ceil(k / 2)` words of bf16 pairs, the last one's high
/// half zero when `k` is odd. (Word `j` holds values `2j` and `2j + 1`, low half first:
/// in memory, a row's words are its values' bf16 halves in order, then the pad.)
fn round_rows(x: &[f32], k: usize, words: &mut [u32]) {
    let pairs = k.div_ceil(2);
    for (row, words) in words.chunks_exact_mut(pairs).enumerate() {
        let values = &x[row * k..][..k];
        for (word, two) in words.iter_mut().zip(values.chunks(2)) {
            *word = pair(two[0], two.get(1).copied().unwrap_or(0.0));
        }
    }
}

/// One panel's columns of the whole output.
struct Block<'a> {
    m: usize,
    n: usize,
    pairs: usize,
    /// `m x pairs` words.
    x: &'a [u32],
    /// `pairs x 64` words (float32 bit patterns).
    panel: &'a [f32],
    first_column: usize,
    /// The panel's real columns (64 but for the last panel).
    columns: usize,
    bias: Option<&'a [f32]>,
    /// `m x n` values.
    residual: Option<&'a [f32]>,
    out: Shared,
}

/// The sums of one word pair as the instruction forms them.
pub(crate) fn dot_pair(sum: f32, a: u32, b: u32) -> f32 {
    let (a0, a1) = (widen(a as u16), widen((a >> 16) as u16));
    let (b0, b1) = (widen(b as u16), widen((b >> 16) as u16));
    (sum + a1 * b1) + a0 * b0
}

/// The block on any CPU, 16 columns at a time.
///
/// # Safety
/// As `dense_into`, for this block's columns of `out`.
unsafe fn portable_block(block: &Block<'_>) {
    for first in (0..block.columns).step_by(16) {
        let width = 16.min(block.columns - first);
        for row in 0..block.m {
            let mut sums = [0f32; 16];
            portable_row(block.x, block.pairs, row, block.panel, first, &mut sums);
            let offset = row * block.n + block.first_column + first;
            // SAFETY: `width` columns of row `row` inside this block (the contract).
            let out = unsafe { std::slice::from_raw_parts_mut(block.out.at(offset), width) };
            out.copy_from_slice(&sums[..width]);
            if let Some(bias) = block.bias {
                add(out, &bias[block.first_column + first..][..width]);
            }
            if let Some(residual) = block.residual {
                add(out, &residual[offset..][..width]);
            }
        }
    }
}

super::simd::multiversion! {
    /// `sums[j] = Σ_p dot_pair(x[row, p], panel[p, first + j])`.
    fn portable_row(
        x: &[u32],
        pairs: usize,
        row: usize,
        panel: &[f32],
        first: usize,
        sums: &mut [f32; 16],
    ) {
        let x = &x[row * pairs..][..pairs];
        for (p, &a) in x.iter().enumerate() {
            let b = &panel[p * PANEL + first..][..16];
            for (sum, b) in sums.iter_mut().zip(b) {
                *sum = dot_pair(*sum, a, b.to_bits());
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod amx;

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{Block, PANEL};
    use crate::simd::first_lanes;

    /// Rows per tile: 6 x 4 accumulators, the panel's 4 vectors and a broadcast fit the
    /// 32 registers.
    const ROWS: usize = 6;

    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16; otherwise as `dense_into`, for this block.
    pub(super) unsafe fn block(block: &Block<'_>) {
        let mut row = 0;
        while row < block.m {
            let rows = ROWS.min(block.m - row);
            // SAFETY: the caller's contract; `rows` rows from `row` are inside x and out.
            unsafe {
                match rows {
                    6 => tile::<6>(block, row),
                    5 => tile::<5>(block, row),
                    4 => tile::<4>(block, row),
                    3 => tile::<3>(block, row),
                    2 => tile::<2>(block, row),
                    _ => tile::<1>(block, row),
                }
            }
            row += rows;
        }
    }

    /// [`super::round_rows`] with `vcvtne2ps2bf16`, 32 values an instruction (the same
    /// rounding, to nearest with ties to even; a float32 denormal becomes zero, as the dot
    /// product instruction would take it anyway).
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16; `x` holds `words.len() / ceil(k / 2)` rows
    /// of `k` values (checked, with a panic otherwise).
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn round_rows(x: &[f32], k: usize, words: &mut [u32]) {
        let pairs = k.div_ceil(2);
        for (row, words) in words.chunks_exact_mut(pairs).enumerate() {
            let values = &x[row * k..][..k];
            let whole = k / 32 * 32;
            for (from, to) in values[..whole]
                .chunks_exact(32)
                .zip(words.chunks_exact_mut(16))
            {
                // SAFETY: 32 values read, 16 words written, inside the slices.
                unsafe {
                    let low = _mm512_loadu_ps(from.as_ptr());
                    let high = _mm512_loadu_ps(from.as_ptr().add(16));
                    let halves = _mm512_cvtne2ps_pbh(high, low);
                    _mm512_storeu_si512(to.as_mut_ptr().cast(), words_of(halves));
                }
            }
            if whole < k {
                super::round_rows(&values[whole..], k - whole, &mut words[whole / 2..]);
            }
        }
    }

    /// The bits of 32 bf16 values as 16 words.
    #[inline(always)]
    fn words_of(halves: __m512bh) -> __m512i {
        // SAFETY: both are 512-bit vectors of plain bits, every pattern valid for each.
        unsafe { std::mem::transmute::<__m512bh, __m512i>(halves) }
    }

    /// Reinterprets 16 words of bf16 pairs as the instruction's operand type.
    #[inline(always)]
    fn bh(words: __m512i) -> __m512bh {
        // SAFETY: both are 512-bit vectors of plain bits, every pattern valid for each.
        unsafe { std::mem::transmute::<__m512i, __m512bh>(words) }
    }

    /// Rows `row..row + R` of the block, then the bias and residual, stored with a mask on the last
    /// panel's missing columns.
    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn tile<const R: usize>(block: &Block<'_>, row: usize) {
        let mut sums = [[_mm512_setzero_ps(); 4]; R];
        // SAFETY: x's rows `row..row + R` hold `pairs` words each and the panel
        // `pairs x 64` (slices, indexed in bounds below); the masked stores touch only
        // the block's real columns of out (the caller's contract).
        unsafe {
            let x = block.x[row * block.pairs..][..R * block.pairs].as_ptr();
            let mut b = block.panel[..block.pairs * PANEL].as_ptr();
            for p in 0..block.pairs {
                let b0 = bh(_mm512_loadu_si512(b.cast()));
                let b1 = bh(_mm512_loadu_si512(b.add(16).cast()));
                let b2 = bh(_mm512_loadu_si512(b.add(32).cast()));
                let b3 = bh(_mm512_loadu_si512(b.add(48).cast()));
                for (r, sums) in sums.iter_mut().enumerate() {
                    let a = bh(_mm512_set1_epi32(*x.add(r * block.pairs + p) as i32));
                    sums[0] = _mm512_dpbf16_ps(sums[0], a, b0);
                    sums[1] = _mm512_dpbf16_ps(sums[1], a, b1);
                    sums[2] = _mm512_dpbf16_ps(sums[2], a, b2);
                    sums[3] = _mm512_dpbf16_ps(sums[3], a, b3);
                }
                b = b.add(PANEL);
            }
            for (r, sums) in sums.iter().enumerate() {
                let offset = (row + r) * block.n + block.first_column;
                for (vector, &sum) in sums.iter().enumerate() {
                    let first = vector * 16;
                    if first >= block.columns {
                        break;
                    }
                    let mask = first_lanes(block.columns - first);
                    let mut value = sum;
                    if let Some(bias) = block.bias {
                        let bias = bias.as_ptr().add(block.first_column + first);
                        value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, bias));
                    }
                    if let Some(residual) = block.residual {
                        let residual = residual.as_ptr().add(offset + first);
                        value = _mm512_add_ps(value, _mm512_maskz_loadu_ps(mask, residual));
                    }
                    _mm512_mask_storeu_ps(block.out.at(offset + first), mask, value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
