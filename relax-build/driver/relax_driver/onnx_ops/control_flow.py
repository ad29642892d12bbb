"""ONNX's control flow: If, Loop and Scan.

TVM's importer converts `If` itself (before any converter is asked): it converts both
branches and selects the result with a `relax.If`. It converts them into the enclosing
scope, so that both ran at every call (silero-vad computed its 16 and 8 kHz paths); with
`branch_scoped` (which `onnx_ops.registered` lends the importer) each branch is
converted into a binding block of its own, the body of its side of the `relax.If`, and
only the branch taken runs. The `If` entry here only tells the supported-operator check
that the importer handles it; an `If` whose condition is a constant after the
preparation step is folded there to its branch (onnx_prepare.inline_constant_ifs).

`Scan` is unrolled over its scanned dim, which must be static, and so is a `Loop` whose
trip count is a constant and whose condition stays a constant true. Each step's body is
converted by the importer that called the converter (its `_convert_subgraph`, which the
`If` branches use), with the body's inputs bound to the step's values.

Any other `Loop` (a trip count or a condition known only at run time) becomes a
recursive Relax function (`runtime_loop`): one call runs a step and calls itself on the
next step's values, until the trip count is reached or the condition is false; each scan
output grows by a concatenation per step. TVM's VM runs the recursion.
"""

import sys

import numpy as np

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.ir import GenericConst
from tvm.relax.frontend.onnx import onnx_frontend
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

from ..errors import failure_reason
from .common import static_dims


def calling_importer():
    """The ONNXGraphImporter converting the current node: the `self` of the nearest frame
    up the stack that is one (TVM passes converters no handle on it)."""
    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, onnx_frontend.ONNXGraphImporter):
            return candidate
        frame = frame.f_back
    raise RuntimeError("a control-flow converter was called outside TVM's ONNX importer")


def branch_scoped(convert_subgraph, converting):
    """`ONNXGraphImporter._convert_subgraph` (`convert_subgraph`) converting each graph
    into a binding block of its own and returning `SeqExpr([block], result)`: TVM's
    importer makes that the branch of its `relax.If`. `run_body` (a Loop's or Scan's
    unrolled steps, which belong to the enclosing scope) calls `convert_subgraph` itself,
    as `.unscoped`.

    A branch that cannot be converted while the other can, under a condition known only
    at run time and with every input dim known (a branch that cannot be built then
    cannot run with those dims), becomes `unbuilt_branch`: the model builds, and taking
    that branch raises an error naming it (onnxruntime, too, fails only when it runs
    such a branch: silero-vad's 8 kHz branch cannot run a 16 kHz chunk's length). A description of each
    goes to `converting.unbuilt_branches` (`onnx_ops.Converting`), for the build's
    warnings."""
    converted_types = {}

    def scoped(self, bb, graph):
        depth = len(converting.nodes)
        bb._begin_binding_block()
        try:
            result = convert_subgraph(self, bb, graph)
        except Exception as error:
            bb._end_block()
            failed = converting.nodes[depth:]
            caller = sys._getframe(1).f_locals
            converted = unbuilt_branch(self, bb, graph, error, failed, caller, converted_types, scoped)
            # The failed node is no longer being converted (nor what held it).
            del converting.nodes[depth:]
            converting.unbuilt_branches.append(converted.args[1].value)
            return converted
        block = bb._end_block()
        converted = relax.SeqExpr([block], result) if block.bindings else result
        converted_types[id(graph)] = bb.normalize(converted).ty
        return converted

    scoped.unscoped = convert_subgraph
    return scoped


# relax-runtime's function that fails with its message (`relax_runtime::backend`).
UNBUILT_BRANCH = "relax_runtime.unbuilt_branch"


def unbuilt_branch(importer, bb, graph, error, failed, caller, converted_types, convert):
    """A branch that raises its build error at run time, in place of `graph`, a branch
    of the If node the importer (`caller`, its frame's locals) is converting, which
    failed converting the nodes `failed` ((op type, name), outermost first); or `error`
    raised again when the If's condition is a constant, when `graph` is no branch of it,
    or when the other branch cannot be converted either."""
    node, attr, inputs = caller.get("node"), caller.get("attr") or {}, caller.get("inputs")
    branches = {"then": attr.get("then_branch"), "else": attr.get("else_branch")}
    side = next((name for name, branch in branches.items() if branch is graph), None)
    if node is None or node.op_type != "If" or side is None or not inputs or constant_value(inputs[0]) is not None:
        raise error
    if not inputs_static(importer):
        # With a dim left symbolic, the branch may be one that runs for some of its
        # values (a squeeze of a time dim of 1): the error and its fix, a pin, stand.
        raise error
    other = branches["else" if side == "then" else "then"]
    other_type = converted_types.get(id(other))
    if other_type is None:
        bb._begin_binding_block()
        try:
            other_type = bb.normalize(convert(importer, bb, other)).ty
        except Exception:
            raise error from None
        finally:
            bb._end_block()
    reason = failure_reason(error)
    where = f" on node `{failed[-1][1]}` ({failed[-1][0]})" if failed else ""
    message = (
        f"the {side} branch of If node `{node.name}` was not built: converting it failed{where} with {reason}; "
        "it cannot run with the input dims the model was built for"
    )
    return relax.call_pure_packed(UNBUILT_BRANCH, tvm.ir.StringImm(message), ty_args=erased(other_type))


