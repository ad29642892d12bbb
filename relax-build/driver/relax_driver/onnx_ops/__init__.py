"""The driver's own ONNX converters, for operators TVM's importer lacks or gets wrong.

Each module of this package holds converters in TVM's form (a class with
`_impl_v<opset>` class methods taking `(bb, inputs, attr, params)`) and a `CONVERTERS`
dict from operator name to class. `registered()` lends them to TVM's importer for the
length of a `with` block, in place of or beside its own: TVM is not patched on disk.
"""

import contextlib

# Filled from the modules of this package: operator name -> converter class.
CONVERTERS = {}


def converters():
    """Every converter of this package, by operator name (the modules, which import
    TVM, are imported on first use)."""
    if not CONVERTERS:
        from . import attention, normalization, quantized, reductions, resize, rotary

        for module in (attention, normalization, quantized, reductions, resize, rotary):
            CONVERTERS.update(module.CONVERTERS)
    return dict(CONVERTERS)


def convert_map():
    """TVM's converters with this package's in their place or beside them."""
    from tvm.relax.frontend.onnx import onnx_frontend

    table = dict(onnx_frontend._get_convert_map())
    table.update(converters())
    return table


@contextlib.contextmanager
def registered():
    """TVM's ONNX importer, for the `with` block, uses `convert_map()`."""
    from tvm.relax.frontend.onnx import onnx_frontend

    original = onnx_frontend._get_convert_map

    def extended():
        table = original()
        table.update(converters())
        return table

    onnx_frontend._get_convert_map = extended
    try:
        yield
    finally:
        onnx_frontend._get_convert_map = original
