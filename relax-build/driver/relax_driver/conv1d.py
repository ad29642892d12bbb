"""One-dimensional convolutions as two-dimensional ones over a plane one row high.

relax-runtime's convolution kernels, the channel-blocked layout and the weight packing
(blocked_layout.py, offload.py) serve 2-D convolutions; TVM's importer gives an ONNX
`Conv` over `[N, C, L]` as `relax.nn.conv1d`, which stayed TVM's default loops (an audio
model's front end, silero-vad's encoder: about 60% of its call). `as_conv2d` rewrites each
float32 NCW/OIW one as `squeeze(conv2d(expand_dims(x, 2), expand_dims(w, 2)), 2)`, the
stride, padding and dilation along the new width: the same sums in the same order. The
expand_dims and squeeze are reshapes, views of the same storage once lowered.
"""

from tvm import relax

from .bindings import functions_rewritten
from .offload import is_float32, op_name


def converts(call):
    """Whether `call` is a float32 conv1d in the layouts the rewrite takes."""
    if not isinstance(call, relax.Call) or op_name(call) != "relax.nn.conv1d":
        return False
    attrs = call.attrs
    return (
        is_float32(call.args[0], call.args[1])
        and attrs.data_layout == "NCW"
        and attrs.kernel_layout == "OIW"
        and attrs.out_layout in ("NCW", "")
        and attrs.out_dtype in ("", "float32", None)
    )


def as_conv2d(ir_module):
    """`ir_module` with each conv1d that `converts` takes computed as a conv2d."""

    @relax.expr_functor.mutator
    class Rewrite(relax.PyExprMutator):
        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not converts(call):
                return call
            attrs = call.attrs
            x = self.builder_.emit(relax.op.expand_dims(call.args[0], [2]))
            w = self.builder_.emit(relax.op.expand_dims(call.args[1], [2]))
            left, right = (int(value) for value in attrs.padding)
            y = self.builder_.emit(
                relax.op.nn.conv2d(
                    x,
                    w,
                    strides=[1, int(attrs.strides[0])],
                    padding=[0, left, 0, right],
                    dilation=[1, int(attrs.dilation[0])],
                    groups=int(attrs.groups),
                )
            )
            return relax.op.squeeze(y, [2])

    return functions_rewritten(ir_module, lambda function: Rewrite().visit_expr(function))
