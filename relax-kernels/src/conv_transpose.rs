//! Transposed 2-D convolutions (ONNX's ConvTranspose: the upsampling heads of detectors
//! and segmenters) as a matrix product and a scatter: for each image, group and block of
//! filters, `columns[filters * KH * KW, H * W] = wᵀ · x` on the gemm crate, then each
//! column's values added into the output pixels its kernel tap reaches ("col2im").
//!
//! `relax_runtime.conv2d_transpose(x[N, C, H, W], w[C, F/g, KH, KW], stride_h, stride_w,
//! top, left, bottom, right, dilation_h, dilation_w, groups, epilogue, out[N, F, OH, OW])`,
//! and `relax_runtime.conv2d_transpose_bias` with `bias[F]` after `w`. `OH = (H - 1) *
//! stride_h - top - bottom + dilation_h * (KH - 1) + 1 + output_padding`, the output
//! padding (below `max(stride_h, dilation_h)`) read from `out`'s shape; likewise `OW`.
//! The work is split over the launch's tasks by (image, group, block of filters): each
//! unit writes its own output planes; and, where the kernel's rows of one input row do not
//! reach another's output rows (a stride at least the dilated kernel's height: the 2x2,
//! stride-2 upsampling of U-Nets and detector heads), by chunks of input rows, each unit
//! writing its own output rows. A DBNet head's last layer (24 channels to 1 filter over
//! 240x320) was one unit, on one thread.

use std::cell::RefCell;

use super::epilogue::Epilogue;
use super::gemm::multiply;
use super::parallel::{for_each_unit, Launch, Shared, INLINE_WORK};
use super::scratch::{prefix, reuse};
use super::tensor::Arguments;

thread_local! {
    /// Each thread's columns of one unit.
    static COLUMNS: RefCell<Vec<f32>> = RefCell::default();
}

/// At most this many values of columns per unit (a block holds one filter at least).
const COLUMN_VALUES: usize = 1 << 18;

/// Units a call is split into at least, where its rows allow (see the module's notes).
const MIN_UNITS: usize = 8;

/// The sizes of a transposed convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConvTranspose {
    pub(crate) batch: usize,
    pub(crate) channels: usize,
    pub(crate) height: usize,
    pub(crate) width: usize,
    pub(crate) filters: usize,
    pub(crate) kernel: (usize, usize),
    pub(crate) stride: (usize, usize),
    /// top, left, bottom, right
    pub(crate) padding: (usize, usize, usize, usize),
    pub(crate) dilation: (usize, usize),
    pub(crate) groups: usize,
    pub(crate) output: (usize, usize),
}

impl ConvTranspose {
    /// The output size before output padding, per axis, if positive.
    fn base_output(&self) -> Option<(usize, usize)> {
        let axis = |size: usize,
                    stride: usize,
                    before: usize,
                    after: usize,
                    dilation: usize,
                    kernel: usize| {
            let full = (size.checked_sub(1)? * stride) + dilation * (kernel.checked_sub(1)?) + 1;
            full.checked_sub(before + after).filter(|&out| out > 0)
        };
        let (top, left, bottom, right) = self.padding;
        Some((
            axis(
                self.height,
                self.stride.0,
                top,
                bottom,
                self.dilation.0,
                self.kernel.0,
            )?,
            axis(
                self.width,
                self.stride.1,
                left,
                right,
                self.dilation.1,
                self.kernel.1,
            )?,
        ))
    }

    /// Whether the output rows of different input rows are distinct (no tap of one input
    /// row lands on another's output rows).
    fn rows_apart(&self) -> bool {
        self.dilation.0 * (self.kernel.0 - 1) < self.stride.0
    }

    /// Whether the sizes are consistent: whole groups, strides and dilations of at least
    /// 1, and an output padding below the stride or dilation on each axis.
    fn fits(&self) -> bool {
        let (stride, dilation) = (self.stride, self.dilation);
        self.groups > 0
            && self.channels.is_multiple_of(self.groups)
            && self.filters.is_multiple_of(self.groups)
            && stride.0 > 0
            && stride.1 > 0
            && dilation.0 > 0
            && dilation.1 > 0
            && self.base_output().is_some_and(|(height, width)| {
                let (out_height, out_width) = self.output;
                out_height >= height
                    && out_width >= width
                    && out_height - height < stride.0.max(dilation.0)
                    && out_width - width < stride.1.max(dilation.1)
            })
    }
}

