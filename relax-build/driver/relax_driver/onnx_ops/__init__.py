"""The driver's own ONNX converters, for operators TVM's importer lacks or gets wrong.

Each module of this package holds converters in TVM's form (a class with
`_impl_v<opset>` class methods taking `(bb, inputs, attr, params)`) and a `CONVERTERS`
dict from operator name to class. `registered()` lends them to TVM's importer for the
length of a `with` block, in place of or beside its own: TVM is not patched on disk.
"""

import contextlib

# Filled from the modules of this package: operator name -> converter class.
CONVERTERS = {}


def converters(tvm_map):
    """Every converter of this package, by operator name, and the elementwise ones and
    `Concat` (this package's, else those of `tvm_map`, TVM's) aligning their operands'
    symbolic dims (see `broadcast`)."""
    from . import broadcast

    return broadcast.with_aligned_operands(CONVERTERS, tvm_map)


def convert_map():
    """TVM's converters with this package's in their place or beside them."""
    from tvm.relax.frontend.onnx import onnx_frontend

    table = dict(onnx_frontend._get_convert_map())
    table.update(converters(table))
    return table


class Converting:
    """The ONNX nodes being converted, outermost first, as (op type, node name): a
    control-flow node converts the nodes of its branches or body inside its own
    conversion. After a converter fails, its node is the last (TVM's importer names
    only the operator, and not at all inside a branch)."""

    def __init__(self):
        self.nodes = []
        # The If branches built as raising an error if taken (control_flow.unbuilt_branch).
        self.unbuilt_branches = []


def recorded(op_type, base, converting):
    """`base` (the converter class of `op_type`) noting its node in `converting` while it
    converts."""

    class Recorded(base):
        @classmethod
        def get_converter(cls, opset):
            convert = base.get_converter(opset)

            def converter(bb, inputs, attr, params):
                custom = attr.get("tvm_custom") or {}
                converting.nodes.append((op_type, custom.get("name") or ""))
                result = convert(bb, inputs, attr, params)
                converting.nodes.pop()
                return result

            return converter

    Recorded.__name__ = f"Recorded{base.__name__}"
    return Recorded


@contextlib.contextmanager
def registered():
    """TVM's ONNX importer, for the `with` block, uses `convert_map()`, each converter
    noting its node in the `Converting` the block gives, and converts each `If` branch
    in a scope of its own (`control_flow.branch_scoped`)."""
    from tvm.relax.frontend.onnx import onnx_frontend

    original = onnx_frontend._get_convert_map
    converting = Converting()
    table = {}

    def extended():
        # Made once: TVM's importer asks for the table at every node.
        if not table:
            base = original()
            base.update(converters(base))
            table.update({op_type: recorded(op_type, cls, converting) for op_type, cls in base.items()})
        return table

    importer = onnx_frontend.ONNXGraphImporter
    convert_subgraph = importer._convert_subgraph
    onnx_frontend._get_convert_map = extended
    importer._convert_subgraph = control_flow.branch_scoped(convert_subgraph, converting)
    try:
        yield converting
    finally:
        onnx_frontend._get_convert_map = original
        importer._convert_subgraph = convert_subgraph


# The modules of this package fill CONVERTERS (no two convert the same operator).
from . import (  # noqa: E402
    attention,
    contrib_activations,
    contrib_attention,
    contrib_fused,
    contrib_normalization,
    contrib_quantized,
    control_flow,
    elementwise,
    normalization,
    quantized,
    recurrent,
    reductions,
    resize,
    rotary,
    shape_values,
)

for _module in (attention, contrib_activations, contrib_attention, contrib_fused, contrib_normalization,
                contrib_quantized, control_flow, elementwise, normalization, quantized, recurrent, reductions, resize, rotary, shape_values):
    assert not set(_module.CONVERTERS) & set(CONVERTERS), f"{_module.__name__} converts an operator twice"
    CONVERTERS.update(_module.CONVERTERS)
