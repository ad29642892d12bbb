//! Per-layer figures of every kernel family on the layer shapes of relax-bench's models
//! (ResNet-50, MiniLM, MobileNetV2, EfficientNet-B0, a DBNet detector's FPN), a detector
//! head's transposed convolution, a layout transform, a recurrent layer and silero-vad's
//! convolutions over a streaming window, one core
//! each, with the core's measured FMA peak: `cargo bench -p relax-kernels` (`-- --quick`: one timed
//! run per layer, so that CI keeps the bench building and running; `-- --cold`: the
//! caches evicted before each timed run; `-- FILTER`: only the rows whose family or
//! layer contains FILTER).
//!
//! GFLOP/s counts a layer's direct multiply-adds (2 per MAC) over its median time, so a
//! Winograd form can pass 100% of the peak. Row kernels (softmax, layer norm) report
//! memory throughput instead.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use relax_kernels::weights::{
    blocked_winograd, pack_bf16_filter_panels, pack_bf16_panels, pack_panels, winograd,
    WinogradTile, PANEL,
};
use relax_kernels::{inline, kernel, Argument, Arguments};

/// How long each layer is timed for (at least 3 runs).
const TIMED: Duration = Duration::from_millis(400);

/// Deterministic values in [-1, 1).
fn values(count: usize, seed: u64) -> Vec<f32> {
    relax_kernels::test_values(count, seed, 1.0)
}

/// One row of the table.
struct Row {
    family: &'static str,
    layer: String,
    form: &'static str,
    seconds: f64,
    /// Multiply-adds times 2, or bytes moved for a row kernel.
    work: Work,
}

enum Work {
    Flops(f64),
    /// Multiply-adds times 2 of a bf16 kernel, against the bf16 peak.
    Bf16Flops(f64),
    Bytes(f64),
}

/// Whether each timed run starts with the caches evicted (`--cold`): the layer's
/// weights and inputs come from memory, as a model's layer finds its weights after the
/// rest of the model ran.
static COLD: AtomicBool = AtomicBool::new(false);

/// Bytes written to evict the caches before a cold run.
const EVICT_BYTES: usize = 64 << 20;

