"""PyTorch sources: a program saved with `torch.export.save` (.pt2), or a
`torch.nn.Module` of a .py file exported with `torch.export` from the manifest's input
specs. Both are imported with TVM's `from_exported_program`, the parameters kept as
weights (named as in the module's state dict), so that relax-runtime's kernels pack them
at load as they do ONNX initializers.

An inference batch norm right after a convolution is folded into the convolution's
weights and a bias, as PyTorch's ONNX exporter (and the ONNX preparation step) folds it:
the graph is then the one the ONNX export of the same module imports to, and runs the
same kernels. Unfolded, the batch norms were decomposed into per-channel arithmetic
before the blocked layout (which carries no batch norm), that arithmetic ran on every
call as separate loops, and the ReLUs and residual adds could not join the convolutions'
epilogues (a ResNet-18-style CNN took 5% longer than from its ONNX export).
"""

import inspect
import sys

from .errors import DriverError, user_traceback

# Parameters up to this many bytes in all are compiled in, larger ones stored next to
# the library (as for ONNX initializers).
EMBED_LIMIT_BYTES = 1 << 20
# Example sizes for symbolic dims, one per dim name, all different (torch.export would
# take two dims of one example size for the same dim where the model relates them) and
# not 0 or 1 (which torch.export specializes).
FIRST_EXAMPLE_SIZE = 16
# Lines of torch's own message kept in an error.
MESSAGE_LINES = 12


def imported():
    """Whether the model source imported torch."""
    return "torch" in sys.modules


def resolve(entry_object, source_path):
    """The entry made concrete for a source that imported torch: a torch.nn.Module
    subclass built with no arguments, a function called (it may return a module);
    anything else as it is."""
    import torch

    what, build = None, None
    if isinstance(entry_object, type) and issubclass(entry_object, torch.nn.Module):
        what, build = f"constructing {entry_object.__name__}()", entry_object
    elif inspect.isfunction(entry_object):
        what, build = f"calling {entry_object.__name__}()", entry_object
    if build is None:
        return entry_object
    try:
        return build()
    except Exception as error:  # the user's code may raise anything
        raise DriverError(
            "entry_construct",
            f"{what} failed: {type(error).__name__}: {error}",
            user_traceback(source_path),
        ) from error


def is_module(entry_object):
    import torch

    return isinstance(entry_object, torch.nn.Module)


def first_lines(error):
    text = f"{type(error).__name__}: {error}".strip()
    return "\n".join(text.splitlines()[:MESSAGE_LINES])


def load_state(module, weights_file):
    """Loads the safetensors file into `module` (strict: every key of its state dict,
    no other)."""
    import torch

    from .files import read_safetensors

    try:
        state = {name: torch.from_numpy(array) for name, array in read_safetensors(weights_file).items()}
    except (OSError, ValueError, KeyError) as error:
        raise DriverError("weights_keys", f"{weights_file} is not a safetensors file ({first_lines(error)})") from error
    wanted = set(module.state_dict())
    missing = sorted(wanted - set(state))
    unexpected = sorted(set(state) - wanted)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing key(s) {', '.join(missing)}")
        if unexpected:
            parts.append(f"unexpected key(s) {', '.join(unexpected)}")
        raise DriverError(
            "weights_keys",
            f"{weights_file} does not match the module's state dict: " + "; ".join(parts),
        )
    try:
        module.load_state_dict(state, strict=True)
    except Exception as error:
        raise DriverError("weights_keys", f"loading {weights_file} failed: {first_lines(error)}") from error


def example_inputs(arguments):
    """Example tensors for the manifest's arguments and torch.export's dynamic shapes:
    each symbolic dim name is one `torch.export.Dim`, wherever it appears."""
    import torch

    dims, sizes = {}, {}
    examples, dynamic = [], {}
    for argument in arguments:
        shape, spec = [], {}
        for axis, dim in enumerate(argument["shape"]):
            if isinstance(dim, int):
                shape.append(dim)
                continue
            if dim not in dims:
                dims[dim] = torch.export.Dim(dim)
                sizes[dim] = FIRST_EXAMPLE_SIZE + len(sizes)
            spec[axis] = dims[dim]
            shape.append(sizes[dim])
        dtype = getattr(torch, argument["dtype"])
        if dtype.is_floating_point:
            examples.append(torch.rand(shape, dtype=dtype))
        else:
            examples.append(torch.zeros(shape, dtype=dtype))
        dynamic[argument["name"]] = spec or None
    return tuple(examples), dynamic


