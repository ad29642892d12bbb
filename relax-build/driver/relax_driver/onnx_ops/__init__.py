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


@contextlib.contextmanager
def registered():
    """TVM's ONNX importer, for the `with` block, uses `convert_map()`."""
    from tvm.relax.frontend.onnx import onnx_frontend

    original = onnx_frontend._get_convert_map

    def extended():
        table = original()
        table.update(converters(table))
        return table

    onnx_frontend._get_convert_map = extended
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original


# The modules of this package fill CONVERTERS (no two convert the same operator).
from . import (  # noqa: E402
    attention,
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

for _module in (attention, control_flow, elementwise, normalization, quantized, recurrent, reductions, resize, rotary, shape_values):
    assert not set(_module.CONVERTERS) & set(CONVERTERS), f"{_module.__name__} converts an operator twice"
    CONVERTERS.update(_module.CONVERTERS)