/// The median time of `run` over at least 3 runs and `TIMED` (one run with `quick`).
fn time(quick: bool, run: &mut dyn FnMut()) -> f64 {
    run();
    let mut times = Vec::new();
    let start = Instant::now();
    // With `--cold`, a write over more than the level-2 caches before each timed run.
    let mut evict = vec![
        0u8;
        if COLD.load(Ordering::Relaxed) {
            EVICT_BYTES
        } else {
            0
        }
    ];
    while times.is_empty() || (!quick && (times.len() < 3 || start.elapsed() < TIMED)) {
        for (index, byte) in evict.iter_mut().enumerate().step_by(64) {
            *byte = byte.wrapping_add(index as u8);
        }
        let begin = Instant::now();
        run();
        times.push(begin.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}

/// Calls the kernel `name` on one core with `args`, timed.
fn call(quick: bool, name: &'static str, args: &[Argument<'_>]) -> f64 {
    let kernel = kernel(name).expect("a registered kernel");
    time(quick, &mut || {
        kernel(&Arguments::new(name, args, inline)).unwrap_or_else(|e| panic!("{name}: {e}"))
    })
}

fn elements(shape: &[i64]) -> usize {
    shape.iter().product::<i64>() as usize
}

/// A convolution layer: batch 1, square input and kernel, symmetric padding.
#[derive(Clone, Copy)]
struct Conv {
    model: &'static str,
    channels: usize,
    filters: usize,
    size: usize,
    kernel: usize,
    stride: usize,
    groups: usize,
}

impl Conv {
    fn padding(self) -> usize {
        self.kernel / 2
    }

    fn output(self) -> usize {
        (self.size + 2 * self.padding() - self.kernel) / self.stride + 1
    }

    fn flops(self) -> f64 {
        let macs =
            self.output().pow(2) * self.filters * self.channels / self.groups * self.kernel.pow(2);
        2.0 * macs as f64
    }

    fn name(self) -> String {
        let depthwise = if self.groups > 1 { " dw" } else { "" };
        format!(
            "{} {}x{}/{}{depthwise} {}->{} @{}",
            self.model,
            self.kernel,
            self.kernel,
            self.stride,
            self.channels,
            self.filters,
            self.size
        )
    }

    /// Times `relax_runtime.conv2d` with `x`, `w` and `out` in the given shapes.
    fn run(self, quick: bool, x: (&[f32], &[i64]), w: (&[f32], &[i64]), out_shape: &[i64]) -> f64 {
        self.run_kernel("relax_runtime.conv2d", quick, x, w, out_shape)
    }

    /// Times the convolution kernel `kernel` with `x`, `w` and `out` in the given shapes.
    fn run_kernel(
        self,
        kernel: &'static str,
        quick: bool,
        (x, x_shape): (&[f32], &[i64]),
        (w, w_shape): (&[f32], &[i64]),
        out_shape: &[i64],
    ) -> f64 {
        let mut out = vec![0f32; elements(out_shape)];
        let (stride, pad) = (self.stride as i64, self.padding() as i64);
        let mut args = vec![
            Argument::input(x, x_shape).expect("x fits"),
            Argument::input(w, w_shape).expect("w fits"),
        ];
        // strides, padding (top, left, bottom, right), dilation, groups, epilogue (ReLU).
        args.extend(
            [
                stride,
                stride,
                pad,
                pad,
                pad,
                pad,
                1,
                1,
                self.groups as i64,
                1,
            ]
            .map(Argument::int),
        );
        args.push(Argument::output(&mut out, out_shape).expect("out fits"));
        call(quick, kernel, &args)
    }

    /// Every form relax-build may give this layer.
    fn rows(self, quick: bool) -> Vec<Row> {
        let (c, f, s, k, o) = (
            self.channels,
            self.filters,
            self.size,
            self.kernel,
            self.output(),
        );
        let x = values(c * s * s, 1);
        let w = values(f * c / self.groups * k * k, 2);
        let nchw = [1, c as i64, s as i64, s as i64];
        let out_nchw = [1, f as i64, o as i64, o as i64];
        let mut rows = Vec::new();
        let mut row = |form: &'static str, seconds: f64| {
            rows.push(Row {
                family: "conv2d",
                layer: self.name(),
                form,
                seconds,
                work: Work::Flops(self.flops()),
            })
        };
        let oihw = [f as i64, (c / self.groups) as i64, k as i64, k as i64];
        row(
            if self.groups > 1 {
                "depthwise (NCHW)"
            } else if c <= 4 {
                "direct sums (NCHW)"
            } else {
                "im2col + gemm (NCHW)"
            },
            self.run(quick, (&x, &nchw), (&w, &oihw), &out_nchw),
        );
        if self.groups > 1 {
            if c % 16 == 0 {
                let blocked_x = [1, (c / 16) as i64, s as i64, s as i64, 16];
                let blocked_out = [1, (f / 16) as i64, o as i64, o as i64, 16];
                row(
                    "depthwise (blocked)",
                    self.run(quick, (&x, &blocked_x), (&w, &oihw), &blocked_out),
                );
            }
            return rows;
        }
        let depth = c * k * k;
        let panels = pack_panels(depth, f, |at, filter| w[filter * depth + at]);
        let panel_shape = [f.div_ceil(PANEL) as i64, c as i64, k as i64, k as i64, 64];
        row(
            "filter panels (NCHW)",
            self.run(quick, (&x, &nchw), (&panels, &panel_shape), &out_nchw),
        );
        let winograd_fits = k == 3 && self.stride == 1;
        if winograd_fits {
            let u = winograd(&w, f, c, WinogradTile::Four);
            row(
                "Winograd F(4x4) (NCHW)",
                self.run(
                    quick,
                    (&x, &nchw),
                    (&u, &[36, c as i64, f as i64]),
                    &out_nchw,
                ),
            );
        }
        if c % 16 != 0 && f % 16 == 0 {
            // A network's first convolution (3 channels): NCHW in, blocked out.
            let blocked_out = [1, (f / 16) as i64, o as i64, o as i64, 16];
            row(
                "NCHW in, blocked out, filter panels",
                self.run(quick, (&x, &nchw), (&panels, &panel_shape), &blocked_out),
            );
            row(
                if c <= 4 {
                    "NCHW in, blocked out, direct sums"
                } else {
                    "NCHW in, blocked out, OIHW"
                },
                self.run(quick, (&x, &nchw), (&w, &oihw), &blocked_out),
            );
        }
        let mut bf16_row = None;
        if c % 16 == 0 && f % 16 == 0 {
            let blocked_x = [1, (c / 16) as i64, s as i64, s as i64, 16];
            let blocked_out = [1, (f / 16) as i64, o as i64, o as i64, 16];
            row(
                "blocked, filter panels",
                self.run(
                    quick,
                    (&x, &blocked_x),
                    (&panels, &panel_shape),
                    &blocked_out,
                ),
            );
            let bf16_panels = pack_bf16_filter_panels(f, c, (k, k), &w);
            let bf16_shape = [
                f.div_ceil(PANEL) as i64,
                c.div_ceil(2) as i64,
                k as i64,
                k as i64,
                64,
            ];
            bf16_row = Some(Row {
                family: "conv2d",
                layer: self.name(),
                form: "blocked, bf16 filter panels of pairs",
                seconds: self.run_kernel(
                    "relax_runtime.conv2d_bf16",
                    quick,
                    (&x, &blocked_x),
                    (&bf16_panels, &bf16_shape),
                    &blocked_out,
                ),
                work: Work::Bf16Flops(self.flops()),
            });
            if winograd_fits {
                let tile = WinogradTile::Four;
                let u = blocked_winograd(&w, f, c, tile);
                let u_shape = [36, f.div_ceil(PANEL) as i64, c as i64, PANEL as i64];
                row(
                    "blocked Winograd F(4x4)",
                    self.run(quick, (&x, &blocked_x), (&u, &u_shape), &blocked_out),
                );
            }
        }
        rows.extend(bf16_row);
        rows
    }
}

