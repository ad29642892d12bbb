"""The signature of a compiled model: public functions, inputs, weights, outputs."""

from .errors import DriverError


def dim_to_json(dim):
    """A static dim as an int, a symbolic one as its expression text (`batch`)."""
    value = getattr(dim, "value", None)
    return int(value) if isinstance(value, int) else str(dim)


def tensor_type_to_json(ty, what):
    """A tensor type as {"dtype", "shape"}; dims without a known size are "?"."""
    from tvm import relax

    if not isinstance(ty, relax.TensorType):
        raise DriverError("unsupported_type", f"{what} has type {ty}; only tensors are supported", subject=what)
    if ty.ndim < 0:
        raise DriverError("unsupported_type", f"{what} is a tensor of unknown rank ({ty})", subject=what)
    values = getattr(ty.shape, "values", None) if ty.shape is not None else None
    shape = [dim_to_json(d) for d in values] if values is not None else ["?"] * ty.ndim
    return {"dtype": str(ty.dtype), "shape": shape}


def outputs_to_json(ty, function_name):
    import tvm

    if isinstance(ty, tvm.ir.TupleType):
        fields = [tensor_type_to_json(field, f"output {i} of `{function_name}`") for i, field in enumerate(ty.fields)]
        return fields, True
    return [tensor_type_to_json(ty, f"the output of `{function_name}`")], False


def signature_of(ir_module, weight_names, layouts=None):
    """Public Relax functions of the module, with arguments split into inputs and weights.

    `layouts` maps a function's name to {parameter index: {"layout": ..., "columns":
    ...}} for the weights it takes otherwise than stored (see offload.py): their
    signature shape is the one the function takes, with those keys added.
    """
    layouts = layouts or {}
    from tvm import relax

    functions = []
    for global_var, function in sorted(ir_module.functions.items(), key=lambda item: item[0].name_hint):
        if not isinstance(function, relax.Function):
            continue
        attrs = function.attrs if function.attrs is not None else {}
        if "global_symbol" not in attrs:
            continue
        name = str(attrs["global_symbol"])
        params = list(function.params)
        num_input = int(attrs["num_input"]) if "num_input" in attrs else len(params)
        arguments = []
        taken_otherwise = layouts.get(global_var.name_hint, {})
        for index, param in enumerate(params):
            entry = tensor_type_to_json(param.ty, f"argument `{param.name}` of `{name}`")
            entry["name"] = str(param.name)
            entry.update(taken_otherwise.get(index, {}))
            arguments.append(entry)
        weights = arguments[num_input:]
        if weight_names is not None:
            if len(weight_names) != len(weights):
                raise DriverError(
                    "export",
                    f"`{name}` takes {len(weights)} weights but the module has {len(weight_names)} parameters",
                )
            for weight, weight_name in zip(weights, weight_names):
                weight["name"] = weight_name
        outputs, is_tuple = outputs_to_json(function.ret_ty, name)
        functions.append(
            {
                "name": name,
                "inputs": arguments[:num_input],
                "weights": weights,
                "outputs": outputs,
                "returns_tuple": is_tuple,
            }
        )
    if not functions:
        raise DriverError("no_functions", "the IRModule has no public Relax function")
    return functions


def name_outputs(functions, function_name, names):
    """Names the outputs of `function_name` (an ONNX graph's output names), when there are
    as many names as outputs; the generated code's stream state may name them."""
    for function in functions:
        if function["name"] == function_name and len(function["outputs"]) == len(names):
            for output, name in zip(function["outputs"], names):
                output["name"] = name


def symbolic_dims(functions):
    """The names of the symbolic dims of every function's inputs, in order of appearance."""
    names = []
    for function in functions:
        for argument in function["inputs"]:
            for dim in argument["shape"]:
                if isinstance(dim, str) and dim not in names:
                    names.append(dim)
    return names
