"""Each symbolic dim defined before it is used, after TVM's operator fusion.

A dim known only at run time (a reshape to a target computed from the data, see
onnx_ops/shape_values.py) is defined in the body by a `match_cast`. TVM's FuseOps re-emits
a dataflow block's bindings in an order made from their tensor dependencies alone, so a
binding that reads such a dim through no tensor (`shape_to_tensor` of the dim, which
legalization makes of `Shape` of a reshaped tensor) can land before the `match_cast`, and
VMShapeLower then fails: "PrimExpr reshape_dim_0 ... has not been computed" (ddddocr's
quantized recognizer). `pass_()` restores a valid order: the bindings of each dataflow
block in their order after fusion, except that a binding waits for the bindings that
define the variables and symbolic dims it uses.
"""

import heapq

from tvm import relax

from .bindings import functions_rewritten


def binding_needs(binding, symbolic_defined_by):
    """The bindings' variables and the symbolic dims (tir vars) `binding` reads."""
    value = binding.value
    variables = set(relax.analysis.free_vars(value))
    dims = set(relax.analysis.free_symbolic_vars(value)) if isinstance(value, relax.Expr) else set()
    if not isinstance(binding, relax.MatchCast):
        dims |= set(relax.analysis.tir_vars_in_type(binding.var.ty))
    return variables, {dim for dim in dims if dim in symbolic_defined_by}


def reordered(bindings):
    """`bindings` (of one dataflow block) in their order, each after what it needs."""
    defined_by = {}
    symbolic_defined_by = {}
    for index, binding in enumerate(bindings):
        defined_by[binding.var] = index
        if isinstance(binding, relax.MatchCast):
            for dim in relax.analysis.definable_tir_vars_in_type(binding.ty):
                symbolic_defined_by.setdefault(dim, index)
    waits_for = []
    for index, binding in enumerate(bindings):
        variables, dims = binding_needs(binding, symbolic_defined_by)
        needed = {defined_by[var] for var in variables if var in defined_by}
        needed |= {symbolic_defined_by[dim] for dim in dims}
        needed.discard(index)
        waits_for.append(needed)
    if all(all(other < index for other in needed) for index, needed in enumerate(waits_for)):
        return None
    waiting = [len(needed) for needed in waits_for]
    unblocks = [[] for _ in bindings]
    for index, needed in enumerate(waits_for):
        for other in needed:
            unblocks[other].append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for later in unblocks[index]:
            waiting[later] -= 1
            if waiting[later] == 0:
                heapq.heappush(ready, later)
    if len(order) != len(bindings):
        # A cycle: no valid order exists, and VMShapeLower will say where.
        return None
    return [bindings[index] for index in order]


def in_order(function):
    changed = False
    blocks = []
    for block in function.body.blocks:
        bindings = reordered(list(block.bindings)) if isinstance(block, relax.DataflowBlock) else None
        if bindings is None:
            blocks.append(block)
            continue
        changed = True
        blocks.append(relax.DataflowBlock(bindings))
    if not changed:
        return function
    body = relax.SeqExpr(blocks, function.body.body)
    return relax.Function(function.params, body, function.ret_ty, function.is_pure, function.attrs)


def pass_():
    """The module pass putting each Relax function's bindings in order (see the module)."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="SymbolicDimsInOrder")
    def ordered(module, _context):
        return functions_rewritten(module, in_order)

    return ordered