/// A dense layer `x[m, k] · w[n, k]ᵀ`, plain and packed in panels.
fn dense_rows(quick: bool, layer: &str, (m, k, n): (usize, usize, usize)) -> Vec<Row> {
    let x = values(m * k, 3);
    let w = values(n * k, 4);
    let panels = pack_panels(k, n, |at, column| w[column * k + at]);
    let forms: [(&'static str, &[f32], Vec<i64>); 2] = [
        ("gemm crate, w [N, K]", &w, vec![n as i64, k as i64]),
        (
            "column panels",
            &panels,
            vec![n.div_ceil(PANEL) as i64, k as i64, PANEL as i64],
        ),
    ];
    let mut rows: Vec<Row> = forms
        .into_iter()
        .map(|(form, weights, w_shape)| {
            let mut out = vec![0f32; m * n];
            let (x_shape, out_shape) = ([m as i64, k as i64], [m as i64, n as i64]);
            let args = [
                Argument::input(&x, &x_shape).expect("x fits"),
                Argument::input(weights, &w_shape).expect("w fits"),
                Argument::int(1),
                Argument::int(0),
                Argument::output(&mut out, &out_shape).expect("out fits"),
            ];
            Row {
                family: "dense",
                layer: format!("{layer} {m}x{k} . {k}x{n}"),
                form,
                seconds: call(quick, "relax_runtime.dense", &args),
                work: Work::Flops(2.0 * (m * n * k) as f64),
            }
        })
        .collect();
    let bf16_panels = pack_bf16_panels(k, n, |at, column| w[column * k + at]);
    let bf16_shape = [n.div_ceil(PANEL) as i64, k.div_ceil(2) as i64, PANEL as i64];
    let mut out = vec![0f32; m * n];
    let (x_shape, out_shape) = ([m as i64, k as i64], [m as i64, n as i64]);
    let args = [
        Argument::input(&x, &x_shape).expect("x fits"),
        Argument::input(&bf16_panels, &bf16_shape).expect("w fits"),
        Argument::int(0),
        Argument::int(0),
        Argument::output(&mut out, &out_shape).expect("out fits"),
    ];
    rows.push(Row {
        family: "dense",
        layer: format!("{layer} {m}x{k} . {k}x{n}"),
        form: "bf16 panels of pairs",
        seconds: call(quick, "relax_runtime.dense_bf16", &args),
        work: Work::Bf16Flops(2.0 * (m * n * k) as f64),
    });
    rows
}

/// A detector head's 2x upsampling: ConvTranspose 4x4, stride 2, padding 1.
fn conv_transpose_row(
    quick: bool,
    (channels, filters, height, width): (usize, usize, usize, usize),
) -> Row {
    let (out_height, out_width) = (2 * height, 2 * width);
    let x = values(channels * height * width, 14);
    let w = values(channels * filters * 16, 15);
    let mut out = vec![0f32; filters * out_height * out_width];
    let shapes = [
        [1, channels as i64, height as i64, width as i64],
        [channels as i64, filters as i64, 4, 4],
        [1, filters as i64, out_height as i64, out_width as i64],
    ];
    let mut args = vec![
        Argument::input(&x, &shapes[0]).expect("x fits"),
        Argument::input(&w, &shapes[1]).expect("w fits"),
    ];
    args.extend([2, 2, 1, 1, 1, 1, 1, 1, 1, 1].map(Argument::int));
    args.push(Argument::output(&mut out, &shapes[2]).expect("out fits"));
    Row {
        family: "conv2d_transpose",
        layer: format!("detector head 4x4/2 {channels}->{filters} @{height}x{width}"),
        form: "gemm + scatter",
        seconds: call(quick, "relax_runtime.conv2d_transpose", &args),
        work: Work::Flops(2.0 * (channels * filters * 16 * height * width) as f64),
    }
}

/// Attention's `q · kᵀ` over heads.
fn batch_matmul_row(quick: bool, (heads, m, k, n): (usize, usize, usize, usize)) -> Row {
    let (h, m_, k_, n_) = (heads as i64, m as i64, k as i64, n as i64);
    let a = values(heads * m * k, 5);
    let b = values(heads * n * k, 6);
    let mut out = vec![0f32; heads * m * n];
    let shapes = [[h, m_, k_], [h, n_, k_], [h, m_, n_]];
    let args = [
        Argument::input(&a, &shapes[0]).expect("a fits"),
        Argument::input(&b, &shapes[1]).expect("b fits"),
        Argument::int(1),
        Argument::float(0.125),
        Argument::output(&mut out, &shapes[2]).expect("out fits"),
    ];
    Row {
        family: "batch_matmul",
        layer: format!("MiniLM q.kT {heads}x{m}x{k} . {k}x{n}"),
        form: "gemm crate",
        seconds: call(quick, "relax_runtime.batch_matmul", &args),
        work: Work::Flops(2.0 * (heads * m * n * k) as f64),
    }
}

/// Softmax and layer normalization of MiniLM's shapes (bytes read and written).
fn row_kernel_rows(quick: bool) -> Vec<Row> {
    let scores = [12i64, 128, 128];
    let x = values(elements(&scores), 7);
    let mut out = vec![0f32; x.len()];
    let softmax = call(
        quick,
        "relax_runtime.softmax",
        &[
            Argument::input(&x, &scores).expect("x fits"),
            Argument::output(&mut out, &scores).expect("out fits"),
        ],
    );
    let hidden = [128i64, 384];
    let (x, gamma, beta) = (values(128 * 384, 8), values(384, 9), values(384, 10));
    let mut out = vec![0f32; x.len()];
    let layer_norm = call(
        quick,
        "relax_runtime.layer_norm",
        &[
            Argument::input(&x, &hidden).expect("x fits"),
            Argument::input(&gamma, &hidden[1..]).expect("gamma fits"),
            Argument::input(&beta, &hidden[1..]).expect("beta fits"),
            Argument::float(1e-12),
            Argument::output(&mut out, &hidden).expect("out fits"),
        ],
    );
    vec![
        Row {
            family: "rows",
            layer: "MiniLM softmax 12x128x128".to_string(),
            form: "softmax",
            seconds: softmax,
            work: Work::Bytes(8.0 * elements(&scores) as f64),
        },
        Row {
            family: "rows",
            layer: "MiniLM layer norm 128x384".to_string(),
            form: "layer_norm",
            seconds: layer_norm,
            work: Work::Bytes(8.0 * elements(&hidden) as f64),
        },
    ]
}

/// MobileNetV2's 144 channels over 56x56 to channel blocks and back (bytes read and
/// written).
fn layout_rows(quick: bool) -> Vec<Row> {
    let nchw = [1i64, 144, 56, 56];
    let blocked = [1i64, 9, 56, 56, 16];
    let x = values(elements(&nchw), 11);
    let mut out = vec![0f32; x.len()];
    let transform = |from: &[i64], to: &[i64], x: &[f32], out: &mut [f32]| {
        call(
            quick,
            "relax_runtime.layout_blocked",
            &[
                Argument::input(x, from).expect("x fits"),
                Argument::output(out, to).expect("out fits"),
            ],
        )
    };
    let to_blocks = transform(&nchw, &blocked, &x, &mut out);
    let mut back = vec![0f32; x.len()];
    let to_nchw = transform(&blocked, &nchw, &out, &mut back);
    let bytes = 8.0 * x.len() as f64;
    vec![
        Row {
            family: "layout",
            layer: "MobileNetV2 144x56x56".to_string(),
            form: "NCHW to blocks",
            seconds: to_blocks,
            work: Work::Bytes(bytes),
        },
        Row {
            family: "layout",
            layer: "MobileNetV2 144x56x56".to_string(),
            form: "blocks to NCHW",
            seconds: to_nchw,
            work: Work::Bytes(bytes),
        },
    ]
}

/// An LSTM layer's steps (the recurrence products and gates; the input projection is a
/// dense layer), 100 steps, batch 1, hidden 256: a speech or OCR model's size.
fn recurrent_row(quick: bool) -> Row {
    let (steps, batch, hidden, gates) = (100usize, 1usize, 256usize, 4usize);
    let (t, b, h, g) = (steps as i64, batch as i64, hidden as i64, gates as i64);
    let xw = values(steps * batch * gates * hidden, 11);
    let r = values(gates * hidden * hidden, 12)
        .iter()
        .map(|v| v * 0.05)
        .collect::<Vec<_>>();
    let rb = values(gates * hidden, 13);
    let p = vec![0f32; 3 * hidden];
    let state = vec![0f32; batch * hidden];
    let (mut y, mut y_h, mut y_c) = (
        vec![0f32; steps * batch * hidden],
        vec![0f32; batch * hidden],
        vec![0f32; batch * hidden],
    );
    let (xw_shape, r_shape, rb_shape) = ([1, t, b, g * h], [1, h, g * h], [1, g * h]);
    let (p_shape, state_shape, y_shape) = ([1, 3 * h], [1, b, h], [t, 1, b, h]);
    let mut args = vec![
        Argument::input(&xw, &xw_shape).expect("xw fits"),
        Argument::input(&r, &r_shape).expect("r fits"),
        Argument::input(&rb, &rb_shape).expect("rb fits"),
        Argument::input(&p, &p_shape).expect("p fits"),
        Argument::input(&[], &[0]).expect("no lengths"),
        Argument::input(&state, &state_shape).expect("h0 fits"),
        Argument::input(&state, &state_shape).expect("c0 fits"),
        Argument::int(2), // LSTM
        Argument::int(0), // forward
        Argument::int(0), // linear_before_reset
        Argument::int(0), // input_forget
        Argument::float(0.0),
    ];
    // f = sigmoid, g = tanh, h = tanh.
    for code in [2, 1, 1] {
        args.extend([
            Argument::int(code),
            Argument::float(0.0),
            Argument::float(0.0),
        ]);
    }
    args.push(Argument::output(&mut y, &y_shape).expect("y fits"));
    args.push(Argument::output(&mut y_h, &state_shape).expect("y_h fits"));
    args.push(Argument::output(&mut y_c, &state_shape).expect("y_c fits"));
    Row {
        family: "recurrent",
        layer: format!("LSTM {steps} steps, batch {batch}, hidden {hidden}"),
        form: "steps",
        seconds: call(quick, "relax_runtime.recurrent", &args),
        work: Work::Flops(2.0 * (steps * batch * gates * hidden * hidden) as f64),
    }
}

/// silero-vad's convolutions over its 4-frame window (one call of the streaming model):
/// its STFT (258 filters of 256 taps at stride 128 over 640 samples) and its first
/// encoder layer (129 to 128 channels, 3 taps with padding 1, over 4 frames). Onto so
/// few pixels the kernel takes dot products along the depth (`dots`).
fn window_rows(quick: bool) -> Vec<Row> {
    // (layer, channels, filters, input width, kernel width, stride, padding).
    let layers = [
        (
            "silero-vad STFT 1x256/128 1->258 @1x640",
            1,
            258,
            640,
            256,
            128,
            0,
        ),
        (
            "silero-vad encoder 1x3/1 129->128 @1x4",
            129,
            128,
            4,
            3,
            1,
            1,
        ),
    ];
    layers
        .into_iter()
        .map(|(layer, c, f, width, k, stride, pad)| {
            let out_width = (width + 2 * pad - k) / stride + 1;
            let x = values(c * width, 1);
            let w = values(f * c * k, 2);
            let mut out = vec![0f32; f * out_width];
            let (x_shape, w_shape) = (
                [1, c as i64, 1, width as i64],
                [f as i64, c as i64, 1, k as i64],
            );
            let out_shape = [1, f as i64, 1, out_width as i64];
            let mut args = vec![
                Argument::input(&x, &x_shape).expect("x fits"),
                Argument::input(&w, &w_shape).expect("w fits"),
            ];
            // strides, padding (top, left, bottom, right), dilation, groups, no epilogue.
            let (stride, pad) = (stride as i64, pad as i64);
            args.extend([1, stride, 0, pad, 0, pad, 1, 1, 1, 0].map(Argument::int));
            args.push(Argument::output(&mut out, &out_shape).expect("out fits"));
            Row {
                family: "conv2d",
                layer: layer.to_string(),
                form: "dot products (NCHW)",
                seconds: call(quick, "relax_runtime.conv2d", &args),
                work: Work::Flops(2.0 * (f * out_width * c * k) as f64),
            }
        })
        .collect()
}

/// One core's peak of float32 multiply-adds, in GFLOP/s, and the instructions used.
fn peak() -> (f64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F (checked above).
            return (unsafe { x86::peak_avx512() }, "AVX-512 FMA");
        }
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            return (unsafe { x86::peak_avx2() }, "AVX2 FMA");
        }
    }
    (portable_peak(), "scalar mul_add (portable estimate)")
}

