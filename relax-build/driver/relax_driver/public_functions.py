"""A module pass that rewrites each public Relax function (one with a global symbol: those
relax-runtime calls) and leaves the rest of the module as it is."""


def rewrite_pass(name, rewrite):
    """The module pass `name` that replaces each public Relax function by `rewrite(it)`."""
    import tvm
    from tvm import relax

    @tvm.transform.module_pass(opt_level=0, name=name)
    def apply(module, _context):
        for global_var, function in list(module.functions.items()):
            if not isinstance(function, relax.Function):
                continue
            if function.attrs is None or "global_symbol" not in function.attrs:
                continue
            module[global_var] = rewrite(function)
        return module

    return apply
