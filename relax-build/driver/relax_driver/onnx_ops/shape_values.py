"""Comparisons of a shape value with a tensor, which TVM's `Equal` converter passes to
`relax.op.equal` as they are (and Relax refuses a shape there).

A shape (`Shape` of a tensor with symbolic dims) meets a tensor that is no constant when
the preparation step has made a `Constant` node an initializer and the weights are
external (the initializer is then a parameter): exporters compare a `Shape` with -1s
this way before an `Expand`. The shape becomes an int64 tensor (`shape_to_tensor`).
"""

from tvm import relax
from tvm.ir import GenericConst
from tvm.relax.frontend.onnx import onnx_frontend


def is_shape(expr):
    return isinstance(expr, relax.Expr) and isinstance(expr.ty, relax.ShapeType)


def as_tensor(expr):
    """A shape value as an int64 tensor; any other expression as it is."""
    return relax.op.shape_to_tensor(expr) if is_shape(expr) else expr


class Equal(onnx_frontend.Equal):
    """TVM's `Equal`, with a shape compared to a non-constant tensor as a tensor."""

    @classmethod
    def _impl_v13(cls, bb, inputs, attr, params):
        mixed = any(is_shape(value) for value in inputs) and not all(
            is_shape(value) or isinstance(value, GenericConst) for value in inputs
        )
        if mixed:
            return relax.op.equal(as_tensor(inputs[0]), as_tensor(inputs[1]))
        return super()._impl_v13(bb, inputs, attr, params)


CONVERTERS = {"Equal": Equal}
