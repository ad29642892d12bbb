//! Dense layers and batched matrix multiplications, on the `gemm` crate.

use super::epilogue::{add, add_bias_to_rows, Epilogue};
use super::panels::{dense_panels_into, After, PANEL};
use super::parallel::{chunk, Launch, Shared, INLINE_WORK};
use super::simd::Isa;
use super::tensor::Arguments;

/// `B` of `x · B` as strides over a weight tensor.
#[derive(Clone, Copy)]
pub(crate) struct Rhs {
    pub(crate) data: Shared,
    /// Stride between consecutive k (rows of B).
    pub(crate) row_stride: isize,
    /// Stride between consecutive n (columns of B).
    pub(crate) column_stride: isize,
}

impl Rhs {
    /// `w[N, K]` read as its transpose (`x · wᵀ`), or `w[K, N]` as is.
    pub(crate) fn of(w: *mut f32, k: usize, n: usize, transposed: bool) -> Rhs {
        let (row_stride, column_stride) = if transposed {
            (1, k as isize)
        } else {
            (n as isize, 1)
        };
        Rhs {
            data: Shared(w),
            row_stride,
            column_stride,
        }
    }

    fn column(self, n: usize) -> *const f32 {
        // SAFETY: `n` is a column of B (below its width), so the offset is inside w.
        unsafe { self.data.get().offset(n as isize * self.column_stride) }
    }
}

/// `out[m, n] = alpha * x[m, k] · B[k, n]` for the rows `rows` and columns `columns`,
/// on this thread; `n` is `out`'s row stride (a convolution writes a block of a wider
/// output).
///
/// # Safety
/// `x` holds `m x k` (row-major), `out` `m` rows of stride `n`, `B` every column
/// addressed, and the block must not be written by any other thread meanwhile.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_block(
    k: usize,
    n: usize,
    x: *const f32,
    rhs: Rhs,
    out: Shared,
    rows: std::ops::Range<usize>,
    columns: std::ops::Range<usize>,
    alpha: f32,
) {
    if rows.is_empty() || columns.is_empty() {
        return;
    }
    // SAFETY: the caller's contract: every pointer addresses its checked tensor, and the
    // destination block belongs to this task alone.
    unsafe {
        multiply(
            (rows.len(), columns.len(), k),
            (out.at(rows.start * n + columns.start), 1, n),
            (x.add(rows.start * k), 1, k),
            (
                rhs.column(columns.start),
                rhs.column_stride as usize,
                rhs.row_stride as usize,
            ),
            alpha,
        )
    }
}

/// `out = alpha * lhs · rhs` for sizes `(m, n, k)` on this thread, each matrix given as
/// (first element, column stride, row stride): every kernel's call into the gemm crate.
///
/// # Safety
/// Every element the sizes and strides address is valid; `out` overlaps neither input
/// and no other thread uses it meanwhile.
pub(crate) unsafe fn multiply(
    (m, n, k): (usize, usize, usize),
    out: (*mut f32, usize, usize),
    lhs: (*const f32, usize, usize),
    rhs: (*const f32, usize, usize),
    alpha: f32,
) {
    // SAFETY: the caller's contract.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            out.0,
            out.1 as isize,
            out.2 as isize,
            false,
            lhs.0,
            lhs.1 as isize,
            lhs.2 as isize,
            rhs.0,
            rhs.1 as isize,
            rhs.2 as isize,
            0.0,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        )
    }
}

