"""The tensors a public function returns, allocated by relax-runtime on CPU targets.

TVM's VM allocates a returned tensor with `vm.builtin.alloc_storage` then
`vm.builtin.alloc_tensor` (its pooled allocator, behind a mutex) and drops the storage's
register after: three packed calls from its interpreter, which took 0.9-1.1 µs a call (a
function returning one [1, 4] tensor it allocates, against one returning its argument).
One call of relax-runtime's function instead made a model that adds two [1, 4] tensors
take 1.25-1.30 µs a call instead of 1.50-1.55 (both libraries called alternately).
After StaticPlanBlockMemory, which leaves the tensors a function returns unplanned (they
outlive the call), this pass rewrites each `R.builtin.alloc_tensor` whose tensor is
returned, alone or in the returned tuple, into one call of relax-runtime's
`relax_runtime.output(shape, dtype)`: a zero-filled, 64-byte aligned host buffer handed
to TVM as a DLPack tensor (see relax-runtime's outputs.rs). Intermediate tensors stay in
TVM's planned, pooled memory.

Only small outputs of static shape (at most LARGEST_OUTPUT bytes) are rewritten. The
buffer is zeroed so that no uninitialized byte can reach Rust, and a fresh, zeroed buffer
costs time in proportion to its size: a 4 MiB one took 282 µs to allocate and clear
(posix_memalign and memset in a loop; TVM's pool hands back a used buffer for nothing),
3% of a 1024^3 matmul. A 16 KiB one takes well under a microsecond, and a classifier's
logits (1000 float32 values) fit it. Larger or symbolic outputs stay with TVM's pool.
"""

from . import public_functions

OUTPUT = "relax_runtime.output"
LARGEST_OUTPUT = 16 * 1024


def is_small_and_static(ty):
    """Whether `ty` is a tensor of static shape of at most LARGEST_OUTPUT bytes."""
    from tvm import relax

    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return False
    sizes = getattr(ty.shape, "values", None)
    if sizes is None or not all(isinstance(getattr(size, "value", None), int) for size in sizes):
        return False
    elements = 1
    for size in sizes:
        elements *= int(size.value)
    dtype = tvm_dtype(str(ty.dtype))
    return dtype is not None and elements * ((dtype.bits * dtype.lanes + 7) // 8) <= LARGEST_OUTPUT


def tvm_dtype(name):
    """The DataType named `name`, or None for an unknown one."""
    import tvm

    if name in ("", "void"):
        return None
    return tvm.DataType(name)


def returned_vars(function):
    """The variables whose values the function returns: the returned variable, the fields
    of a returned tuple, and what each was bound from (`gv = alloc`)."""
    from tvm import relax

    bound = {}
    for block in function.body.blocks:
        for binding in block.bindings:
            if isinstance(binding, relax.VarBinding):
                bound[binding.var] = binding.value
    pending = [function.body.body]
    found = []
    while pending:
        expr = pending.pop()
        if isinstance(expr, relax.Tuple):
            pending.extend(expr.fields)
        elif isinstance(expr, relax.Var) and not any(expr.same_as(var) for var in found):
            found.append(expr)
            if expr in bound and isinstance(bound[expr], (relax.Var, relax.Tuple)):
                pending.append(bound[expr])
    return found


def is_host_allocation(value):
    """Whether `value` is `R.builtin.alloc_tensor` of a tensor on the first device (the
    CPU) in global memory."""
    import tvm
    from tvm import relax

    if not isinstance(value, relax.Call) or not value.op.same_as(tvm.ir.Op.get("relax.builtin.alloc_tensor")):
        return False
    _, _, device_index, *scope = value.args
    return int(device_index.value) == 0 and all(str(s.value) == "global" for s in scope)


def allocation_pass():
    """The module pass (right after StaticPlanBlockMemory) that rewrites the returned
    tensors' allocations."""
    from tvm import relax

    @relax.expr_functor.mutator
    class Outputs(relax.PyExprMutator):
        def __init__(self, returned):
            super().__init__()
            self.returned = returned

        def visit_var_binding_(self, binding):
            value = binding.value
            returned = any(binding.var.same_as(var) for var in self.returned)
            if returned and is_host_allocation(value) and is_small_and_static(binding.var.ty):
                shape, dtype = value.args[0], value.args[1]
                call = relax.Call(relax.ExternFunc(OUTPUT), [shape, dtype], ty_args=[binding.var.ty])
                self.builder_.emit_normalized(relax.VarBinding(binding.var, self.builder_.normalize(call)))
                return
            super().visit_var_binding_(binding)

    return public_functions.rewrite_pass(
        "RelaxRuntimeOutputs", lambda function: Outputs(returned_vars(function)).visit_expr(function)
    )
