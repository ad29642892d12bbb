"""Float16 matrix products and softmaxes that accumulate in float32.

TVM legalizes a float16 `matmul` or `softmax` as float16 loops, so a sum is rounded to
float16 at every step: over a 64-long dot product, or a softmax's denominator, that
is several units in the last place off. numpy (the ONNX reference) and onnxruntime
accumulate float16 in float32 and round once; so do these legalizations: the operands
widened, the float32 op, the result rounded back to float16."""

WIDENED = ("relax.matmul", "relax.nn.softmax", "relax.nn.log_softmax")


def legalizations():
    """LegalizeOps' `customize_legalize_map` entries for the WIDENED ops: float16
    operands and result through float32, TVM's own legalization otherwise."""
    import tvm
    from tvm import relax

    def widened(op_name):
        default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

        def legalize(builder, call):
            dtypes = [str(arg.ty.dtype) for arg in call.args] + [str(call.ty.dtype)]
            if any(dtype != "float16" for dtype in dtypes):
                return default(builder, call)
            wide = [builder.emit(relax.op.astype(arg, "float32")) for arg in call.args]
            attrs = call.attrs
            if op_name == "relax.matmul":
                attrs = tvm.ir.make_node("relax.attrs.MatmulAttrs", out_dtype="float32")
            float32_call = builder.normalize(relax.Call(call.op, wide, attrs))
            result = builder.emit(default(builder, float32_call))
            return builder.call_te(tvm.topi.cast, result, "float16", primfunc_name_hint="cast")

        return legalize

    return {op_name: widened(op_name) for op_name in WIDENED}
