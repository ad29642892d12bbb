"""Exponentials that vectorize: how the backend legalizes `exp`, `sigmoid`, `tanh` and
`erf` on float32.

TVM lowers these ops to libm calls (`expf`, `tanhf`, `erff`). LLVM cannot vectorize a
call, so in a loop the default schedules vectorized, each of the 16 lanes calls `expf`
in turn: EfficientNet-B0 spent 27% of its time in `expf`, for the sigmoids of its SiLU
activations. TVM's fast forms (`topi.fast_exp`, `fast_tanh`, `fast_erf`; those of
`relax.transform.FastMathTransform`) are polynomials and rational functions of plain
arithmetic, which vectorize; their error is within a few float32 ulps. `fast_exp`
clamps its argument to [-88.38, 88.38], so `exp` of a larger float32 is 2.2e38, not
infinity, and a sigmoid below -88 is 4.5e-39, not 0 (both below float32's precision
where they matter: a sum with anything else).
"""


def _float32(call):
    return getattr(getattr(call.args[0], "ty", None), "dtype", None) == "float32"


def _sigmoid(x):
    """`1 / (1 + fast_exp(-x))`."""
    from tvm import te, topi

    exponential = topi.fast_exp(topi.negative(x))
    one = te.const(1, x.dtype)
    return te.compute(x.shape, lambda *index: one / (one + exponential(*index)), name="sigmoid")


def legalizations():
    """LegalizeOps' `customize_legalize_map` for these ops: the fast forms on float32,
    TVM's own legalization on any other dtype."""
    import tvm
    from tvm import topi

    forms = {
        "relax.exp": (topi.fast_exp, "fast_exp"),
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

    return {op_name: legalization(op_name, compute, name) for op_name, (compute, name) in forms.items()}