/// `out = epilogue(conv_transpose(x, w) + bias)`, split over the launch's tasks.
///
/// # Safety
/// `x`, `w` and `out` hold the tensors `shape` describes (`shape.fits()`), `bias` one
/// value per filter; `out` overlaps none of them.
pub(crate) unsafe fn conv_transpose_into(
    shape: &ConvTranspose,
    x: *const f32,
    w: *const f32,
    bias: Option<&[f32]>,
    epilogue: Epilogue,
    out: Shared,
    launch: Launch,
) -> Result<(), String> {
    let (kh, kw) = shape.kernel;
    let (channels, filters) = (shape.channels / shape.groups, shape.filters / shape.groups);
    let (height, width) = (shape.height, shape.width);
    let pixels = height * width;
    let (out_height, out_width) = shape.output;
    let taps = kh * kw;
    let whole_plane_block = (COLUMN_VALUES / (taps * pixels).max(1)).clamp(1, filters);
    let filter_units = shape.batch * shape.groups * filters.div_ceil(whole_plane_block);
    let chunks = if shape.rows_apart() {
        MIN_UNITS.div_ceil(filter_units).min(height).max(1)
    } else {
        1
    };
    let chunk_rows = height.div_ceil(chunks);
    let chunks = height.div_ceil(chunk_rows);
    let block = (COLUMN_VALUES / (taps * chunk_rows * width).max(1)).clamp(1, filters);
    let blocks = filters.div_ceil(block);
    let units = shape.batch * shape.groups * blocks * chunks;
    let work = shape.batch * shape.filters * taps * pixels * channels;
    let (x, w) = (Shared(x.cast_mut()), Shared(w.cast_mut()));
    let stride_h = shape.stride.0;
    let top = shape.padding.0;
    for_each_unit(launch, work < INLINE_WORK, units, &|unit| {
        let (image, rest) = (
            unit / (shape.groups * blocks * chunks),
            unit % (shape.groups * blocks * chunks),
        );
        let (group, rest) = (rest / (blocks * chunks), rest % (blocks * chunks));
        let (first, chunk) = ((rest / chunks) * block, rest % chunks);
        let count = block.min(filters - first);
        let rows = chunk * chunk_rows..((chunk + 1) * chunk_rows).min(height);
        // The output rows this unit writes: those its input rows' taps reach (with
        // `rows_apart`, from `row * stride - top` below the next chunk's first), and the
        // first and last chunks also the rows no input row reaches at the plane's edges.
        let out_rows = if chunks == 1 {
            0..out_height
        } else {
            let edge = |row: usize| (row * stride_h).saturating_sub(top).min(out_height);
            let start = if rows.start == 0 { 0 } else { edge(rows.start) };
            let end = if rows.end == height {
                out_height
            } else {
                edge(rows.end)
            };
            start..end
        };
        let chunk_pixels = rows.len() * width;
        reuse(&COLUMNS, |columns| {
            let columns = prefix(columns, count * taps * chunk_pixels);
            let x_group =
                x.at((image * shape.channels + group * channels) * pixels + rows.start * width);
            let w_group = w.at(group * channels * filters * taps + first * taps);
            // SAFETY: `columns` holds count * taps rows of `chunk_pixels`; the weights' rows
            // are the group's channels (each `filters * taps` long, this block's
            // `count * taps` of them read), the input's this chunk's rows of the group's
            // channel planes: all inside the checked tensors (this function's contract).
            unsafe {
                multiply(
                    (count * taps, chunk_pixels, channels),
                    (columns.as_mut_ptr(), 1, chunk_pixels),
                    (w_group, filters * taps, 1),
                    (x_group, 1, pixels),
                    1.0,
                )
            };
            for local in 0..count {
                let filter = group * filters + first + local;
                let plane = (image * shape.filters + filter) * out_height * out_width;
                // SAFETY: this unit's output rows of its filters' planes of this image,
                // written by this unit alone (units differ in image, group or filter
                // block, or in chunk, whose output rows `out_rows` are disjoint).
                let part = unsafe {
                    std::slice::from_raw_parts_mut(
                        out.at(plane + out_rows.start * out_width),
                        out_rows.len() * out_width,
                    )
                };
                part.fill(bias.map_or(0.0, |bias| bias[filter]));
                let taps_of =
                    &columns[local * taps * chunk_pixels..(local + 1) * taps * chunk_pixels];
                scatter(shape, taps_of, rows.clone(), (part, out_rows.start));
                epilogue.apply(part);
            }
        });
    })
}

