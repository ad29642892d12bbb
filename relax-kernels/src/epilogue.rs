//! What a kernel applies to its output block while it is still in cache: a bias per
//! output column (dense) or channel (convolution), then an activation.

use super::simd::{exp_with, mul_add, multiversion};

/// The activation after a kernel, by the code relax-build's driver passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Epilogue {
    None,
    Relu,
    /// GELU with the exact erf (`0.5 x (1 + erf(x / sqrt 2))`).
    Gelu,
    /// GELU's tanh approximation.
    GeluTanh,
    /// `min(max(x, 0), 6)` (MobileNet's ReLU6).
    Relu6,
    /// `x * sigmoid(x)` (SiLU, or swish: EfficientNet's activation).
    Silu,
    /// `x * min(max(x + 3, 0), 6) / 6` (hard-swish: MobileNetV3's activation).
    HardSwish,
    /// `min(max(0.2 x + 0.5, 0), 1)`: ONNX's HardSigmoid with its default slope (Keras's
    /// and PaddlePaddle's hard-sigmoid; the gate of a PaddleOCR model's
    /// squeeze-excitation).
    HardSigmoid,
    /// `min(max(x / 6 + 0.5, 0), 1)`: HardSigmoid with a slope of 1/6, as PyTorch's
    /// `hardsigmoid` exports (the gate of MobileNetV3's squeeze-excitation).
    HardSigmoidSixth,
    /// `min(max(round(x), low), high)`, rounding half to even: an output quantized to
    /// 8 bits, less its zero point (a QDQ model's `QuantizeLinear` as the next layer reads
    /// it; the driver folds the scales into the kernel's). Its code is
    /// [`QUANTIZE_CODES`] + `(low + 2^15) * 2^16 + (high + 2^15)`.
    Quantize {
        low: i32,
        high: i32,
    },
}

/// The first code of [`Epilogue::Quantize`]; its bounds take the low 32 bits.
pub(crate) const QUANTIZE_CODES: i64 = 1 << 32;

impl Epilogue {
    pub(crate) fn from_code(code: i64) -> Result<Epilogue, String> {
        Ok(match code {
            0 => Epilogue::None,
            1 => Epilogue::Relu,
            2 => Epilogue::Gelu,
            3 => Epilogue::GeluTanh,
            4 => Epilogue::Relu6,
            5 => Epilogue::Silu,
            6 => Epilogue::HardSwish,
            7 => Epilogue::HardSigmoid,
            8 => Epilogue::HardSigmoidSixth,
            code if (QUANTIZE_CODES..QUANTIZE_CODES + (1 << 32)).contains(&code) => {
                let bounds = code - QUANTIZE_CODES;
                let (low, high) = (
                    (bounds >> 16) as i32 - (1 << 15),
                    (bounds & 0xffff) as i32 - (1 << 15),
                );
                if low > high {
                    return Err(format!(
                        "epilogue code {code}: quantization bounds [{low}, {high}] are empty"
                    ));
                }
                Epilogue::Quantize { low, high }
            }
            other => return Err(format!("unknown epilogue code {other}")),
        })
    }

    /// The bounds the activation clamps to, when it is a clamp (ReLU, ReLU6).
    pub(crate) fn bounds(self) -> Option<(f32, f32)> {
        match self {
            Epilogue::Relu => Some((0.0, f32::INFINITY)),
            Epilogue::Relu6 => Some((0.0, 6.0)),
            Epilogue::None
            | Epilogue::Gelu
            | Epilogue::GeluTanh
            | Epilogue::Silu
            | Epilogue::HardSwish
            | Epilogue::HardSigmoid
            | Epilogue::HardSigmoidSixth
            | Epilogue::Quantize { .. } => None,
        }
    }

    /// Whether the activation is more than a clamp: what the kernels apply to stored
    /// values (a GELU, a SiLU, a hard-swish, a hard-sigmoid) after what they apply in
    /// registers ([`Epilogue::bounds`]).
    pub(crate) fn after_registers(self) -> bool {
        self != Epilogue::None && self.bounds().is_none()
    }

