"""Compiling a test's model with the driver's backend pipeline, and reading the result
(shared by the driver's tests; not a test module itself)."""

import numpy as np
import tvm

from relax_driver import bindings, build, outputs
from relax_driver.onnx_ops.control_flow import UNBUILT_BRANCH


def host_output(shape, dtype):
    """What relax-runtime's `relax_runtime.output` does, for TVM's Python VM: a
    zero-filled tensor of that shape and dtype."""
    return tvm.runtime.tensor(np.zeros([int(size) for size in shape], str(dtype)))


def unbuilt_branch(message):
    """What relax-runtime's `relax_runtime.unbuilt_branch` does: fail with the message."""
    raise RuntimeError(str(message))


# A model compiled for a CPU target calls it for the tensors it returns (see outputs.py).
tvm.register_global_func(outputs.OUTPUT, host_output, override=True)
# And this for an If branch the driver could not build (onnx_ops/control_flow.py).
tvm.register_global_func(UNBUILT_BRANCH, unbuilt_branch, override=True)


def compiled(module, target):
    """`module` compiled by the backend pipeline, as the driver compiles it untuned."""
    passes = build.backend_passes(target, {})

    @tvm.transform.module_pass(opt_level=0)
    def backend(module, _context):
        with target:
            return tvm.transform.Sequential(passes)(module)

    with tvm.transform.PassContext(opt_level=3):
        return tvm.compile(bindings.copies_as_casts(module), target, relax_pipeline=backend)


def main_instructions(executable):
    """The VM instructions of `main`, one string each (as `as_text` prints them)."""
    text = executable.as_text()
    body = text.split("@main:\n", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in body.splitlines()]