/// `out = epilogue(x · B + bias + residual)` for `x[m, k]`, split over the thread pool
/// by rows or columns, whichever has more to share.
///
/// # Safety
/// `x` holds `m x k`, `rhs` a `k x n` matrix, `bias` `n` values, `residual` `m x n`,
/// `out` `m x n`, all valid for the call, and `out` overlaps none of them.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn dense_into(
    m: usize,
    n: usize,
    k: usize,
    x: *const f32,
    rhs: Rhs,
    bias: Option<&[f32]>,
    residual: Option<*const f32>,
    epilogue: Epilogue,
    out: Shared,
    launch: Launch,
) -> Result<(), String> {
    let x = Shared(x.cast_mut());
    let residual = residual.map(|residual| Shared(residual.cast_mut()));
    let by_columns = n >= m;
    launch(m * n * k < INLINE_WORK, &|task, tasks| {
        let (rows, columns) = if by_columns {
            (0..m, chunk(n, tasks, task, 16))
        } else {
            (chunk(m, tasks, task, 8), 0..n)
        };
        // SAFETY: the tasks' blocks are disjoint (chunks of rows or of columns), and the
        // pointers come from the checked tensors (this function's contract).
        unsafe { gemm_block(k, n, x.get(), rhs, out, rows.clone(), columns.clone(), 1.0) };
        if bias.is_none() && residual.is_none() && epilogue == Epilogue::None {
            return;
        }
        for row in rows {
            let offset = row * n + columns.start;
            // SAFETY: this row's columns of this task's block, written by this task only.
            let values = unsafe { std::slice::from_raw_parts_mut(out.at(offset), columns.len()) };
            if let Some(bias) = bias {
                add_bias_to_rows(values, &bias[columns.clone()]);
            }
            if let Some(residual) = residual {
                // SAFETY: the same block of the residual, which no task writes.
                add(values, unsafe {
                    std::slice::from_raw_parts(residual.at(offset), columns.len())
                });
            }
            epilogue.apply(values);
        }
    })
}

fn dense_with(args: &Arguments<'_>, has_bias: bool, has_residual: bool) -> Result<(), String> {
    args.expect_count(5 + usize::from(has_bias) + usize::from(has_residual))?;
    let name = args.name;
    let x = args.tensor(0, None)?;
    let w = args.tensor(1, None)?;
    // `[panels, K, 64]`: weights packed at load (see `panels`); else `[N, K]` or `[K, N]`.
    let packed = w.shape.len() == 3;
    if !packed && w.shape.len() != 2 {
        return Err(format!(
            "{name}: w has rank {}, not 2 (or 3, packed)",
            w.shape.len()
        ));
    }
    let bias = if has_bias {
        Some(args.tensor(2, Some(1))?)
    } else {
        None
    };
    let rest = if has_bias { 3 } else { 2 };
    let transposed = args.int(rest)? != 0;
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
    let k = x.dim_from_end(1);
    let (w_k, n) = if packed {
        (w.shape[1] as usize, out.dim_from_end(1))
    } else if transposed {
        (w.shape[1] as usize, w.shape[0] as usize)
    } else {
        (w.shape[0] as usize, w.shape[1] as usize)
    };
    let panels_fit =
        !packed || (w.shape[0] as usize == n.div_ceil(PANEL) && w.shape[2] as usize == PANEL);
    let m = x.leading(1);
    let expected_out: Vec<i64> = x.shape[..x.shape.len() - 1]
        .iter()
        .copied()
        .chain([n as i64])
        .collect();
    if w_k != k
        || !panels_fit
        || out.shape != expected_out.as_slice()
        || bias.is_some_and(|bias| bias.len() != n)
        || residual.is_some_and(|residual| residual.shape != out.shape)
    {
        return Err(format!(
            "{name}: shapes do not fit: x {:?}, w {:?} (transposed: {transposed}), bias {:?}, out {:?}",
            x.shape,
            w.shape,
            bias.map(|bias| bias.shape.to_vec()),
            out.shape
        ));
    }
    let bias = bias.map(|bias| {
        // SAFETY: a checked float32 tensor of n elements, read only during the call.
        unsafe { std::slice::from_raw_parts(bias.data.cast_const(), n) }
    });
    if let Some(residual) = residual {
        residual.check_disjoint(&out)?;
    }
    let residual = residual.map(|residual| residual.data.cast_const());
    if packed {
        let after = After {
            bias,
            residual,
            epilogue,
        };
        // SAFETY: the shapes were checked against each other above; TVM's outputs do
        // not alias its inputs; the AVX-512 tiles only where the CPU has them.
        return unsafe {
            dense_panels_into(
                m,
                n,
                k,
                x.data,
                w.data,
                after,
                Shared(out.data),
                args.launch,
                Isa::best(),
            )
        };
    }
    // SAFETY: the shapes were checked against each other above; TVM's outputs do not
    // alias its inputs.
    unsafe {
        dense_into(
            m,
            n,
            k,
            x.data,
            Rhs::of(w.data, k, n, transposed),
            bias,
            residual,
            epilogue,
            Shared(out.data),
            args.launch,
        )
    }
}

/// `relax_runtime.dense(x, w, transpose_w, epilogue, out)`.
pub(crate) fn dense(args: &Arguments<'_>) -> Result<(), String> {
    dense_with(args, false, false)
}

