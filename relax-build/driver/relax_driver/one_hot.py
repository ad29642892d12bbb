"""Products of a one-hot encoding by a matrix, computed as the rows they pick.

Exports of byte- and character-level models write an embedding lookup as a one-hot
encoding multiplied by a matrix: `matmul(astype(equal(x, arange(n)), "float32"), W)`
with `x` integer codes of shape `[..., 1]` (magika's file-type model: 2048 bytes against
257 codes, by a `[257, 64]` matrix). The product multiplies and adds n times per output
value to pick one row of `W`; `take` picks it directly, and a code outside `[0, n)`,
whose one-hot row is all zeros, gets a zero row. The result is the product's: one term
is the row itself and the others are zeros (for finite `W`).
"""

import numpy as np
import tvm
from tvm import relax

from .bindings import bindings_of, bound_value, functions_rewritten, op_name, unused_removed
from .integer_products import dtype_of
from .offload import dims


def codes_count(constant):
    """n when `constant` holds 0, 1, ..., n - 1 along its last axis and has no other axis
    longer than 1, else None."""
    if not isinstance(constant, tvm.ir.Constant):
        return None
    values = constant.value.numpy()
    if values.ndim == 0 or values.dtype.kind not in "iu" or values.size != values.shape[-1]:
        return None
    return values.shape[-1] if np.array_equal(values.reshape(-1), np.arange(values.shape[-1])) else None


@relax.expr_functor.mutator
class OneHotProducts(relax.PyExprMutator):
    """See `as_rows`."""

    def __init__(self, bindings):
        super().__init__()
        self.bindings = bindings

    def bound(self, expr):
        """What `expr` is bound to, or `expr` itself when it is not a variable."""
        return bound_value(self, self.bindings, expr) if isinstance(expr, relax.Var) else expr

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if op_name(call) != "relax.matmul" or dtype_of(call) != "float32":
            return call
        one_hot, matrix = call.args[:2]
        cast = self.bound(one_hot)
        if op_name(cast) != "relax.astype" or dtype_of(cast) != "float32":
            return call
        test = self.bound(cast.args[0])
        if op_name(test) != "relax.equal":
            return call
        codes, count = None, None
        for first, second in (test.args, reversed(test.args)):
            count = codes_count(second)
            if count is not None:
                codes = first
                break
        codes_dims, matrix_dims = dims(codes) if codes is not None else None, dims(matrix)
        if count is None or codes_dims is None or matrix_dims is None or len(matrix_dims) != 2:
            return call
        if dtype_of(codes) not in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32"):
            return call
        last = codes_dims[-1]
        if not isinstance(last, tvm.tirx.IntImm) or int(last) != 1:
            return call
        rows = matrix_dims[0]
        if not isinstance(rows, tvm.tirx.IntImm) or int(rows) != count or len(dims(one_hot) or []) != len(codes_dims):
            return call
        # Positive axes: TVM 0.27's ConvertLayout fails (std::bad_alloc) on negative ones.
        index = relax.op.squeeze(relax.op.astype(codes, "int64"), axis=[len(codes_dims) - 1])
        valid = relax.op.logical_and(
            relax.op.greater_equal(index, relax.const(0, "int64")),
            relax.op.less(index, relax.const(count, "int64")),
        )
        picked = relax.op.take(matrix, relax.op.clip(index, 0, count - 1), axis=0)
        mask = relax.op.expand_dims(relax.op.astype(valid, "float32"), axis=len(codes_dims) - 1)
        return relax.op.multiply(picked, mask)


def as_rows(ir_module):
    """`ir_module` with each product of a one-hot encoding by a matrix (see the module's
    doc) computed as the matrix's rows it picks."""

    def rewrite(function):
        return unused_removed(function, OneHotProducts(bindings_of(function)).visit_expr(function))

    rewritten = functions_rewritten(ir_module, rewrite)
    return ir_module if rewritten is ir_module else relax.transform.Normalize()(rewritten)