    /// Applies the activation to `values` in place.
    pub(crate) fn apply(self, values: &mut [f32]) {
        if self != Epilogue::None {
            activate(self, values);
        }
    }
}

multiversion! {
    fn activate<const FMA: bool>(epilogue: Epilogue, values: &mut [f32]) {
        match epilogue {
            Epilogue::None => {}
            Epilogue::Relu => values.iter_mut().for_each(|value| *value = value.max(0.0)),
            Epilogue::Gelu => values.iter_mut().for_each(|value| *value = gelu::<FMA>(*value)),
            Epilogue::GeluTanh => {
                values.iter_mut().for_each(|value| *value = gelu_tanh::<FMA>(*value))
            }
            Epilogue::Relu6 => values.iter_mut().for_each(|value| *value = relu6(*value)),
            Epilogue::Silu => values.iter_mut().for_each(|value| *value = silu::<FMA>(*value)),
            Epilogue::HardSwish => values.iter_mut().for_each(|value| *value = hard_swish(*value)),
            Epilogue::HardSigmoid => values
                .iter_mut()
                .for_each(|value| *value = hard_sigmoid(HARD_SIGMOID_SLOPE, *value)),
            Epilogue::HardSigmoidSixth => values
                .iter_mut()
                .for_each(|value| *value = hard_sigmoid(HARD_SIGMOID_SIXTH_SLOPE, *value)),
            Epilogue::Quantize { low, high } => {
                let (low, high) = (low as f32, high as f32);
                values
                    .iter_mut()
                    .for_each(|value| *value = quantized(*value, low, high))
            }
        }
    }
}

/// `min(max(x, 0), 6)` by `f32::max`'s rule, as `strips` clamps in registers and as ReLU
/// does: a NaN becomes 0 (`f32::clamp` would keep it).
#[inline(always)]
#[allow(clippy::manual_clamp)]
fn relu6(value: f32) -> f32 {
    value.max(0.0).min(6.0)
}

/// `x * min(max(x + 3, 0), 6) / 6`, in the order ONNX's HardSwish is imported (the gate
/// divided by 6, then the product); a NaN stays NaN.
#[inline(always)]
fn hard_swish(x: f32) -> f32 {
    x * (relu6(x + 3.0) / 6.0)
}

/// `min(max(round(x), low), high)`, rounding half to even as ONNX's QuantizeLinear does;
/// a NaN becomes `low`, as TVM's lowering of the same ops gives.
#[inline(always)]
#[allow(clippy::manual_clamp)]
fn quantized(x: f32, low: f32, high: f32) -> f32 {
    x.round_ties_even().max(low).min(high)
}

/// ONNX's HardSigmoid's default slope (`alpha`), as a float32 attribute holds it.
const HARD_SIGMOID_SLOPE: f32 = 0.2;

/// 1/6 as a float32 attribute holds it (PyTorch's `hardsigmoid`).
const HARD_SIGMOID_SIXTH_SLOPE: f32 = 1.0 / 6.0;

/// `min(max(slope * x + 0.5, 0), 1)`, in the order ONNX's HardSigmoid is imported (the
/// product, the sum, then the clip: no fused multiply-add); a NaN becomes 0, as ReLU6's.
#[inline(always)]
#[allow(clippy::manual_clamp)]
fn hard_sigmoid(slope: f32, x: f32) -> f32 {
    (slope * x + 0.5).max(0.0).min(1.0)
}

multiversion! {
    /// Adds `bias` to each row of `rows` (row-major, `bias.len()` columns wide).
    pub(crate) fn add_bias_to_rows(rows: &mut [f32], bias: &[f32]) {
        for row in rows.chunks_exact_mut(bias.len()) {
            row.iter_mut().zip(bias).for_each(|(value, bias)| *value += bias);
        }
    }
}

multiversion! {
    /// `values += addend`, element by element.
    pub(crate) fn add(values: &mut [f32], addend: &[f32]) {
        values.iter_mut().zip(addend).for_each(|(value, addend)| *value += addend);
    }
}

