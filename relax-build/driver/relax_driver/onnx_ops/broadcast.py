"""Operands whose symbolic dims TVM cannot prove equal, made equal as the ONNX graph
says they are.

An FPN adds a coarse level, upsampled, to a fine one: with symbolic image dims, the
fine level's height is `(height - 1) // 2 + 1` and the upsampled one's
`int64(2.0 * float32((height - 1) // 4 + 1))`. ONNX's broadcasting rules make them equal
at run time (neither is 1), but TVM's type inference cannot prove it and gives the sum
an unknown shape, which no operator after it can compile. Here, before an elementwise
operator (or a `Concat`, off its axis) converts, each later operand whose dim differs
from the first operand's (both symbolic, neither 1) is cast to the first one's dims: a
check at run time (the VM's `match_cast`), and known dims for everything after. A
`Concat`'s operands are equal off its axis, 1s included (see `concat_reference`).

The operand goes through an identity copy that forgets its dims before the cast: a
cast straight from it makes TVM 0.27's layout conversion (on the way to channel-blocked
convolutions) fail with "Cannot convert when exactly one of the layouts is unknown".
"""

from tvm import relax, sym, tirx

from ..bindings import COPY

# Operators whose operands broadcast against each other.
ELEMENTWISE = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Where", "Equal", "Greater", "Less",
               "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "PRelu", "BitShift")


def known_dims(expr):
    """A tensor operand's dims, or None when its type does not give them."""
    ty = getattr(expr, "ty", None)
    if isinstance(ty, relax.TensorType) and ty.shape is not None and isinstance(ty.shape, relax.ShapeExpr):
        return list(ty.shape.values)
    return None


def is_one(dim):
    return isinstance(dim, tirx.IntImm) and dim.value == 1


def differs(analyzer, mine, theirs):
    """Whether two dims that ONNX says are equal are symbolic and not provably equal."""
    if isinstance(mine, tirx.IntImm) or isinstance(theirs, tirx.IntImm) or is_one(mine) or is_one(theirs):
        return False
    return not analyzer.can_prove_equal(mine, theirs)


def asserted_dims(bb, expr, dims):
    """`expr` cast to `dims` (checked at run time), through a copy that forgets its dims."""
    dtype = expr.ty.dtype
    forgotten = bb.emit(
        relax.call_pure_packed(COPY, expr, ty_args=[relax.TensorType(ndim=len(dims), dtype=dtype)])
    )
    return bb.match_cast(forgotten, relax.TensorType(dims, dtype))


def concat_reference(operands, reference, skip_axis):
    """A Concat's dims off its axis: the first operand's (`reference`), each replaced by
    a number where another operand of the same rank has one there. A Concat's operands
    are equal off its axis (no broadcasting: a 1 against a symbolic dim is that dim,
    which a recognizer's `(height - 33) // 48 + 1` beside a pooled height of 1 must be)."""
    reference = list(reference)
    for operand in operands:
        dims = known_dims(operand)
        if dims is None or len(dims) != len(reference):
            continue
        for position, dim in enumerate(dims):
            if position != skip_axis and isinstance(dim, tirx.IntImm) and not isinstance(reference[position], tirx.IntImm):
                reference[position] = dim
    return reference


def aligned_operands(bb, operands, skip_axis=None):
    """`operands` with each later one's dims cast to the first one's where they differ
    (right-aligned, as broadcasting aligns them). `skip_axis` is a Concat's axis: its
    operands are cast to `concat_reference`, the first one too, 1s included."""
    first = next((operand for operand in operands if known_dims(operand) is not None), None)
    if first is None:
        return operands
    concat = skip_axis is not None
    reference = known_dims(first)
    if concat:
        reference = concat_reference(operands, reference, skip_axis)
    analyzer = sym.Analyzer()
    result = []
    for operand in operands:
        dims = known_dims(operand) if operand is not first or concat else None
        if dims is None or (concat and len(dims) != len(reference)):
            result.append(operand)
            continue
        offset = len(reference) - len(dims)
        wanted = list(dims)
        for index, dim in enumerate(dims):
            position = index + offset
            if position < 0 or position == skip_axis:
                continue
            mine = reference[position]
            if concat:
                mismatch = not isinstance(dim, tirx.IntImm) and not analyzer.can_prove_equal(mine, dim)
            else:
                mismatch = differs(analyzer, mine, dim)
            if mismatch:
                wanted[index] = mine
        changed = any(not wanted_dim.same_as(dim) for wanted_dim, dim in zip(wanted, dims))
        result.append(asserted_dims(bb, operand, wanted) if changed else operand)
    return result


def aligned(name, base):
    """`base` (the converter class of operator `name`) with its operands aligned first."""

    class Aligned(base):
        @classmethod
        def get_converter(cls, opset):
            convert = base.get_converter(opset)

            def converter(bb, inputs, attr, params):
                skip_axis = None
                if name == "Concat":
                    ranks = [len(known_dims(value)) for value in inputs if known_dims(value) is not None]
                    axis = attr.get("axis", 0)
                    skip_axis = axis + ranks[0] if ranks and axis < 0 else axis
                return convert(bb, aligned_operands(bb, list(inputs), skip_axis), attr, params)

            return converter

    Aligned.__name__ = f"Aligned{base.__name__}"
    return Aligned


def with_aligned_operands(converters, tvm_map):
    """`converters` (operator name -> class) with the elementwise operators and `Concat`
    aligning their operands, over this package's converter or TVM's (`tvm_map`)."""
    table = dict(converters)
    for name in (*ELEMENTWISE, "Concat"):
        base = table.get(name) or tvm_map.get(name)
        if base is not None:
            table[name] = aligned(name, base)
    return table