/// Adds one filter's columns of input rows `rows` (`taps` rows of `rows.len() * width`)
/// into the part of its output plane from output row `first_row` on (which holds every
/// output row these input rows reach).
fn scatter(
    shape: &ConvTranspose,
    columns: &[f32],
    rows: std::ops::Range<usize>,
    (plane, first_row): (&mut [f32], usize),
) {
    let (kh, kw) = shape.kernel;
    let (stride_h, stride_w) = shape.stride;
    let (dilation_h, dilation_w) = shape.dilation;
    let (top, left, _, _) = shape.padding;
    let (out_height, out_width) = shape.output;
    let (height, width) = (rows.len(), shape.width);
    for ky in 0..kh {
        for kx in 0..kw {
            let row = &columns[(ky * kw + kx) * height * width..][..height * width];
            // The input columns whose output column (ix * stride + kx * dilation - left)
            // lies inside the plane.
            let shift = (kx * dilation_w) as isize - left as isize;
            let first = (0..width).find(|&ix| (ix * stride_w) as isize + shift >= 0);
            let Some(first) = first else { continue };
            let last = (0..width)
                .rev()
                .find(|&ix| ((ix * stride_w) as isize + shift) < out_width as isize);
            let Some(last) = last.filter(|&last| last >= first) else {
                continue;
            };
            for (local, iy) in rows.clone().enumerate() {
                let oy = (iy * stride_h + ky * dilation_h) as isize - top as isize;
                if oy < 0 || oy >= out_height as isize {
                    continue;
                }
                let out_row = &mut plane[(oy as usize - first_row) * out_width..][..out_width];
                let in_row = &row[local * width..][..width];
                let start = ((first * stride_w) as isize + shift) as usize;
                if stride_w == 1 {
                    let span = last - first + 1;
                    for (out, value) in out_row[start..start + span]
                        .iter_mut()
                        .zip(&in_row[first..=last])
                    {
                        *out += value;
                    }
                } else {
                    for (step, value) in in_row[first..=last].iter().enumerate() {
                        out_row[start + step * stride_w] += value;
                    }
                }
            }
        }
    }
}

fn conv_transpose_with(args: &Arguments<'_>, has_bias: bool) -> Result<(), String> {
    let first = 2 + usize::from(has_bias);
    args.expect_count(first + 11)?;
    let name = args.name;
    let x = args.tensor(0, Some(4))?;
    let w = args.tensor(1, Some(4))?;
    let bias = if has_bias {
        Some(args.tensor(2, Some(1))?)
    } else {
        None
    };
    let out = args.output(first + 10, Some(4))?;
    let mut ints = [0usize; 10];
    for (offset, slot) in ints.iter_mut().enumerate() {
        *slot = usize::try_from(args.int(first + offset)?)
            .map_err(|_| format!("{name}: argument {} is negative", first + offset))?;
    }
    let [stride_h, stride_w, top, left, bottom, right, dilation_h, dilation_w, groups, epilogue] =
        ints;
    let epilogue = Epilogue::from_code(epilogue as i64)?;
    let dim = |shape: &[i64], index: usize| shape[index] as usize;
    let shape = ConvTranspose {
        batch: dim(x.shape, 0),
        channels: dim(x.shape, 1),
        height: dim(x.shape, 2),
        width: dim(x.shape, 3),
        filters: dim(w.shape, 1) * groups,
        kernel: (dim(w.shape, 2), dim(w.shape, 3)),
        stride: (stride_h, stride_w),
        padding: (top, left, bottom, right),
        dilation: (dilation_h, dilation_w),
        groups,
        output: (dim(out.shape, 2), dim(out.shape, 3)),
    };
    let fits = shape.fits()
        && dim(w.shape, 0) == shape.channels
        && dim(out.shape, 0) == shape.batch
        && dim(out.shape, 1) == shape.filters
        && bias.is_none_or(|bias| bias.len() == shape.filters);
    if !fits {
        return Err(format!(
            "{name}: shapes do not fit: x {:?}, w {:?}, out {:?}, {shape:?}",
            x.shape, w.shape, out.shape
        ));
    }
    if out.len() == 0 {
        return Ok(());
    }
    let bias = bias.map(|bias| {
        // SAFETY: a checked float32 tensor of `filters` elements, read only.
        unsafe { std::slice::from_raw_parts(bias.data.cast_const(), shape.filters) }
    });
    if x.len() == 0 || w.len() == 0 {
        // No input pixels or channels: every output is the bias, activated.
        // SAFETY: the output's elements, written by this call alone.
        let values = unsafe { std::slice::from_raw_parts_mut(out.data, out.len()) };
        let plane = shape.output.0 * shape.output.1;
        for (index, chunk) in values.chunks_mut(plane).enumerate() {
            chunk.fill(bias.map_or(0.0, |bias| bias[index % shape.filters]));
            epilogue.apply(chunk);
        }
        return Ok(());
    }
    // SAFETY: the shapes were checked against each other above; an output never
    // overlaps the call's other arguments.
    unsafe {
        conv_transpose_into(
            &shape,
            x.data,
            w.data,
            bias,
            epilogue,
            Shared(out.data),
            args.launch,
        )
    }
}

/// `relax_runtime.conv2d_transpose(x, w, stride_h, stride_w, top, left, bottom, right,
/// dilation_h, dilation_w, groups, epilogue, out)`.
pub(crate) fn conv2d_transpose(args: &Arguments<'_>) -> Result<(), String> {
    conv_transpose_with(args, false)
}

/// `relax_runtime.conv2d_transpose_bias(x, w, bias, ...)`: with a bias per filter.
pub(crate) fn conv2d_transpose_bias(args: &Arguments<'_>) -> Result<(), String> {
    conv_transpose_with(args, true)
}

#[cfg(test)]
mod tests;