/// `relax_runtime.dense_bias(x, w, bias, transpose_w, epilogue, out)`.
pub(crate) fn dense_bias(args: &Arguments<'_>) -> Result<(), String> {
    dense_with(args, true, false)
}

/// `relax_runtime.dense_add(x, w, transpose_w, epilogue, residual, out)`: `residual` (of
/// the output's shape) is added before the activation.
pub(crate) fn dense_add(args: &Arguments<'_>) -> Result<(), String> {
    dense_with(args, false, true)
}

/// `relax_runtime.dense_bias_add(x, w, bias, transpose_w, epilogue, residual, out)`.
pub(crate) fn dense_bias_add(args: &Arguments<'_>) -> Result<(), String> {
    dense_with(args, true, true)
}

/// `relax_runtime.batch_matmul(a, b, transpose_b, alpha, out)`: `out[i] = alpha * a[i] ·
/// b[i]` (`b[i]ᵀ` with `transpose_b`) over the batch dims, `b` shared when it is 2-D.
pub(crate) fn batch_matmul(args: &Arguments<'_>) -> Result<(), String> {
    args.expect_count(5)?;
    let name = args.name;
    let a = args.tensor(0, None)?;
    let b = args.tensor(1, None)?;
    let transposed = args.int(2)? != 0;
    let alpha = args.float(3)? as f32;
    let out = args.output(4, Some(a.shape.len()))?;
    let fits = a.shape.len() >= 2
        && (b.shape.len() == 2 || b.shape.len() == a.shape.len())
        && (b.shape.len() == 2 || a.shape[..a.shape.len() - 2] == b.shape[..b.shape.len() - 2]);
    if !fits {
        return Err(format!(
            "{name}: shapes do not fit: a {:?}, b {:?}",
            a.shape, b.shape
        ));
    }
    let (m, k) = (a.dim_from_end(2), a.dim_from_end(1));
    let (b_k, n) = if transposed {
        (b.dim_from_end(1), b.dim_from_end(2))
    } else {
        (b.dim_from_end(2), b.dim_from_end(1))
    };
    let batch = a.leading(2);
    let expected_out: Vec<i64> = a.shape[..a.shape.len() - 2]
        .iter()
        .copied()
        .chain([m as i64, n as i64])
        .collect();
    if b_k != k || out.shape != expected_out.as_slice() {
        return Err(format!(
            "{name}: shapes do not fit: a {:?}, b {:?} (transposed: {transposed}), out {:?}",
            a.shape, b.shape, out.shape
        ));
    }
    let b_step = if b.shape.len() == 2 { 0 } else { k * n };
    // SAFETY: the shapes were checked against each other above.
    unsafe {
        batch_matmul_into(
            batch,
            m,
            n,
            k,
            a.data,
            (b.data, b_step, transposed),
            alpha,
            Shared(out.data),
            args.launch,
        )
    }
}

/// `out[i] = alpha * a[i] · B[i]` for `batch` matrices, split over the pool by whole
/// matrices when there are enough, else by rows of each.
///
/// # Safety
/// `a` holds `batch x m x k`, `b.0` `b.1`-spaced `k x n` matrices (`n x k` when
/// transposed; one shared when the step is 0), `out` `batch x m x n`, not overlapping.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn batch_matmul_into(
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    a: *const f32,
    b: (*mut f32, usize, bool),
    alpha: f32,
    out: Shared,
    launch: Launch,
) -> Result<(), String> {
    let a = Shared(a.cast_mut());
    let (b_data, b_step, transposed) = b;
    let b_data = Shared(b_data);
    launch(batch * m * n * k < INLINE_WORK, &|task, tasks| {
        let run = |index: usize, rows: std::ops::Range<usize>| {
            let rhs = Rhs::of(b_data.at(index * b_step), k, n, transposed);
            // SAFETY: matrix `index`'s block of rows belongs to this task alone; the
            // pointers address matrix `index` of each checked tensor.
            unsafe {
                gemm_block(
                    k,
                    n,
                    a.at(index * m * k),
                    rhs,
                    Shared(out.at(index * m * n)),
                    rows,
                    0..n,
                    alpha,
                )
            };
        };
        if batch >= tasks {
            for index in chunk(batch, tasks, task, 1) {
                run(index, 0..m);
            }
        } else {
            for index in 0..batch {
                run(index, chunk(m, tasks, task, 8));
            }
        }
    })
}

#[cfg(test)]
mod tests;
