"""Drops the VM's checks of a call's arguments that relax-runtime makes before the call.

TVM's VMShapeLower starts every public function with a check per argument: its kind,
rank and dtype (`vm.builtin.check_tensor_info`), then its shape (`vm.builtin.match_shape`,
which also stores symbolic sizes for the shape computations that follow). Each is a
packed call from the VM's interpreter, with an error-context string: for a model that
adds two [1, 4] tensors they were 4 of its 9 instructions, and a call took 1.6-2.4 µs
with them, 1.0-1.5 µs without (relax-runtime calling both libraries alternately).

relax-runtime checks all of this before every call, from the signature compiled with the
library (`FunctionSignature::check_inputs`: count, dtype, rank, static sizes, a symbolic
name's size equal wherever it appears), and the weights it passes after the inputs when it
loads them (dtype and shape, also after packing them into a kernel's layout). So the
VM's checks of a public function's parameters are dropped where they only repeat those:

- `check_tensor_info` of a parameter whose type is a tensor of known rank and dtype;
- `match_shape` of a parameter whose sizes are all compared with constants (or not at all).

What relax-runtime does not check stays: a `match_shape` that stores a symbolic size
(the shape computations read it) or compares a size with one stored (`n` equal in two
arguments, a size computed as `n * 2`), and every check of a value computed inside the
function. A library built here is meant to be called through relax-runtime; called by
other means, its functions take the arguments their signature declares on trust.
"""

from . import public_functions

CHECK_TENSOR_INFO = "vm.builtin.check_tensor_info"
MATCH_SHAPE = "vm.builtin.match_shape"

# TVM's MatchShapeCode (its runtime header vm/builtin.h): what match_shape does with one size.
ASSERT_EQUAL_TO_IMM = 0
STORE_TO_HEAP = 1
NO_OP = 2
ASSERT_EQUAL_TO_LOAD = 3


def size_codes(call):
    """The MatchShapeCode of each size in a match_shape call.

    Its arguments are the value, the shape heap, the rank, then a (code, value) pair per
    size, then the error context when VMShapeLower emits one.
    """
    rank = int(call.args[2].value)
    return [int(call.args[3 + 2 * index].value) for index in range(rank)]


def checks_only_what_runtime_checks(call, parameters):
    """Whether the binding's value is a VM check that relax-runtime makes itself."""
    from tvm import relax

    if not isinstance(call, relax.Call) or not isinstance(call.op, relax.ExternFunc):
        return False
    if not call.args or not any(call.args[0].same_as(parameter) for parameter in parameters):
        return False
    checked = call.args[0].ty
    # An unknown dtype prints as "" (or "void").
    if not isinstance(checked, relax.TensorType) or checked.ndim < 0 or str(checked.dtype) in ("", "void"):
        return False
    name = call.op.global_symbol
    if name == CHECK_TENSOR_INFO:
        return True
    if name == MATCH_SHAPE:
        return all(code in (ASSERT_EQUAL_TO_IMM, NO_OP) for code in size_codes(call))
    return False


def drop_pass():
    """The module pass (after VMShapeLower) that drops those checks from public functions."""
    from tvm import relax

    @relax.expr_functor.mutator
    class DropChecks(relax.PyExprMutator):
        def __init__(self, parameters):
            super().__init__()
            self.parameters = parameters

        def visit_var_binding_(self, binding):
            if checks_only_what_runtime_checks(binding.value, self.parameters):
                return
            super().visit_var_binding_(binding)

    return public_functions.rewrite_pass(
        "DropArgumentChecks", lambda function: DropChecks(list(function.params)).visit_expr(function)
    )
