"""Rewriting the values bound in a Relax function's body, one binding at a time, and the
variables and copies new bindings are made of."""

from tvm import relax

# The VM's identity copy (`call_pure_packed` of it gives a tensor whose dims are forgotten).
COPY = "vm.builtin.copy"


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