/// One core's peak of bf16 multiply-adds with the instructions the bf16 kernels run
/// (AMX-BF16's `tdpbf16ps`, or AVX512-BF16's `vdpbf16ps`), in GFLOP/s and how, where the
/// CPU has either.
fn bf16_peak() -> Option<(f64, &'static str)> {
    #[cfg(target_arch = "x86_64")]
    {
        if relax_kernels::bf16_instructions() == "AMX-BF16" {
            // SAFETY: AMX-BF16 runs here and the process may use it (the library said so,
            // having asked Linux for the tiles' state).
            return Some((
                unsafe { x86::peak_amx_bf16() },
                "AMX-BF16 tdpbf16ps, 16 rows of 8 pairs, 4 tiles of sums, no loads",
            ));
        }
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
        {
            // SAFETY: the CPU has AVX-512F and AVX512-BF16 (checked above).
            return Some((unsafe { x86::peak_avx512_bf16() }, "AVX512-BF16 vdpbf16ps"));
        }
    }
    None
}

/// Runs `chains` (independent accumulators of `lanes` floats) for a fixed count and
/// returns GFLOP/s.
fn rate(lanes: usize, chains: usize, iterations: usize, seconds: f64) -> f64 {
    2.0 * (lanes * chains * iterations) as f64 / seconds / 1e9
}