def inputs_static(importer):
    """Whether every dim of the graph's inputs is known (pinned or static)."""
    for value in importer._inputs.values():
        shape = getattr(getattr(value, "ty", None), "shape", None)
        if not isinstance(shape, relax.ShapeExpr) or not all(isinstance(dim, tirx.IntImm) for dim in shape.values):
            return False
    return True


def erased(ty):
    """`ty` with its tensors' dims forgotten (their rank and dtype kept): an unbuilt
    branch's result, never made, takes the other's type without the dims that branch
    defines."""
    if isinstance(ty, relax.TupleType):
        return relax.TupleType([erased(field) for field in ty.fields])
    if isinstance(ty, relax.TensorType):
        return relax.TensorType(ndim=ty.ndim, dtype=ty.dtype)
    return ty


def run_body(importer, bb, body, values, outer=None):
    """The outputs (a list) of the subgraph `body` with its inputs bound to `values` (and
    the outer values it names to `outer`, by name, where given), its bindings emitted
    into the current scope of `bb` (which converters then emit into too)."""
    saved, saved_builder = importer._nodes, importer.bb
    importer._nodes = {**saved, **(outer or {})}
    importer.bb = bb
    for graph_input, value in zip(body.input, values):
        importer._nodes[graph_input.name] = value
    try:
        convert = importer._convert_subgraph
        result = getattr(convert, "unscoped", type(importer)._convert_subgraph)(importer, bb, body)
    finally:
        importer._nodes, importer.bb = saved, saved_builder
    if isinstance(result, relax.Tuple):
        return list(result.fields)
    return [result]


def static_dim(expr, axis):
    dim = expr.ty.shape.values[axis]
    if not hasattr(dim, "value"):
        raise ValueError(f"Scan: the scanned dim {axis} of {expr.ty} is not static, and only a static one is unrolled")
    return int(dim.value)


def constant_value(expr):
    """The numpy value of a constant expression, or None."""
    if isinstance(expr, GenericConst):
        return expr.value.numpy()
    return None


def stacked(bb, values, axis):
    """The per-step values stacked along a new `axis` (negative counts from the end)."""
    if axis < 0:
        axis += values[0].ty.ndim + 1
    return bb.emit(relax.op.stack(values, axis))


def scan(bb, importer, body, states, inputs, input_axes, input_reverse, output_axes, output_reverse):
    """Unrolled Scan: the final states and the stacked scan outputs (lists)."""
    if not inputs:
        raise ValueError("Scan without scan inputs")
    steps = static_dim(inputs[0], input_axes[0])
    per_step = []
    for step in range(steps):
        slices = []
        for value, axis, reverse in zip(inputs, input_axes, input_reverse):
            index = steps - 1 - step if reverse else step
            axis = axis % value.ty.ndim
            piece = relax.op.strided_slice(value, axes=[axis], begin=[index], end=[index + 1])
            slices.append(bb.emit(relax.op.squeeze(piece, [axis])))
        outputs = run_body(importer, bb, body, list(states) + slices)
        states = outputs[: len(states)]
        per_step.append(outputs[len(states) :])
    scan_outputs = []
    for k, (axis, reverse) in enumerate(zip(output_axes, output_reverse)):
        values = [step_outputs[k] for step_outputs in per_step]
        scan_outputs.append(stacked(bb, values[::-1] if reverse else values, axis))
    return list(states), scan_outputs


