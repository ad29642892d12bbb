"""Computations on weights alone, done once at build time instead of at every call.

An importer often reshapes, slices or transposes a weight before using it: TVM's ONNX
importer splits an LSTM's stacked directions with `take` and its bias with
`strided_slice`, and reshapes a convolution's bias to [1, C, 1, 1]. With the weights
embedded these fold as constants; with the weights kept as parameters (a model over
ONNX_EMBED_LIMIT_BYTES) they would run at every call, and the kernels' load-time packing
would see the untransformed weight. The weights' values are known when the model is
built, so `precomputed` evaluates those computations then: the function takes their
results as its weights instead."""

from .errors import DriverError

# Precomputing may not grow the weights past this factor of their size (a broadcast of a
# weight would be written out in full; left to run at each call instead).
GROWTH_LIMIT = 1.5


def precomputed(ir_module, arrays):
    """(`ir_module` with what `main` computes from its weights alone done now, the values
    of `main`'s weight parameters then, their names). `arrays` are the values of
    `main`'s weight parameters (those after `num_input`), in order.

    A weight used as it is, or only reshaped (a view, which costs nothing at run time
    and which offload.py undoes for a convolution's bias), stays a parameter with its
    name; each other result becomes a new weight after the ones kept, named after the
    weights it reads (`name:k`). Unchanged when nothing else is computed from weights
    alone, or when precomputing would grow the weights past GROWTH_LIMIT."""
    import tvm
    from tvm import relax

    function = ir_module["main"]
    count = int(function.attrs["num_input"])
    weight_vars = list(function.params)[count:]
    names = [str(var.name) for var in weight_vars]
    if not weight_vars:
        return ir_module, arrays, names
    lifted = relax.transform.LiftTransformParams()(ir_module)
    transform = lifted["main_transform_params"]
    results = lifted_results(transform)
    computed = [index for index, result in enumerate(results) if result.view_of is None]
    if not computed or any(result.shape is None for result in results):
        # Nothing to do, or a result that is no tensor of static shape (a tuple of
        # weights): left to run at each call.
        return ir_module, arrays, names
    new_main = lifted["main"]
    result_vars = list(new_main.params)[int(new_main.attrs["num_input"]) :]
    kept = sorted({result.view_of for result in results if result.view_of is not None})
    new_bytes = sum(arrays[index].nbytes for index in kept) + sum(tensor_bytes(result_vars[k]) for k in computed)
    if new_bytes > GROWTH_LIMIT * sum(array.nbytes for array in arrays):
        return ir_module, arrays, names
    values = evaluated(transform, arrays)
    if len(values) != len(results):
        raise DriverError(
            "weights", f"precomputing the weights gave {len(values)} values for {len(results)} results"
        )
    computed_names = unique_names([[names[i] for i in results[k].sources] for k in computed], names)
    new_weights = [relax.Var(names[index], weight_vars[index].ty) for index in kept]
    new_weights += [relax.Var(name, result_vars[k].ty) for name, k in zip(computed_names, computed)]
    by_index = dict(zip(kept, new_weights))
    replacements = {}
    for k, (var, result) in enumerate(zip(result_vars, results)):
        if result.view_of is None:
            replacements[var] = new_weights[len(kept) + computed.index(k)]
        elif dims_of(result.shape) == dims_of(weight_vars[result.view_of].ty.shape):
            replacements[var] = by_index[result.view_of]
        else:
            replacements[var] = relax.BlockBuilder().normalize(relax.op.reshape(by_index[result.view_of], result.shape))
    bound = new_main.bind_params(replacements)
    rewritten = relax.Function(
        list(new_main.params)[: int(new_main.attrs["num_input"])] + new_weights,
        bound.body,
        bound.ret_ty,
        bound.is_pure,
        bound.attrs,
    )
    functions = {gv: func for gv, func in lifted.functions.items() if gv.name_hint != "main_transform_params"}
    module = tvm.IRModule(functions, attrs=lifted.attrs)
    module["main"] = rewritten
    module = relax.transform.Normalize()(module)
    new_arrays = [arrays[index] for index in kept] + [values[k] for k in computed]
    return module, new_arrays, [names[index] for index in kept] + computed_names


