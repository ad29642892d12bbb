"""Exponentials that vectorize: how the backend legalizes `exp`, `sigmoid`, `tanh`,
`erf`, `cosh` and `sinh` on float32.

TVM lowers these ops to libm calls (`expf`, `tanhf`, `erff`). LLVM cannot vectorize a
call, so in a loop the default schedules vectorized, each of the 16 lanes calls `expf`
in turn: EfficientNet-B0 spent 27% of its time in `expf`, for the sigmoids of its SiLU
activations. TVM's fast forms (`topi.fast_exp`, `fast_tanh`, `fast_erf`; those of
`relax.transform.FastMathTransform`) are polynomials and rational functions of plain
arithmetic, which vectorize; their error is within a few float32 ulps.

`exp` (and the sigmoid's) is written here rather than taken from `topi.fast_exp`, whose
`floor` needs SSE4.1: for the default x86-64 target (SSE2, as Rust's), LLVM called
libm's `floorf` once per lane again (EfficientNet-B0 took 21.7 ms with it, 15.9 ms
without, alternating runs). Here the floor is a truncating conversion and a compare,
which SSE2 has. The argument is clamped to [-87, 88], so `exp` of a larger float32 is
1.7e38, not infinity, and of a smaller one 1.6e-38, not less (both below float32's
precision where they matter: a sum with anything else); a sigmoid below -88 is 6e-39,
not less.
"""

# exp(x) = 2^n e^r with n = round(x log2 e) and r = x - n ln 2 in [-ln2 / 2, ln2 / 2]:
# ln 2 in two parts (the first exact in float32, so n * LN2_HIGH is too), and e^r by
# Cephes' float32 polynomial, 1 + r + r^2 p(r).
LOG2_E = 1.4426950408889634
LN2_HIGH = 0.693359375
LN2_LOW = -2.12194440e-4
EXP_POLYNOMIAL = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
# exp(88) and exp(-87) are normal float32 values; 2^n's exponent field n + 127 stays
# within [1, 254] between them.
EXP_LOW, EXP_HIGH = -87.0, 88.0


def _float32(call):
    return getattr(getattr(call.args[0], "ty", None), "dtype", None) == "float32"


def _exp_value(value):
    """exp of one float32 expression, in arithmetic that vectorizes on SSE2."""
    from tvm import tirx

    def const(number):
        return tirx.const(number, "float32")

    x = tirx.max(tirx.min(value, const(EXP_HIGH)), const(EXP_LOW))
    t = x * const(LOG2_E) + const(0.5)
    # floor(t): the conversion truncates toward zero, one less below zero.
    truncated = t.astype("int32")
    n = tirx.if_then_else(t < truncated.astype("float32"), truncated - 1, truncated)
    n_float = n.astype("float32")
    r = x - n_float * const(LN2_HIGH) - n_float * const(LN2_LOW)
    p = const(EXP_POLYNOMIAL[0])
    for coefficient in EXP_POLYNOMIAL[1:]:
        p = p * r + const(coefficient)
    e_r = p * (r * r) + r + const(1.0)
    two_to_n = tirx.reinterpret("float32", tirx.shift_left(n + 127, tirx.const(23, "int32")))
    return e_r * two_to_n


def _exp(x):
    """exp of a float32 tensor (see `_exp_value`)."""
    from tvm import te

    return te.compute(x.shape, lambda *index: _exp_value(x(*index)), name="fast_exp")


def _sigmoid(x):
    """`1 / (1 + exp(-x))`."""
    from tvm import te

    one = te.const(1, x.dtype)
    return te.compute(x.shape, lambda *index: one / (one + _exp_value(-x(*index))), name="sigmoid")


def _hyperbolic(x, odd):
    """`cosh` (`odd` false) or `sinh` of a float tensor, from exponentials.

    TVM's LLVM backend has no lowering of `cosh` and `sinh` in a vectorized loop (the
    build failed with "unknown intrinsic tirx.cosh"). sinh near zero is its series
    instead, where e^x - e^-x would cancel: below 0.5 the first term left out (x^9 / 9!
    in float32, x^17 / 17! else) is under 1e-8 (1e-19) of x.
    """
    from tvm import te, tirx

    def exp(value):
        return _exp_value(value) if x.dtype == "float32" else tirx.exp(value)

    def const(number):
        return tirx.const(number, x.dtype)

    def value(*index):
        v = x(*index)
        half = (exp(v) - exp(-v) if odd else exp(v) + exp(-v)) * const(0.5)
        if not odd:
            return half
        # x (1 + x^2 / (2 3) (1 + x^2 / (4 5) (1 + ...))), to x^7 in float32, x^15 else.
        square = v * v
        series = const(1)
        for k in range(3 if x.dtype == "float32" else 7, 0, -1):
            series = const(1) + square / const(2 * k * (2 * k + 1)) * series
        return tirx.if_then_else(tirx.abs(v) < const(0.5), v * series, half)

    return te.compute(x.shape, value, name="sinh" if odd else "cosh")


def legalizations():
    """LegalizeOps' `customize_legalize_map` for these ops: the fast forms on float32,
    TVM's own legalization on any other dtype."""
    import tvm
    from tvm import topi

    forms = {
        "relax.exp": (_exp, "fast_exp"),
        "relax.sigmoid": (_sigmoid, "fast_sigmoid"),
        "relax.tanh": (topi.fast_tanh, "fast_tanh"),
        "relax.erf": (topi.fast_erf, "fast_erf"),
    }

    def legalization(op_name, compute, name):
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def legalize(builder, call):
            if not _float32(call):
                return default(builder, call)
            return builder.call_te(compute, call.args[0], primfunc_name_hint=name)

        return legalize

    def hyperbolic(odd):
        def legalize(builder, call):
            return builder.call_te(_hyperbolic, call.args[0], odd, primfunc_name_hint="sinh" if odd else "cosh")

        return legalize

    legalized = {op_name: legalization(op_name, compute, name) for op_name, (compute, name) in forms.items()}
    return {**legalized, "relax.cosh": hyperbolic(False), "relax.sinh": hyperbolic(True)}