class Scan(OnnxOpConverter):
    """ONNX Scan, unrolled over its static scanned dim."""

    @classmethod
    def _impl_v8(cls, bb, inputs, attr, params):
        # Opset 8: input 0 is sequence_lens; every input has a batch dim 0, scanned on dim 1.
        if inputs[0] is not None:
            raise ValueError("Scan-8 with sequence_lens is not supported")
        body = attr["body"]
        num_scan = int(attr["num_scan_inputs"])
        values = list(inputs[1:])
        states = values[: len(values) - num_scan]
        reverse = list(attr.get("directions", [0] * num_scan))
        batch = static_dim(values[0], 0)
        importer = calling_importer()
        rows = []
        for b in range(batch):
            row = [bb.emit(relax.op.squeeze(relax.op.strided_slice(v, [0], [b], [b + 1]), [0])) for v in values]
            num_outputs = len(body.output) - len(states)
            rows.append(
                scan(
                    bb, importer, body, row[: len(states)], row[len(states) :],
                    [0] * num_scan, reverse, [0] * num_outputs, [0] * num_outputs,
                )
            )
        outputs = []
        for k in range(len(states)):
            outputs.append(stacked(bb, [row[0][k] for row in rows], 0))
        for k in range(len(body.output) - len(states)):
            outputs.append(stacked(bb, [row[1][k] for row in rows], 0))
        return relax.Tuple(outputs)

    @classmethod
    def _impl_v9(cls, bb, inputs, attr, params):
        body = attr["body"]
        num_scan = int(attr["num_scan_inputs"])
        values = list(inputs)
        num_states = len(values) - num_scan
        num_outputs = len(body.output) - num_states
        states, result = scan(
            bb,
            calling_importer(),
            body,
            values[:num_states],
            values[num_states:],
            list(attr.get("scan_input_axes", [0] * num_scan)),
            list(attr.get("scan_input_directions", [0] * num_scan)),
            list(attr.get("scan_output_axes", [0] * num_outputs)),
            list(attr.get("scan_output_directions", [0] * num_outputs)),
        )
        return relax.Tuple(states + result)


def outer_names(graph):
    """The names `graph` (and the graphs nested in its nodes) reads from outside itself."""
    defined = {value.name for value in graph.input} | {init.name for init in graph.initializer}
    read = []
    for node in graph.node:
        names = list(node.input)
        for attribute in node.attribute:
            nested = [attribute.g] if attribute.HasField("g") else list(attribute.graphs)
            for subgraph in nested:
                names += outer_names(subgraph)
        read += [name for name in names if name and name not in defined and name not in read]
        defined.update(node.output)
    return read


def scalar(dtype):
    return relax.TensorType([], dtype)


def runtime_loop(bb, importer, body, trip_count, condition, carried):
    """A Loop whose trip count or condition is known only at run time: the final carried
    values and the scan outputs, from a recursive Relax function of (iteration, trip
    count, condition, carried values, scan outputs so far, outer values the body reads)."""
    outer = {
        name: importer._nodes[name]
        for name in outer_names(body)
        if name in importer._nodes and not isinstance(importer._nodes[name], GenericConst)
    }
    iteration = relax.Var("iteration", scalar("int64"))
    limit = relax.Var("trip_count", scalar("int64"))
    keep_going = relax.Var("condition", scalar("bool"))
    states = [relax.Var(f"carried_{k}", value.ty) for k, value in enumerate(carried)]
    captured = {name: relax.Var(f"outer_{k}", value.ty) for k, (name, value) in enumerate(outer.items())}
    body_inputs = [iteration, keep_going, *states]

    # A first conversion, discarded, gives the types of the body's outputs.
    scratch = relax.BlockBuilder()
    with scratch.function("loop_body", [*body_inputs, *captured.values()], private=True):
        outputs = run_body(importer, scratch, body, body_inputs, captured)
        scratch.emit_func_output(relax.Tuple(outputs))
    for k, (state, output) in enumerate(zip(states, outputs[1 : 1 + len(states)])):
        ty = output.ty
        if not isinstance(ty, relax.TensorType) or ty.dtype != state.ty.dtype or ty.ndim != state.ty.ndim:
            raise ValueError(f"Loop: carried value {k} changes type in the body ({state.ty} to {ty})")
    # Each scan output's step value as a tensor of static shape: its type's, or the one
    # the body graph declares for it (checked at run time).
    scan_dims, scan_types = [], []
    for output, declared in zip(outputs[1 + len(states) :], body.output[1 + len(states) :]):
        dims = static_dims(output) if isinstance(output.ty, relax.TensorType) else None
        dims = dims if dims is not None else declared_dims(declared)
        if dims is None:
            raise ValueError(
                f"Loop: scan output {declared.name} is of type {output.ty} and the body declares no static shape "
                "for it (only tensors of static shape are stacked)"
            )
        scan_dims.append(dims)
        scan_types.append(relax.TensorType(dims, output.ty.dtype))
    steps = tirx.Var("steps", "int64")
    scans = [
        relax.Var(f"scan_{k}", relax.TensorType([steps, *dims], ty.dtype))
        for k, (dims, ty) in enumerate(zip(scan_dims, scan_types))
    ]
    params = [iteration, limit, keep_going, *states, *scans, *captured.values()]
    returned = relax.TupleType(
        [state.ty for state in states] + [relax.TensorType(dtype=ty.dtype, ndim=ty.ndim + 1) for ty in scan_types]
    )
    loop = tvm.ir.GlobalVar("onnx_loop")
    relax.expr._update_type(loop, relax.FuncType([param.ty for param in params], returned))

    inner = relax.BlockBuilder()
    inner.begin_scope(params)
    inner._begin_binding_block()
    go_on = inner.emit(relax.op.logical_and(relax.op.less(iteration, limit), keep_going))
    inner._begin_binding_block()
    outputs = run_body(importer, inner, body, body_inputs, captured)
    grown = [
        inner.emit(relax.op.concat([scan, relax.op.expand_dims(exactly(inner, output, ty), [0])], axis=0))
        for scan, output, ty in zip(scans, outputs[1 + len(states) :], scan_types)
    ]
    following = [
        inner.emit(relax.op.add(iteration, relax.const(1, "int64"))),
        limit,
        inner.emit(relax.op.astype(relax.op.reshape(outputs[0], []), "bool")),
        # A carried value whose shape the body's operators leave unknown keeps its own
        # (checked at run time).
        *[exactly(inner, output, state.ty) for output, state in zip(outputs[1 : 1 + len(states)], states)],
        *grown,
        *captured.values(),
    ]
    step = relax.SeqExpr([inner._end_block()], relax.Call(loop, following))
    done = relax.SeqExpr([], relax.Tuple([*states, *scans]))
    result = inner.emit(relax.If(go_on, step, done))
    function = relax.Function(params, relax.SeqExpr([inner._end_block()], result), returned, is_pure=True)
    inner.end_scope()
    bb.update_func(loop, function)

    start = [
        relax.const(0, "int64"),
        relax.op.reshape(trip_count, []) if trip_count is not None else relax.const(np.iinfo(np.int64).max, "int64"),
        relax.op.reshape(condition, []) if condition is not None else relax.const(True),
        *carried,
        *[relax.op.zeros(relax.ShapeExpr([0, *dims]), ty.dtype) for dims, ty in zip(scan_dims, scan_types)],
        *outer.values(),
    ]
    final = bb.emit(relax.Call(loop, [bb.normalize(value) for value in start]))
    values = [bb.emit(relax.TupleGetItem(final, k)) for k in range(len(states))]
    steps_taken = tirx.Var("loop_steps", "int64")
    for k, (dims, ty) in enumerate(zip(scan_dims, scan_types)):
        stacked_value = bb.emit(relax.TupleGetItem(final, len(states) + k))
        values.append(bb.match_cast(stacked_value, relax.TensorType([steps_taken, *dims], ty.dtype)))
    return values