/// What one filter's run of convolution outputs gets: `value * scale + shift + residual`,
/// then the activation.
#[derive(Clone, Copy)]
pub(crate) struct Finish<'a> {
    pub(crate) scale: f32,
    pub(crate) shift: f32,
    /// Laid out as the run.
    pub(crate) residual: Option<&'a [f32]>,
    pub(crate) epilogue: Epilogue,
}

impl Finish<'_> {
    /// Applies it to the run `values`, in place.
    pub(crate) fn apply(&self, values: &mut [f32]) {
        if (self.scale, self.shift) != (1.0, 0.0) {
            scale_shift(values, self.scale, self.shift);
        }
        if let Some(residual) = self.residual {
            add(values, residual);
        }
        self.epilogue.apply(values);
    }
}

multiversion! {
    /// `values = values * scale + shift` (a batch norm folded per filter).
    pub(crate) fn scale_shift(values: &mut [f32], scale: f32, shift: f32) {
        values.iter_mut().for_each(|value| *value = *value * scale + shift);
    }
}

/// erf for float32: Eigen's rational approximation on [-4, 4] (erf is ±1 beyond, to
/// float precision), a few ulp from the exact value, and branch-free so it vectorizes.
/// (Its multiply-adds fused where `FMA`, see [`multiversion!`].)
#[inline(always)]
pub(crate) fn erf<const FMA: bool>(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = mul_add::<FMA>(p, x2, 2.770_681_4e-8);
    p = mul_add::<FMA>(p, x2, -2.101_024e-6);
    p = mul_add::<FMA>(p, x2, -5.692_506_4e-5);
    p = mul_add::<FMA>(p, x2, -7.349_906e-4);
    p = mul_add::<FMA>(p, x2, -2.954_6e-3);
    p = mul_add::<FMA>(p, x2, -1.609_603_3e-2);
    let mut q = -1.456_607_2e-5_f32;
    q = mul_add::<FMA>(q, x2, -2.133_740_6e-4);
    q = mul_add::<FMA>(q, x2, -1.682_827e-3);
    q = mul_add::<FMA>(q, x2, -7.373_329e-3);
    q = mul_add::<FMA>(q, x2, -1.426_474e-2);
    x * p / q
}