def check_arguments(module, arguments, source_path):
    """The manifest's argument names must be `forward`'s parameters, in order."""
    parameters = [
        parameter
        for parameter in inspect.signature(module.forward).parameters.values()
        if parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
    ]
    names = [argument["name"] for argument in arguments]
    required = [parameter.name for parameter in parameters if parameter.default is parameter.empty]
    declared = [parameter.name for parameter in parameters[: len(names)]]
    if names != declared or len(names) < len(required):
        raise DriverError(
            "inputs_contradiction",
            f"the inputs of `forward` in {source_path} are ({', '.join(p.name for p in parameters)}), "
            f"but the manifest declares ({', '.join(names)})",
            subject="forward",
        )


def export_module(module, request):
    """A torch.nn.Module -> (IRModule, weight names, weight values or None, warnings)."""
    import torch

    source_path = request["source"]
    methods = request["inputs"]
    if not methods:
        raise DriverError("inputs_missing", "a torch.nn.Module needs an input spec for `forward` to export")
    for method in methods:
        if method["method"] != "forward":
            raise DriverError(
                "inputs_method",
                f"a torch.nn.Module is exported through `forward`, not `{method['method']}`",
                subject=method["method"],
            )
    arguments = methods[0]["arguments"]
    check_arguments(module, arguments, source_path)
    if request.get("weights_file"):
        load_state(module, request["weights_file"])
    module.eval()
    examples, dynamic = example_inputs(arguments)
    try:
        with torch.no_grad():
            program = torch.export.export(module, examples, dynamic_shapes=dynamic)
    except Exception as error:  # torch raises many kinds for export failures
        symbolic = sorted({dim for argument in arguments for dim in argument["shape"] if isinstance(dim, str)})
        fix = (
            "Fix: where torch specialized a dim or guarded on its value, pin that dim to a number in "
            "the inputs (" + ", ".join(symbolic) + " are symbolic); where the model branches on "
            "tensor values, write the branch with torch.cond or remove it."
            if symbolic
            else "Fix: make forward traceable by torch.export (no branches on tensor values)."
        )
        raise DriverError(
            "export",
            f"torch.export failed: {first_lines(error)}",
            fix + "\n" + user_traceback(source_path),
        ) from error
    return import_program(program, request, dim_names(program, arguments))


def dim_names(program, arguments):
    """torch's names of the program's symbolic dims (`s40`) -> the manifest's (`batch`)."""
    user_inputs = set(program.graph_signature.user_inputs)
    placeholders = [node for node in program.graph.nodes if node.op == "placeholder" and node.name in user_inputs]
    names = {}
    for node, argument in zip(placeholders, arguments):
        for size, dim in zip(node.meta["val"].shape, argument["shape"]):
            if isinstance(dim, str):
                names[str(size)] = dim
    return names


def renamed_dims(function, names):
    """`function` with its symbolic dims renamed (`names`: old name -> new name), in its
    types and in its bounds' attributes."""
    from tvm import tirx

    if not names:
        return function
    function = function.bind_symbolic_vars({old: tirx.Var(new, "int64") for old, new in names.items()})
    for bound in ("tir_var_lower_bound", "tir_var_upper_bound"):
        if function.attrs is not None and bound in function.attrs:
            values = {names.get(str(name), str(name)): value for name, value in function.attrs[bound].items()}
            function = function.with_attr(bound, values)
    return function


def load_program(request):
    """A .pt2 file -> (IRModule, weight names, weight values or None, warnings)."""
    import torch

    source_path = request["source"]
    try:
        program = torch.export.load(source_path)
    except Exception as error:
        raise DriverError("torch_invalid", f"{source_path} is not a torch.export program ({first_lines(error)})") from error
    return import_program(program, request)


def where_used(node):
    """The module path a graph node came from (`encoder.layers.0.self_attn`), or its name."""
    stack = node.meta.get("nn_module_stack") or {}
    if stack:
        path, _ = list(stack.values())[-1]
        return path or node.name
    return node.name


