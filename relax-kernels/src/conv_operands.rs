//! What every convolution algorithm takes: the sizes of one convolution and its
//! tensors with what follows it. A leaf, so that the algorithms (`conv`, `blocked`,
//! `blocked_winograd`) share these types without importing each other.

use super::epilogue::{Epilogue, Finish};
use super::parallel::Shared;

/// The sizes of one convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Conv2d {
    pub(crate) batch: usize,
    pub(crate) channels: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
    pub(crate) filters: usize,
    pub(crate) kernel: (usize, usize),
    pub(crate) stride: (usize, usize),
    /// top, left, bottom, right.
    pub(crate) padding: (usize, usize, usize, usize),
    pub(crate) dilation: (usize, usize),
    pub(crate) groups: usize,
}

impl Conv2d {
    /// The output height and width, or None when the kernel does not fit (or a size
    /// overflows).
    pub(crate) fn output(&self) -> Option<(usize, usize)> {
        let size = |input: usize,
                    before: usize,
                    after: usize,
                    kernel: usize,
                    stride: usize,
                    dilation: usize| {
            // Checked: the sizes come from a kernel call's arguments (absurd ones are
            // refused, never wrapped into a small buffer).
            let span = dilation
                .checked_mul(kernel.checked_sub(1)?)?
                .checked_add(1)?;
            let padded = input.checked_add(before)?.checked_add(after)?;
            (stride > 0 && padded >= span).then(|| (padded - span) / stride + 1)
        };
        let (top, left, bottom, right) = self.padding;
        Some((
            size(
                self.height,
                top,
                bottom,
                self.kernel.0,
                self.stride.0,
                self.dilation.0,
            )?,
            size(
                self.width,
                left,
                right,
                self.kernel.1,
                self.stride.1,
                self.dilation.1,
            )?,
        ))
    }

    /// A 1x1 kernel at stride 1 without padding.
    pub(crate) fn pointwise(&self) -> bool {
        self.kernel == (1, 1) && self.stride == (1, 1) && self.padding == (0, 0, 0, 0)
    }
}

/// What follows the convolution per filter: `value * scale + shift` (a bias is a shift
/// alone; a batch norm both).
#[derive(Debug, Clone, Copy)]
pub(crate) struct PerFilter<'a> {
    pub(crate) scale: Option<&'a [f32]>,
    pub(crate) shift: &'a [f32],
}

/// One convolution's tensors and what follows it: `out = epilogue(conv2d(x, w) * scale +
/// shift + residual)`. The pointers' contract is on each algorithm's function.
#[derive(Clone, Copy)]
pub(crate) struct Operands<'a> {
    pub(crate) x: *const f32,
    /// The kernel as the algorithm takes it (OIHW, or its Winograd transform).
    pub(crate) w: *const f32,
    pub(crate) per_filter: Option<PerFilter<'a>>,
    pub(crate) residual: Option<*const f32>,
    pub(crate) epilogue: Epilogue,
    pub(crate) out: Shared,
}

/// What filter `filter`'s outputs get: its scale and shift (1 and 0 without
/// `per_filter`), `residual` (its run of the residual) and the activation.
pub(crate) fn finish_of<'a>(
    per_filter: Option<PerFilter<'_>>,
    filter: usize,
    residual: Option<&'a [f32]>,
    epilogue: Epilogue,
) -> Finish<'a> {
    Finish {
        scale: per_filter
            .and_then(|per_filter| per_filter.scale)
            .map_or(1.0, |scale| scale[filter]),
        shift: per_filter.map_or(0.0, |per_filter| per_filter.shift[filter]),
        residual,
        epilogue,
    }
}