#[inline(always)]
fn gelu<const FMA: bool>(x: f32) -> f32 {
    0.5 * x * (1.0 + erf::<FMA>(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// `x sigmoid(x) = x / (1 + e^-x)`, on the vectorizable exp (which clamps its argument:
/// a large |x| gives x, or a tiny value below, never a NaN).
#[inline(always)]
fn silu<const FMA: bool>(x: f32) -> f32 {
    x / (1.0 + exp_with::<FMA>(-x))
}

/// `0.5 x (1 + tanh(u))` with `tanh(u) = 1 - 2 / (e^(2u) + 1)`, on the vectorizable exp.
#[inline(always)]
fn gelu_tanh<const FMA: bool>(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    let tanh = 1.0 - 2.0 / (exp_with::<FMA>(2.0 * u) + 1.0);
    0.5 * x * (1.0 + tanh)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// erf to within 4e-7 (a few float32 ulp near ±1) of a double-precision reference
    /// (the series here is exact to double precision for |x| <= 4).
    #[test]
    fn erf_is_within_float_precision() {
        fn reference(x: f64) -> f64 {
            // erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1)), enough terms for |x| <= 4.
            let mut sum = 0.0;
            let mut term = x;
            for n in 0..200 {
                sum += term / (2 * n + 1) as f64;
                term *= -x * x / (n + 1) as f64;
            }
            sum * 2.0 / std::f64::consts::PI.sqrt()
        }
        for step in -400..=400 {
            let x = step as f64 / 100.0;
            for erf in [erf::<false>, erf::<true>] {
                let error = (erf(x as f32) as f64 - reference(x)).abs();
                assert!(error < 4e-7, "erf({x}): error {error}");
            }
        }
        assert_eq!(erf::<false>(10.0), erf::<false>(4.0));
    }

    #[test]
    fn activations_apply_in_place() {
        let mut values = [-1.0f32, 0.0, 2.0];
        Epilogue::Relu.apply(&mut values);
        assert_eq!(values, [0.0, 0.0, 2.0]);
        let mut values = [-1.0f32, 0.0, 2.0, 6.0, 7.5, f32::NAN];
        Epilogue::Relu6.apply(&mut values);
        assert_eq!(values, [0.0, 0.0, 2.0, 6.0, 6.0, 0.0]);
        assert_eq!(Epilogue::from_code(4), Ok(Epilogue::Relu6));
        let mut values = [1.0f32];
        Epilogue::Gelu.apply(&mut values);
        assert!((values[0] - 0.841_344_7).abs() < 1e-6);
        for x in [-6.0f32, -1.0, 0.0, 0.5, 3.0, 20.0] {
            let mut values = [x];
            Epilogue::GeluTanh.apply(&mut values);
            let exact = 0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044_715 * x * x * x)).tanh());
            assert!(
                (values[0] - exact).abs() < 1e-6 * (1.0 + exact.abs()),
                "gelu_tanh({x})"
            );
        }
        assert_eq!(Epilogue::from_code(5), Ok(Epilogue::Silu));
        for x in [-100.0f32, -20.0, -1.0, 0.0, 0.5, 3.0, 20.0, 100.0] {
            let mut values = [x];
            Epilogue::Silu.apply(&mut values);
            let exact = (f64::from(x) / (1.0 + (-f64::from(x)).exp())) as f32;
            assert!(
                (values[0] - exact).abs() <= 2e-6 * exact.abs() + 1e-30,
                "silu({x}): {} vs {exact}",
                values[0]
            );
        }
        assert_eq!(Epilogue::from_code(6), Ok(Epilogue::HardSwish));
        let mut values = [-4.0f32, -3.0, -1.5, 0.0, 1.5, 3.0, 10.0];
        Epilogue::HardSwish.apply(&mut values);
        assert_eq!(values, [0.0, 0.0, -0.375, 0.0, 1.125, 3.0, 10.0]);
        assert_eq!(Epilogue::from_code(7), Ok(Epilogue::HardSigmoid));
        let mut values = [-10.0f32, -2.5, -1.0, 0.0, 1.0, 2.5, 10.0];
        Epilogue::HardSigmoid.apply(&mut values);
        assert_eq!(values, [0.0, 0.0, 0.3, 0.5, 0.7, 1.0, 1.0]);
        assert_eq!(Epilogue::from_code(8), Ok(Epilogue::HardSigmoidSixth));
        let mut values = [-6.0f32, -3.0, -1.5, 0.0, 1.5, 3.0, 6.0];
        Epilogue::HardSigmoidSixth.apply(&mut values);
        assert_eq!(values, [0.0, 0.0, 0.25, 0.5, 0.75, 1.0, 1.0]);
        assert_eq!(
            Epilogue::from_code(9),
            Err("unknown epilogue code 9".to_string())
        );
        let code =
            |low: i64, high: i64| QUANTIZE_CODES + ((low + (1 << 15)) << 16) + high + (1 << 15);
        let quantize = Epilogue::from_code(code(-137, 118)).unwrap();
        assert_eq!(
            quantize,
            Epilogue::Quantize {
                low: -137,
                high: 118
            }
        );
        assert!(quantize.after_registers());
        let mut values = [
            -500.0f32,
            -2.5,
            -1.5,
            0.5,
            1.5,
            2.4999,
            117.6,
            300.0,
            f32::NAN,
        ];
        quantize.apply(&mut values);
        assert_eq!(
            values,
            [-137.0, -2.0, -2.0, 0.0, 2.0, 2.0, 118.0, 118.0, -137.0]
        );
        assert!(Epilogue::from_code(code(3, 2))
            .unwrap_err()
            .contains("are empty"));
        assert!(Epilogue::from_code(QUANTIZE_CODES + (1 << 32)).is_err());
        let mut rows = [1.0f32, 2.0, 3.0, 4.0];
        add_bias_to_rows(&mut rows, &[10.0, 20.0]);
        assert_eq!(rows, [11.0, 22.0, 13.0, 24.0]);
    }
}