def check_supported(program, source_path):
    """Raises one error naming every aten operator TVM's importer has no converter for,
    with counts and where each is used."""
    import tvm
    from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

    known = ExportedProgramImporter().convert_map
    missing = {}
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target.__name__ not in known:
            missing.setdefault(node.target.__name__, []).append(where_used(node))
    if not missing:
        return
    operators = [
        {"op_type": name, "count": len(places), "nodes": places[:3], "reason": "no converter"}
        for name, places in sorted(missing.items())
    ]
    described = "; ".join(
        f"{operator['op_type']} ({operator['count']}x, in {', '.join(operator['nodes'])})" for operator in operators
    )
    raise DriverError(
        "torch_unsupported",
        f"TVM {tvm.__version__}'s PyTorch importer has no converter for {len(operators)} aten operator(s) "
        f"of {source_path}: {described}",
        "Fix: write those parts with operators TVM converts (or export the model to ONNX), "
        "or compute them outside the model.",
        subject=", ".join(missing),
        operators=operators,
    )


def import_program(program, request, names=None):
    """An ExportedProgram -> (IRModule with `forward`, weight names, values or None, warnings).

    `names` renames torch's symbolic dims to the manifest's.

    The parameters are compiled in when `weights` is "embed" or, by default, when they
    total at most EMBED_LIMIT_BYTES; otherwise they are trailing weights whose values are
    returned to be written next to the library.
    """
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    program = program.run_decompositions()
    check_supported(program, request["source"])
    try:
        ir_module = from_exported_program(
            program, keep_params_as_input=True, unwrap_unit_return_tuple=True, run_ep_decomposition=False
        )
    except Exception as error:
        raise DriverError(
            "export", f"TVM's PyTorch importer failed: {first_lines(error)}", user_traceback(request["source"])
        ) from error
    targets = {
        spec.arg.name: spec.target
        for spec in program.graph_signature.input_specs
        if spec.target is not None and hasattr(spec.arg, "name")
    }
    ir_module, params = relax.frontend.detach_params(ir_module)
    function = ir_module["main"]
    weight_vars = list(function.params)[int(function.attrs["num_input"]) :]
    arrays = [value.numpy() for value in params.get("main", [])]
    if len(arrays) != len(weight_vars):
        raise DriverError(
            "export", f"TVM's PyTorch importer returned {len(arrays)} weights for {len(weight_vars)} parameters"
        )
    function, weight_vars, arrays = fold_batch_norms(function, weight_vars, arrays, targets)
    ir_module = tvm.IRModule({"main": function})
    mode = request.get("weights_mode") or "auto"
    total = sum(array.nbytes for array in arrays)
    embed = mode == "embed" or (mode == "auto" and total <= EMBED_LIMIT_BYTES)
    if embed and weight_vars:
        function = relax.transform.BindParams("main", dict(zip(weight_vars, arrays)))(ir_module)["main"]
    function = renamed_dims(function, names or {})
    function = function.with_attr("global_symbol", "forward").without_attr("params")
    ir_module = tvm.IRModule({"forward": function})
    if embed:
        return ir_module, [], None, []
    names = [targets.get(str(var.name), str(var.name)) for var in weight_vars]
    return ir_module, names, arrays, []


