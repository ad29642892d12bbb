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


def shape_of_tensor(bb, values, names, known=None):
    """An int64 tensor of `len(names)` dims, known at run time, as a shape variable whose
    dims are new symbolic variables named `names` (checked by a match_cast), or the
    entries of `known` that are not None (ints or dim expressions the graph gives, also
    checked). The variable itself is what a packed call takes; `reshape` and
    `broadcast_to` take `relax.ShapeExpr(shape.ty.values)` (TVM's legalization of them
    refuses a variable bound to a cast)."""
    from tvm import tirx

    known = [None] * len(names) if known is None else known
    dims = [tirx.Var(name, "int64") if value is None else value for name, value in zip(names, known)]
    values = bb.match_cast(values, relax.TensorType([len(names)], "int64"))
    shape = bb.emit(relax.op.tensor_to_shape(values))
    return bb.match_cast(shape, relax.ShapeType(dims))


def known_entries(bb, expr, length):
    """The entries of a 1-D int tensor computed at run time that the graph gives as
    constants: a list of `length` ints or None, read through the `concat`s and `astype`s
    that bound it (an exporter's `Concat` of a `Shape`'s dims with constants)."""
    from tvm.ir import Op

    unknown = [None] * length
    if isinstance(expr, GenericConst):
        values = [int(value) for value in expr.value.numpy().reshape(-1)]
        return values if len(values) == length else unknown
    if isinstance(expr, relax.Var):
        try:
            bound = bb.lookup_binding(expr)
        except Exception:  # not bound in this function (a parameter)
            bound = None
        return known_entries(bb, bound, length) if bound is not None else unknown
    if not isinstance(expr, relax.Call) or not isinstance(expr.op, Op):
        return unknown
    if expr.op.name == "relax.astype" and str(expr.ty.dtype) in ("int32", "int64"):
        return known_entries(bb, expr.args[0], length)
    if expr.op.name == "relax.concat" and isinstance(expr.args[0], relax.Tuple):
        entries = []
        for piece in expr.args[0].fields:
            dims = getattr(piece.ty, "shape", None)
            if not isinstance(dims, relax.ShapeExpr) or len(dims.values) != 1 or not isinstance(dims.values[0], IntImm):
                return unknown
            entries += known_entries(bb, piece, int(dims.values[0]))
        return entries if len(entries) == length else unknown
    return unknown
