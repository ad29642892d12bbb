"""ONNX's control flow: If, Loop and Scan.

TVM's importer converts `If` itself (before any converter is asked): it converts both
branches into the enclosing scope and selects the result with a `relax.If`. The `If`
entry here only tells the supported-operator check that the importer handles it; an
`If` whose condition is a constant after the preparation step is folded there to its
branch (onnx_prepare.inline_constant_ifs).

`Scan` and `Loop` are unrolled: Scan over its scanned dim, which must be static, and
Loop when its trip count is a constant and its condition stays a constant true. Each
step's body is converted by the importer that called the converter (its
`_convert_subgraph`, which the `If` branches use), with the body's inputs bound to the
step's values.
"""

import sys

import numpy as np

from tvm import relax
from tvm.ir import GenericConst
from tvm.relax.frontend.onnx import onnx_frontend
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter


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


def run_body(importer, bb, body, values):
    """The outputs (a list) of the subgraph `body` with its inputs bound to `values`, its
    bindings emitted into the current scope of `bb`."""
    saved = importer._nodes
    importer._nodes = dict(saved)
    for graph_input, value in zip(body.input, values):
        importer._nodes[graph_input.name] = value
    try:
        result = importer._convert_subgraph(bb, body)
    finally:
        importer._nodes = saved
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


class Loop(OnnxOpConverter):
    """ONNX Loop, unrolled when its trip count is a constant and its condition is a
    constant true before and after every step (a `for` loop)."""

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        body = attr["body"]
        trip_count = constant_value(inputs[0]) if inputs[0] is not None else None
        if trip_count is None:
            raise ValueError("Loop: only a loop with a constant trip count is unrolled (its trip count is computed)")
        if inputs[1] is not None and not bool(np.all(constant_value(inputs[1]))):
            raise ValueError("Loop: the condition input is not a constant true")
        importer = calling_importer()
        carried = list(inputs[2:])
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
