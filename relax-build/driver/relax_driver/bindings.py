"""Rewriting the values bound in a Relax function's body, one binding at a time, and the
variables and copies new bindings are made of."""

import tvm
from tvm import relax

# The VM's identity copy (`call_pure_packed` of it gives a tensor whose dims are forgotten).
# It returns its argument itself, which TVM's memory planning does not know: before a
# build, `copies_as_casts` makes each one a cast.
COPY = "vm.builtin.copy"


def op_name(expr):
    """The name of the op `expr` calls (`relax.add`), or None when it calls none."""
    if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op):
        return expr.op.name
    return None


def new_var(name, ty, dataflow):
    """A new variable of type `ty`: a `DataflowVar` in a dataflow block, else a `Var`."""
    return relax.DataflowVar(name, ty) if dataflow else relax.Var(name, ty)


def rewritten_body(function, rewrite):
    """The function's body with each variable binding's value replaced by `rewrite(binding)`
    where that returns a value (None keeps the binding, as do match casts), in the same
    blocks; None when nothing was replaced."""
    changed = False
    blocks = []
    for block in function.body.blocks:
        bindings = []
        for binding in block.bindings:
            value = rewrite(binding) if isinstance(binding, relax.VarBinding) else None
            if value is not None:
                binding = relax.VarBinding(binding.var, value)
                changed = True
            bindings.append(binding)
        blocks.append(relax.DataflowBlock(bindings) if isinstance(block, relax.DataflowBlock) else relax.BindingBlock(bindings))
    return relax.SeqExpr(blocks, function.body.body) if changed else None


def rewritten_function(function, rewrite):
    """The function with its body rewritten as `rewritten_body` does, or the function
    itself when nothing was replaced."""
    body = rewritten_body(function, rewrite)
    if body is None:
        return function
    return relax.Function(function.params, body, function.ret_ty, function.is_pure, function.attrs)


def copies_as_casts(ir_module):
    """`ir_module` with each binding of `call_pure_packed(COPY, x)` made a cast of `x` to
    the copy's type (the same tensor, its dims forgotten).

    The copy lets the importer and the layout conversion forget a tensor's dims (a cast
    straight from the tensor makes TVM's ConvertLayout fail with "Cannot convert when
    exactly one of the layouts is unknown"), but the VM's copy is the tensor itself, and
    TVM's static memory planning, which does not know that, reused the tensor's storage
    for a value computed after the copy while the copy was still read: YOLOv8's box
    decoding (nudenet's export), `anchors - left_top` and `anchors + right_bottom`, read
    the right-bottom half twice. A cast is an alias the planner follows."""

    def is_copy(value):
        return (
            isinstance(value, relax.Call)
            and isinstance(value.op, tvm.ir.Op)
            and value.op.name == "relax.call_pure_packed"
            and isinstance(value.args[0], relax.ExternFunc)
            and str(value.args[0].global_symbol) == COPY
            and len(value.args) == 2
        )

    def with_casts(function):
        changed = False
        blocks = []
        for block in function.body.blocks:
            bindings = []
            for binding in block.bindings:
                if isinstance(binding, relax.VarBinding) and is_copy(binding.value):
                    binding = relax.MatchCast(binding.var, binding.value.args[1], binding.var.ty)
                    changed = True
                bindings.append(binding)
            dataflow = isinstance(block, relax.DataflowBlock)
            blocks.append(relax.DataflowBlock(bindings) if dataflow else relax.BindingBlock(bindings))
        if not changed:
            return function
        body = relax.SeqExpr(blocks, function.body.body)
        return relax.Function(function.params, body, function.ret_ty, function.is_pure, function.attrs)

    return functions_rewritten(ir_module, with_casts)


def functions_rewritten(ir_module, rewrite):
    """`ir_module` with each Relax function (of a sequence body) replaced by
    `rewrite(function)` where that is another function: a copy of the module, or the
    module itself when no function changed."""
    updated = {}
    for global_var, function in ir_module.functions.items():
        if isinstance(function, relax.Function) and isinstance(function.body, relax.SeqExpr):
            rewritten = rewrite(function)
            if not rewritten.same_as(function):
                updated[global_var] = rewritten
    if not updated:
        return ir_module
    ir_module = ir_module.clone() if hasattr(ir_module, "clone") else ir_module
    for global_var, function in updated.items():
        ir_module[global_var] = function
    return ir_module


def bindings_of(function):
    """{variable: value} of every binding in `function`, those of nested scopes too."""
    bindings = {}

    def visit(expr):
        if isinstance(expr, relax.SeqExpr):
            for block in expr.blocks:
                for binding in block.bindings:
                    if isinstance(binding, relax.VarBinding):
                        bindings[binding.var] = binding.value

    relax.analysis.post_order_visit(function, visit)
    return bindings


def bound_value(mutator, bindings, var):
    """What `var` is bound to, for a `PyExprMutator`: the builder's binding, else the
    function's own (`bindings`, see `bindings_of`: a variable the mutator left as it is,
    bound outside any dataflow block, is not the builder's to look up)."""
    value = mutator.lookup_binding(var)
    return bindings.get(var) if value is None else value


def unused_removed(function, rewritten):
    """`rewritten` (a rewrite of `function`) without the bindings it left unused, or
    `function` itself when the rewrite changed nothing."""
    return function if rewritten.same_as(function) else relax.analysis.remove_all_unused(rewritten)
