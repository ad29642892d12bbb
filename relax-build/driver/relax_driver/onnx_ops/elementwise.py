"""Elementwise operators whose TVM converters get ONNX's details wrong:

- `BitShift` by an amount of at least the type's width or below zero (read as unsigned,
  so also too wide): ONNX gives 0 (and -1 for a negative value shifted right); TVM emits
  the machine's shift, which LLVM leaves undefined there (the build gave 4 for
  `4 << -8`);
- `Dropout`'s mask, which TVM returns in the input's dtype: ONNX's is bool;
- `Trilu` with `k` known only at run time, whose TVM converter fails to build ("the type
  is not populated") on a tensor of static shape.
"""

import tvm
from tvm import relax
from tvm.relax.frontend.onnx import onnx_frontend

from .common import const, constant_value, dims_of, dtype_of

UNSIGNED_FOR = {"int8": "uint8", "int16": "uint16", "int32": "uint32", "int64": "uint64"}


class BitShift(onnx_frontend.OnnxOpConverter):
    """`x << s` or `x >> s` (arithmetic on signed types), with ONNX's results where the
    amount `s`, read as unsigned, is at least the width."""

    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        x, amount = inputs
        direction = attr.get("direction", b"LEFT").decode("ascii")
        if direction not in ("LEFT", "RIGHT"):
            raise ValueError(f"BitShift: direction must be LEFT or RIGHT, not {direction!r}")
        dtype = dtype_of(x)
        width = tvm.DataType(dtype).bits
        unsigned = UNSIGNED_FOR.get(dtype, dtype)
        shift = relax.op.left_shift if direction == "LEFT" else relax.op.right_shift
        too_wide = relax.op.greater_equal(relax.op.astype(amount, unsigned), const(width, unsigned))
        # The shift itself by an amount within the width, so that no lane is undefined.
        shifted = shift(x, relax.op.where(too_wide, const(0, dtype), amount))
        if direction == "LEFT" or unsigned == dtype:
            filled = const(0, dtype)
        else:
            filled = relax.op.where(relax.op.less(x, const(0, dtype)), const(-1, dtype), const(0, dtype))
        return relax.op.where(too_wide, filled, shifted)


class Dropout(onnx_frontend.Dropout):
    """TVM's inference-time Dropout (the input as it is), with a bool mask of ones (from
    opset 10; before, the mask had the input's dtype, as TVM's converter gives it).
    A training mode known at build time with a ratio other than 0 is refused; one given
    at run time is taken as inference, as TVM's converter takes every Dropout."""

    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        return cls._impl_v12(bb, inputs[:1], attr, params)

    @classmethod
    def _impl_v12(cls, bb, inputs, attr, params):
        training = constant_value(inputs[2], params) if len(inputs) > 2 and inputs[2] is not None else None
        ratio = constant_value(inputs[1], params) if len(inputs) > 1 and inputs[1] is not None else None
        if training is not None and bool(training) and ratio is not None and float(ratio) != 0.0:
            raise ValueError(
                "Dropout in training mode draws random masks, which a compiled model does not: "
                "export the model for inference (training_mode false)"
            )
        x = inputs[0]
        mask = relax.op.ones(relax.ShapeExpr(dims_of(x)), "bool")
        return relax.Tuple([x, mask])

    _impl_v13 = _impl_v12


class Trilu(onnx_frontend.Trilu):
    """TVM's Trilu, with a run-time `k` compared with a column-minus-row index tensor."""

    @classmethod
    def _impl_v14(cls, bb, inputs, attr, params):
        k = inputs[1] if len(inputs) > 1 else None
        if k is None or constant_value(k, params) is not None:
            return super()._impl_v14(bb, inputs, attr, params)
        x = inputs[0]
        dims = dims_of(x)
        rows, columns = dims[-2], dims[-1]
        # (Relax's operators read their operands' types: each step is normalized first.)
        row = bb.normalize(relax.op.expand_dims(bb.normalize(relax.op.arange(0, rows, dtype="int64")), [1]))
        column = bb.normalize(relax.op.expand_dims(bb.normalize(relax.op.arange(0, columns, dtype="int64")), [0]))
        diagonal = bb.normalize(relax.op.subtract(column, row))
        k = bb.normalize(relax.op.astype(k, "int64"))
        compare = relax.op.greater_equal if attr.get("upper", 1) else relax.op.less_equal
        mask = bb.normalize(compare(diagonal, k))
        return relax.op.where(mask, x, const(0, dtype_of(x)))


CONVERTERS = {"BitShift": BitShift, "Dropout": Dropout, "Trilu": Trilu}