def exactly(bb, value, ty):
    """`value` as of type `ty`: as it is when it has that type, else cast (checked at run
    time), where the body's operators left its shape unknown."""
    return value if tvm_ffi.structural_equal(value.ty, ty) else bb.match_cast(value, ty)


def declared_dims(value_info):
    """The static dims a graph declares for a value, or None."""
    tensor_type = value_info.type.tensor_type
    if not value_info.type.HasField("tensor_type") or not tensor_type.HasField("shape"):
        return None
    dims = tensor_type.shape.dim
    return [dim.dim_value for dim in dims] if all(dim.HasField("dim_value") for dim in dims) else None


class Loop(OnnxOpConverter):
    """ONNX Loop: unrolled when its trip count is a constant and its condition is a
    constant true before and after every step (a `for` loop), else a recursive function
    (`runtime_loop`)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        body = attr["body"]
        importer = calling_importer()
        trip_count = constant_value(inputs[0]) if inputs[0] is not None else None
        condition = constant_value(inputs[1]) if inputs[1] is not None else True
        constant_true = condition is not None and bool(np.all(condition))
        carried = list(inputs[2:])
        if trip_count is None or not constant_true:
            return relax.Tuple(runtime_loop(bb, importer, body, inputs[0], inputs[1], carried))
        per_step = []
        condition = relax.const(True)
        for index in range(int(trip_count)):
            iteration = relax.const(np.array(index, np.int64))
            outputs = run_body(importer, bb, body, [iteration, condition] + carried)
            if constant_value(outputs[0]) is None or not bool(np.all(constant_value(outputs[0]))):
                raise ValueError("Loop: the body's condition output is not a constant true")
            carried = outputs[1 : 1 + len(carried)]
            per_step.append(outputs[1 + len(carried) :])
        num_scan = len(body.output) - 1 - len(carried)
        if not per_step and num_scan:
            raise ValueError("Loop: scan outputs of a loop of no steps")
        scans = [stacked(bb, [step[k] for step in per_step], 0) for k in range(num_scan)]
        return relax.Tuple(carried + scans)


class If(OnnxOpConverter):
    """Never called: TVM's importer converts `If` before asking converters. The entry
    lets the supported-operator check know that `If` is handled."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        raise RuntimeError("TVM's importer converts If itself")


CONVERTERS = {"If": If, "Loop": Loop, "Scan": Scan}