def fold_batch_norms(function, weight_vars, arrays, targets):
    """`function` (its trailing parameters `weight_vars`, with values `arrays`) with each
    inference `batch_norm(conv2d(x, w), gamma, beta, mean, var)[0]` whose operands are
    weights or constants (torch's buffers) replaced by
    `conv2d(x, w * s) + reshape(beta - mean * s, [1, C, 1, 1])`, s = gamma / sqrt(var + eps):
    the graph the ONNX export of the module imports to. Returns the function, its weight
    parameters and their values, those no longer used removed (a folded weight keeps the
    convolution's name, its bias is named beside it; both are added to `targets`). Values
    nothing reads (a max pool's indices, as torch.export decomposes it) are dropped too."""
    import numpy as np
    import tvm
    from tvm import relax

    from .bindings import rewritten_body
    from .offload import count_uses

    values = dict(zip(weight_vars, arrays))
    bound = {binding.var: binding.value for block in function.body.blocks for binding in block.bindings}
    uses = count_uses(function)
    taken = {targets.get(str(var.name), str(var.name)) for var in weight_vars}
    new_weights = {}  # a folded convolution's variable -> its folded weight's

    def folded(item):
        if not isinstance(item, relax.TupleGetItem) or item.index != 0 or uses.get(item.tuple_value) != 1:
            return None
        norm = bound.get(item.tuple_value)
        if not isinstance(norm, relax.Call) or getattr(norm.op, "name", "") != "relax.nn.batch_norm":
            return None
        attrs = norm.attrs
        convolved, *statistics = norm.args
        conv = bound.get(convolved)
        if (
            int(attrs.axis) != 1
            or bool(getattr(attrs, "training", False))
            or uses.get(convolved) != 1
            or not isinstance(conv, relax.Call)
            or getattr(conv.op, "name", "") != "relax.nn.conv2d"
            or conv.attrs.data_layout != "NCHW"
            or conv.attrs.kernel_layout != "OIHW"
            or conv.attrs.out_layout != "NCHW"
            or uses.get(conv.args[1]) != 1
            or conv.args[1] not in values
            or not all(var in values or isinstance(var, tvm.ir.Constant) for var in statistics)
        ):
            return None
        weight = values[conv.args[1]]
        # (The running statistics, buffers, are imported as constants.)
        gamma, beta, mean, variance = (
            (values[var] if var in values else var.value.numpy()).astype(np.float64) for var in statistics
        )
        if not attrs.scale:
            gamma = np.ones_like(gamma)
        if not attrs.center:
            beta = np.zeros_like(beta)
        if weight.dtype != np.float32 or gamma.shape != (weight.shape[0],):
            return None
        scale = gamma / np.sqrt(variance + float(attrs.epsilon))
        name = targets.get(str(conv.args[1].name), str(conv.args[1].name))
        bias_name = (name[: -len(".weight")] if name.endswith(".weight") else name) + ".bias"
        while bias_name in taken:
            bias_name += "_folded"
        taken.add(bias_name)
        # Named as the importer names parameters (`p_conv1_weight`), mapped in `targets`.
        weight_var = relax.Var("p_folded_" + name.replace(".", "_"), relax.TensorType(list(weight.shape), "float32"))
        bias_var = relax.Var("p_folded_" + bias_name.replace(".", "_"), relax.TensorType([weight.shape[0]], "float32"))
        targets[str(weight_var.name)], targets[str(bias_var.name)] = name, bias_name
        values[weight_var] = (weight.astype(np.float64) * scale[:, None, None, None]).astype(np.float32)
        values[bias_var] = (beta - mean * scale).astype(np.float32)
        new_weights[convolved] = weight_var
        return relax.op.add(convolved, relax.op.reshape(bias_var, [1, weight.shape[0], 1, 1]))

    body = rewritten_body(function, lambda binding: folded(binding.value)) or function.body

    def with_folded_weight(binding):
        weight_var = new_weights.get(binding.var)
        if weight_var is None:
            return None
        conv = binding.value
        return relax.Call(conv.op, [conv.args[0], weight_var], conv.attrs, conv.ty_args)

    body = (
        rewritten_body(
            relax.Function(function.params, body, function.ret_ty, function.is_pure, function.attrs),
            with_folded_weight,
        )
        or body
    )
    inputs = list(function.params)[: int(function.attrs["num_input"])]
    candidates = list(weight_vars) + [var for var in values if var not in weight_vars]
    draft = relax.Function(inputs + candidates, body, function.ret_ty, function.is_pure, function.attrs)
    module = tvm.IRModule({"main": draft})
    module = relax.transform.Normalize()(module)
    module = relax.transform.CanonicalizeBindings()(module)
    module = relax.transform.DeadCodeElimination(["main"])(module)
    draft = module["main"]
    used = relax.analysis.free_vars(draft.body)
    used_names = {str(var.name) for var in used}
    kept = [var for var in draft.params[len(inputs) :] if str(var.name) in used_names]
    by_name = {str(var.name): var for var in candidates}
    function = relax.Function(list(draft.params[: len(inputs)]) + kept, draft.body, draft.ret_ty, draft.is_pure, draft.attrs)
    return function, kept, [values[by_name[str(var.name)]] for var in kept]