class LiftedResult:
    """One result of the lifted `main_transform_params`: the indices of the weights it
    reads (`sources`), the weight it is a view of (`view_of`: the same values, maybe
    reshaped; else None) and its shape (None unless it is a tensor of static shape)."""

    def __init__(self, sources, view_of, shape):
        self.sources = sources
        self.view_of = view_of
        self.shape = shape


VIEWS = ("relax.reshape", "relax.expand_dims", "relax.squeeze")


def lifted_results(transform):
    """The results of the lifted `main_transform_params`, as LiftedResults."""
    from tvm import relax

    param = transform.params[0]
    values = {}
    for block in transform.body.blocks:
        for binding in block.bindings:
            values[binding.var] = binding.value

    def resolved(expr):
        while isinstance(expr, relax.Var) and expr in values:
            expr = values[expr]
        return expr

    def sources_of(expr, seen):
        expr_value = resolved(expr)
        if isinstance(expr_value, relax.TupleGetItem) and expr_value.tuple_value.same_as(param):
            return {int(expr_value.index)}
        if isinstance(expr, relax.Var):
            if expr in seen:
                return set()
            seen.add(expr)
        found = set()
        for child in children(expr_value):
            found |= sources_of(child, seen)
        return found

    def view_of(expr):
        value = resolved(expr)
        if isinstance(value, relax.TupleGetItem) and value.tuple_value.same_as(param):
            return int(value.index)
        if isinstance(value, relax.Call) and getattr(value.op, "name", None) in VIEWS:
            return view_of(value.args[0])
        return None

    output = resolved(transform.body.body)
    fields = output.fields if isinstance(output, relax.Tuple) else [output]
    return [
        LiftedResult(sorted(sources_of(field, set())), view_of(field), static_shape(field.ty))
        for field in fields
    ]


def children(expr):
    """The Relax expressions `expr` reads directly (call arguments, tuple fields)."""
    from tvm import relax

    if isinstance(expr, relax.Call):
        return list(expr.args)
    if isinstance(expr, relax.Tuple):
        return list(expr.fields)
    if isinstance(expr, relax.TupleGetItem):
        return [expr.tuple_value]
    return []


def static_shape(ty):
    """The shape of a tensor type whose dims are all known, else None."""
    from tvm import relax, tirx

    if not isinstance(ty, relax.TensorType) or ty.shape is None or not hasattr(ty.shape, "values"):
        return None
    if not all(isinstance(dim, tirx.IntImm) for dim in ty.shape.values):
        return None
    return ty.shape


def dims_of(shape):
    """A static shape's dims as ints (a weight's shape always is static)."""
    return [int(dim) for dim in shape.values]


def tensor_bytes(var):
    """The size of a statically shaped tensor parameter (0 when it is not one)."""
    from tvm import relax

    info = var.ty
    if not isinstance(info, relax.TensorType) or info.shape is None:
        return 0
    count = 1
    for dim in info.shape.values:
        count *= int(dim)
    bits = {"float64": 64, "int64": 64, "float16": 16, "bfloat16": 16, "int8": 8, "uint8": 8, "bool": 8}
    return count * bits.get(str(info.dtype), 32) // 8


def evaluated(transform, arrays):
    """The results of `transform` (the lifted `main_transform_params`) on the weights
    `arrays`, compiled for this machine's CPU, as numpy arrays."""
    import tvm
    from tvm import relax

    module = tvm.IRModule({"main": transform.with_attr("global_symbol", "main")})
    try:
        executable = tvm.compile(module, target=tvm.target.Target({"kind": "llvm"}))
        machine = relax.VirtualMachine(executable, tvm.cpu())
        results = machine["main"]([tvm.runtime.tensor(array) for array in arrays])
    except Exception as error:
        raise DriverError(
            "weights", f"precomputing the weights failed: {type(error).__name__}: {str(error)[:300]}"
        ) from error
    return [result.numpy() for result in results]


def unique_names(sources, taken):
    """A name per computed weight, from the names of the weights it reads (`sources`:
    a list of names per weight), joined by `+`, with `:k` counting repeats; none is
    in `taken`."""
    taken = set(taken)
    counts = {}
    out = []
    for source_names in sources:
        base = "+".join(source_names) or "computed"
        while True:
            counts[base] = counts.get(base, 0) + 1
            name = f"{base}:{counts[base]}"
            if name not in taken:
                break
        taken.add(name)
        out.append(name)
    return out