fn portable_peak() -> f64 {
    let iterations = 20_000_000;
    let mut acc = [1.0f32; 8];
    let start = Instant::now();
    for _ in 0..iterations {
        for value in acc.iter_mut() {
            *value = value.mul_add(0.999_999, 1e-7);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    std::hint::black_box(acc);
    rate(1, 8, iterations, seconds)
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;
    use std::time::Instant;

    /// Independent accumulators: enough to cover the FMA latency on two ports.
    const CHAINS: usize = 12;
    const ITERATIONS: usize = 20_000_000;

    /// # Safety
    /// The CPU has AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn peak_avx512() -> f64 {
        let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        let start = Instant::now();
        for _ in 0..ITERATIONS {
            for value in acc.iter_mut() {
                *value = _mm512_fmadd_ps(*value, a, b);
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(acc);
        super::rate(16, CHAINS, ITERATIONS, seconds)
    }

    /// # Safety
    /// The CPU has AVX-512F and AVX512-BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn peak_avx512_bf16() -> f64 {
        // Twice the chains of the FMA loop: with 12, the dense tile (24 accumulators) ran
        // at 102-104% of the figure.
        const BF16_CHAINS: usize = 2 * CHAINS;
        let pairs = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0.5), _mm512_set1_ps(0.25));
        let mut acc = [_mm512_set1_ps(1.0); BF16_CHAINS];
        let start = Instant::now();
        for _ in 0..ITERATIONS / 2 {
            for value in acc.iter_mut() {
                *value = _mm512_dpbf16_ps(*value, pairs, pairs);
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(acc);
        // Two multiply-adds per float32 lane.
        super::rate(32, BF16_CHAINS, ITERATIONS / 2, seconds)
    }

    /// `tdpbf16ps` into 4 independent tiles of 16 x 16 sums from 16 rows of 8 pairs (the
    /// form the convolution tiles use: a block of 16 channels), its operands loaded once.
    ///
    /// # Safety
    /// AMX-BF16 runs here and the process may use the tiles.
    pub(super) unsafe fn peak_amx_bf16() -> f64 {
        // Palette 1; registers 0-3 16 rows x 64 bytes, 4 16 x 32 bytes, 5 8 x 64 bytes.
        let mut config = [0u8; 64];
        config[0] = 1;
        for (tile, rows, bytes) in [
            (0, 16, 64),
            (1, 16, 64),
            (2, 16, 64),
            (3, 16, 64),
            (4, 16, 32),
            (5, 8, 64),
        ] {
            config[16 + 2 * tile] = bytes;
            config[48 + tile] = rows;
        }
        const STEPS: usize = 2_000_000;
        let start = Instant::now();
        // SAFETY: AMX runs here (the contract); a valid configuration; the tile registers
        // are no Rust value's, and are released at the end.
        unsafe {
            std::arch::asm!("ldtilecfg [{}]", "tilezero tmm4", "tilezero tmm5", in(reg) config.as_ptr());
            for _ in 0..STEPS {
                std::arch::asm!(
                    "tdpbf16ps tmm0, tmm4, tmm5",
                    "tdpbf16ps tmm1, tmm4, tmm5",
                    "tdpbf16ps tmm2, tmm4, tmm5",
                    "tdpbf16ps tmm3, tmm4, tmm5",
                    options(nostack, nomem)
                );
            }
            std::arch::asm!("tilerelease", options(nostack, nomem));
        }
        let seconds = start.elapsed().as_secs_f64();
        // 16 x 16 sums of 8 pairs (16 products), per tile.
        super::rate(16 * 16 * 16, 4, STEPS, seconds)
    }

    /// # Safety
    /// The CPU has AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn peak_avx2() -> f64 {
        let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        let start = Instant::now();
        for _ in 0..ITERATIONS {
            for value in acc.iter_mut() {
                *value = _mm256_fmadd_ps(*value, a, b);
            }
        }
        let seconds = start.elapsed().as_secs_f64();
        std::hint::black_box(acc);
        super::rate(8, CHAINS, ITERATIONS, seconds)
    }
}

fn convolutions() -> Vec<Conv> {
    let conv = |model, channels, filters, size, kernel, stride, groups| Conv {
        model,
        channels,
        filters,
        size,
        kernel,
        stride,
        groups,
    };
    vec![
        conv("ResNet-50", 3, 64, 224, 7, 2, 1),
        conv("ResNet-50", 64, 64, 56, 1, 1, 1),
        conv("ResNet-50", 64, 64, 56, 3, 1, 1),
        conv("ResNet-50", 64, 256, 56, 1, 1, 1),
        conv("ResNet-50", 128, 128, 28, 3, 1, 1),
        conv("ResNet-50", 256, 256, 14, 3, 1, 1),
        conv("ResNet-50", 1024, 256, 14, 1, 1, 1),
        conv("ResNet-50", 512, 512, 7, 3, 1, 1),
        conv("MobileNetV2", 3, 32, 224, 3, 2, 1),
        conv("MobileNetV2", 32, 32, 112, 3, 1, 32),
        conv("MobileNetV2", 96, 96, 112, 3, 2, 96),
        conv("MobileNetV2", 144, 144, 56, 3, 1, 144),
        conv("MobileNetV2", 144, 144, 56, 3, 2, 144),
        conv("MobileNetV2", 576, 576, 14, 3, 1, 576),
        conv("MobileNetV2", 384, 384, 14, 3, 1, 384),
        conv("MobileNetV2", 960, 960, 7, 3, 1, 960),
        conv("EfficientNet-B0", 240, 240, 28, 5, 1, 240),
        conv("EfficientNet-B0", 240, 240, 28, 5, 2, 240),
        conv("EfficientNet-B0", 16, 96, 112, 1, 1, 1),
        conv("EfficientNet-B0", 24, 144, 56, 1, 1, 1),
        conv("MobileNetV2", 32, 16, 112, 1, 1, 1),
        conv("MobileNetV2", 144, 32, 28, 1, 1, 1),
        conv("MobileNetV2", 960, 320, 7, 1, 1, 1),
        conv("MobileNetV2", 960, 160, 7, 1, 1, 1),
        conv("MobileNetV2", 160, 960, 7, 1, 1, 1),
        // A DBNet detector's first 1x1 layer onto whole blocks, after 8-channel ones (over
        // 240x320 there; square here), and its FPN output layers (over 120x160).
        conv("DBNet", 8, 32, 240, 1, 1, 1),
        conv("DBNet", 96, 24, 120, 3, 1, 1),
        conv("DBNet", 96, 32, 120, 3, 1, 1),
        conv("DBNet", 96, 32, 30, 3, 1, 1),
        // 3x3 layers of few channels or filters (Winograd from one block of each).
        conv("DenseNet-121", 128, 32, 56, 3, 1, 1),
        conv("DenseNet-121", 128, 32, 28, 3, 1, 1),
        conv("SqueezeNet", 16, 64, 55, 3, 1, 1),
        conv("SqueezeNet", 32, 128, 27, 3, 1, 1),
    ]
}

fn main() {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let quick = arguments.iter().any(|argument| argument == "--quick");
    COLD.store(
        arguments.iter().any(|argument| argument == "--cold"),
        Ordering::Relaxed,
    );
    // `cargo bench` passes `--bench`; any other word filters the rows.
    let filter = arguments
        .iter()
        .find(|argument| !argument.starts_with("--"))
        .cloned();
    let wanted = |family: &str, layer: &str| {
        filter
            .as_deref()
            .is_none_or(|filter| family.contains(filter) || layer.contains(filter))
    };
    let (peak, how) = peak();
    println!("core peak: {peak:.1} GFLOP/s ({how}, one core)");
    let (bf16_peak, bf16_how) = bf16_peak().unzip();
    match bf16_peak.zip(bf16_how) {
        Some((bf16, how)) => {
            println!("bf16 peak: {bf16:.1} GFLOP/s ({how}, one core; the bf16 rows' %)")
        }
        None => println!("bf16 peak: - (no AVX512-BF16: the bf16 rows run the portable tile)"),
    }
    println!("kernels run on one core (the `inline` launch); GFLOP/s counts direct multiply-adds");
    println!();
    println!("| family | layer | form | ms | GFLOP/s | % of peak |\n|---|---|---|---:|---:|---:|");
    let mut print = |row: Row| {
        let figures = match row.work {
            Work::Flops(flops) => {
                let rate = flops / row.seconds / 1e9;
                format!("{rate:.1} | {:.0}%", 100.0 * rate / peak)
            }
            Work::Bf16Flops(flops) => {
                let rate = flops / row.seconds / 1e9;
                bf16_peak.map_or(format!("{rate:.1} | -"), |bf16| {
                    format!("{rate:.1} | {:.0}% (bf16)", 100.0 * rate / bf16)
                })
            }
            Work::Bytes(bytes) => format!("{:.1} GB/s | -", bytes / row.seconds / 1e9),
        };
        println!(
            "| {} | {} | {} | {:.3} | {figures} |",
            row.family,
            row.layer,
            row.form,
            row.seconds * 1e3
        );
    };
    for conv in convolutions() {
        if wanted("conv2d", &conv.name()) {
            conv.rows(quick).into_iter().for_each(&mut print);
        }
    }
    for row in window_rows(quick) {
        if wanted("conv2d", &row.layer) {
            print(row);
        }
    }
    for (layer, sizes) in [
        ("MiniLM qkv", (128, 384, 384)),
        ("MiniLM ffn up", (128, 384, 1536)),
        ("MiniLM ffn down", (128, 1536, 384)),
        ("ResNet-50 fc", (1, 2048, 1000)),
    ] {
        if wanted("dense", layer) {
            dense_rows(quick, layer, sizes)
                .into_iter()
                .for_each(&mut print);
        }
    }
    if wanted("conv2d_transpose", "detector head") {
        print(conv_transpose_row(quick, (64, 32, 60, 80)));
    }
    if wanted("batch_matmul", "MiniLM q.kT") {
        print(batch_matmul_row(quick, (12, 128, 32, 128)));
    }
    if wanted("rows", "MiniLM softmax layer norm") {
        row_kernel_rows(quick).into_iter().for_each(&mut print);
    }
    if wanted("layout", "MobileNetV2 144x56x56") {
        layout_rows(quick).into_iter().for_each(&mut print);
    }
    if wanted("recurrent", "LSTM") {
        print(recurrent_row(quick));
    }
}
