"""Small helpers the converters of this package share (a leaf: imports no sibling)."""

import numpy as np
from tvm import relax
from tvm.ir.expr import GenericConst
from tvm.ir.prim.expr import IntImm
from tvm.relax.frontend.onnx import onnx_frontend

# ONNX TensorProto element types -> TVM dtype names, for attributes naming a type.
ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 16: "bfloat16"}


def dtype_of(expr):
    """The element type of a tensor expression, as a string ("float32")."""
    return str(expr.ty.dtype.dtype) if hasattr(expr.ty.dtype, "dtype") else str(expr.ty.dtype)


def rank_of(expr):
    return expr.ty.ndim


def dims_of(expr):
    """The dims of a tensor expression: ints where static, PrimExprs where symbolic."""
    return [int(dim) if isinstance(dim, IntImm) else dim for dim in expr.ty.shape.values]


def static_dims(expr):
    """The dims as ints, or None when one is symbolic (or the shape is unknown)."""
    if not isinstance(expr.ty.shape, relax.ShapeExpr):
        return None
    dims = dims_of(expr)
    return dims if all(isinstance(dim, int) for dim in dims) else None


def const(value, dtype):
    """A relax constant of `dtype` (bfloat16 goes through float32: numpy lacks it)."""
    if dtype == "bfloat16":
        return relax.op.astype(relax.const(np.asarray(value, "float32")), "bfloat16")
    return relax.const(np.asarray(value, dtype), dtype)


def constant_value(expr, params):
    """The numpy value of a constant (or of a weight the importer holds as a parameter),
    or None for any other expression."""
    expr = onnx_frontend.get_constant(expr, params)
    return expr.value.numpy() if isinstance(expr, GenericConst) else None


def normalized_axes(axes, rank):
    """ONNX axes (negative from the end) as sorted non-negative ints."""
    return sorted(axis + rank if axis < 0 else axis for axis in axes)


def shape_of_tensor(bb, values, names):
    """An int64 tensor of `len(names)` dims, known at run time, as a shape variable whose
    dims are new symbolic variables named `names` (checked by a match_cast). The variable
    itself is what operators take (a shape expression of the symbolic variables alone
    would leave the cast unused, and dead code elimination would drop it before the dims
    are computed)."""
    from tvm import tirx

    values = bb.match_cast(values, relax.TensorType([len(names)], "int64"))
    shape = bb.emit(relax.op.tensor_to_shape(values))
    return bb.match_cast(shape, relax.ShapeType([tirx.Var(name, "int64") for name in names]))
