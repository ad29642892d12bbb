"""ONNX sources: load, apply the manifest's input specs, import with TVM's importer."""

import contextlib
import copy
import io
import json
import re
import traceback

from . import integer_products, onnx_ops, onnx_prepare, weight_transforms
from .errors import DriverError, failure_reason

ONNX_EMBED_LIMIT_BYTES = 1 << 20


def onnx_dtype_name(elem_type):
    from onnx import helper

    return str(helper.tensor_dtype_to_np_dtype(elem_type))


def graph_inputs(model):
    """The graph's real inputs (initializers listed as inputs excluded), by name."""
    initializers = {init.name for init in model.graph.initializer}
    return {i.name: i for i in model.graph.input if i.name not in initializers}


def pin_inputs(model, inputs, source_path):
    """Applies the manifest's input specs to the graph's inputs (pin or rename dims).

    A spec that contradicts the graph (unknown input, dtype, rank, a static dim) is an error.
    """
    if not inputs:
        return
    by_name = graph_inputs(model)
    for method in inputs:
        if method["method"] != "main":
            raise DriverError(
                "inputs_method",
                f"an ONNX model has one function, `main`, not `{method['method']}`",
                subject=method["method"],
            )
        for argument in method["arguments"]:
            name = argument["name"]
            if name not in by_name:
                raise DriverError(
                    "inputs_contradiction",
                    f"the graph of {source_path} has no input `{name}`",
                    "graph inputs: " + ", ".join(by_name),
                )
            tensor_type = by_name[name].type.tensor_type
            where = f"input `{name}` of {source_path}"
            graph_dtype = onnx_dtype_name(tensor_type.elem_type) if tensor_type.elem_type else None
            if graph_dtype is not None and graph_dtype != argument["dtype"]:
                raise DriverError(
                    "inputs_contradiction",
                    f"{where} is {graph_dtype} in the graph, but the manifest says {argument['dtype']}",
                )
            dims = tensor_type.shape.dim if tensor_type.HasField("shape") else None
            if dims is not None and len(dims) != len(argument["shape"]):
                raise DriverError(
                    "inputs_contradiction",
                    f"{where} has rank {len(dims)} in the graph, but the manifest gives {len(argument['shape'])} dims",
                )
            if dims is not None:
                for index, (dim, wanted) in enumerate(zip(dims, argument["shape"])):
                    if dim.dim_value > 0 and dim.dim_value != wanted:
                        raise DriverError(
                            "inputs_contradiction",
                            f"{where}: dim {index} is {dim.dim_value} in the graph, but the manifest says {wanted}",
                        )
            tensor_type.shape.Clear()
            for wanted in argument["shape"]:
                dim = tensor_type.shape.dim.add()
                if isinstance(wanted, int):
                    dim.dim_value = wanted
                else:
                    dim.dim_param = wanted


def declared_empty_shapes(model):
    """{name: dims} of the graph inputs with a dim declared 0 and every dim a number:
    TVM's importer reads a dim of 0 as unknown (a new symbolic dim), so such an input
    (an empty tensor) goes to it with its declared shape."""
    shapes = {}
    for name, value in graph_inputs(model).items():
        tensor_type = value.type.tensor_type
        dims = tensor_type.shape.dim if tensor_type.HasField("shape") else []
        numbers = all(dim.HasField("dim_value") for dim in dims)
        if numbers and any(dim.dim_value == 0 for dim in dims):
            shapes[name] = [dim.dim_value for dim in dims]
    return shapes


def import_fix(model, request):
    """What to try when TVM's importer fails on a node: most failures on real exports come
    from shapes computed at run time, which the preparation step folds once the input
    dims are static."""
    symbolic = {
        name: [dim.dim_param or "?" for dim in value.type.tensor_type.shape.dim if not dim.dim_value]
        for name, value in graph_inputs(model).items()
        if value.type.tensor_type.HasField("shape")
    }
    symbolic = {name: dims for name, dims in symbolic.items() if dims}
    if not request.get("onnx_prepare", True):
        return "Fix: turn the ONNX preparation step back on (remove onnx_prepare = false): it folds shape computations."
    if symbolic:
        listed = "; ".join(f"{name} ({', '.join(dims)})" for name, dims in symbolic.items())
        return (
            "Fix: if the graph computes shapes at run time (Shape -> Gather -> Concat -> Reshape), pin the "
            f"symbolic dims of {listed} to numbers in the model's inputs.main, so that the preparation step "
            "can fold those computations; or export the model with static shapes. In the manifest, with each "
            f"<dim> the size your app uses:\n  {pinning_line(model, request)}"
        )
    return "Fix: export the model with another opset_version or exporter option, or write it as a Relax nn.Module source."


def pinning_line(model, request):
    """The manifest lines that pin every input of `model`, its symbolic dims as `<name>`
    for the user to replace: `[package.metadata.relax.models.m]` then `inputs.main = {...}`."""
    specs = []
    for name, value in graph_inputs(model).items():
        tensor_type = value.type.tensor_type
        dims = [str(dim.dim_value) if dim.dim_value else f"<{dim.dim_param or 'dim'}>" for dim in tensor_type.shape.dim]
        dtype = onnx_dtype_name(tensor_type.elem_type) if tensor_type.elem_type else "float32"
        key = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)
        specs.append(f'{key} = "{dtype}[{", ".join(dims)}]"')
    model_name = request.get("model") or "<model>"
    return f"[package.metadata.relax.models.{model_name}]\n  inputs.main = {{ {', '.join(specs)} }}"


def output_names(source_path):
    """The graph's output names, in order (the order of the imported `main`'s outputs)."""
    import onnx

    model = onnx.load(source_path, load_external_data=False)
    return [output.name for output in model.graph.output]


def read_model(source_path):
    import onnx

    try:
        model = onnx.load(source_path)
    except Exception as error:
        raise DriverError(
            "onnx_invalid",
            f"{source_path} is not an ONNX model ({type(error).__name__}: {str(error)[:200]})",
        ) from error
    if not model.graph.node and not model.graph.output:
        raise DriverError("onnx_invalid", f"{source_path} is not an ONNX model (it has no graph)")
    optional_inputs_as_tensors(model)
    unknown_dims_named(model)
    return model


# dim_param values exporters write for "unknown", not as a name two dims share.
UNNAMED_DIMS = {"", "?", "-1", "None"}


def unknown_dims_named(model):
    """Gives each dim of the graph's inputs and outputs that is declared negative, or
    unknown without a name, a name of its own (a symbolic dim of its own), in place.

    Paddle's exporter (PP-OCR's models, for one) declares a dim it leaves free as -1,
    which ONNX does not allow; TVM's importer takes the -1 as a size, and the shapes
    computed from it are wrong (a classifier's `Reshape` to `[-1, 200]` then `Softmax`
    failed in TVM's importer with "The type is not populated"). It also writes "?" for
    each free dim, as onnxruntime reads it: not one name shared by the height and the
    width of an image."""
    values = [*graph_inputs(model).values(), *model.graph.output]
    for value in values:
        tensor_type = value.type.tensor_type
        if not tensor_type.HasField("shape"):
            continue
        for index, dim in enumerate(tensor_type.shape.dim):
            negative = dim.HasField("dim_value") and dim.dim_value < 0
            unnamed = not dim.HasField("dim_value") and dim.dim_param.strip() in UNNAMED_DIMS
            if negative or unnamed:
                dim.Clear()
                dim.dim_param = f"{value.name}_dim{index}"


def optional_inputs_as_tensors(model):
    """Makes each graph input of type optional(tensor) that tensor, in place.

    TVM's importer reads an optional input as a tensor of unknown rank, which a signature
    cannot describe; and a caller of the compiled model always passes a tensor (an absent
    optional has no value in relax-runtime's calls), so the input is the tensor it holds.
    """
    for value in model.graph.input:
        optional = value.type.optional_type if value.type.HasField("optional_type") else None
        if optional is not None and optional.elem_type.HasField("tensor_type"):
            tensor_type = type(optional.elem_type.tensor_type)()
            tensor_type.CopyFrom(optional.elem_type.tensor_type)
            value.type.ClearField("optional_type")
            value.type.tensor_type.CopyFrom(tensor_type)


def load(request):
    """An .onnx file -> (IRModule, weights or None, warnings for the build's output).

    Initializers are compiled in as constants when `weights` is "embed", or when they
    total at most ONNX_EMBED_LIMIT_BYTES and `weights` is not "external"; otherwise they
    become trailing parameters whose values are returned to be written as weights.

    The preparation step must never lose a model: when the prepared graph does not
    import but the graph as it was does, the latter is used, with a warning.
    """
    source_path = request["source"]
    model = read_model(source_path)
    pin_inputs(model, request["inputs"], source_path)
    if not request.get("onnx_prepare", True):
        return imported(model, request)
    prepared, warnings = onnx_prepare.prepare(copy.deepcopy(model))
    try:
        ir_module, weights, notes = imported(prepared, request)
    except DriverError as prepared_error:
        try:
            ir_module, weights, notes = imported(model, request)
        except DriverError:
            raise prepared_error from None
        first_line = prepared_error.message.splitlines()[0][:300]
        warnings.append(
            f"the ONNX preparation step was undone: the prepared graph did not import ({first_line}), "
            "the graph as it was did"
        )
    return ir_module, weights, warnings + notes


def imported(model, request):
    """The (IRModule, weights or None, warnings) of TVM's importer on `model`; a
    DriverError naming the operators it has no converter for or failed on."""
    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    source_path = request["source"]
    onnx_prepare.check_supported(model, source_path)
    initializer_bytes = sum(onnx.numpy_helper.to_array(init).nbytes for init in model.graph.initializer)
    mode = request.get("weights_mode") or "auto"
    external = mode == "external" or (mode == "auto" and initializer_bytes > ONNX_EMBED_LIMIT_BYTES)
    printed = io.StringIO()
    converting = onnx_ops.Converting()
    try:
        with contextlib.redirect_stdout(printed), onnx_ops.registered() as converting:
            ir_module = from_onnx(model, shape_dict=declared_empty_shapes(model), keep_params_in_input=external)
    except tvm.error.OpNotImplemented as error:
        unsupported = str(error).split(":", 1)[-1].strip()
        nodes = [
            node.name or f"#{i}" for i, node in enumerate(model.graph.node) if node.op_type in unsupported.split(", ")
        ]
        raise DriverError(
            "onnx_unsupported",
            f"TVM's ONNX importer does not support operator(s) {unsupported} (node(s) {', '.join(nodes[:5])})",
            subject=unsupported,
        ) from error
    except Exception as error:
        failed = re.findall(r"Error converting operator (\w+)", printed.getvalue())
        if converting.nodes:
            raise node_failure(model, request, converting.nodes, error) from error
        if failed:
            op_type = failed[-1]
            nodes = [node.name or f"#{i}" for i, node in enumerate(model.graph.node) if node.op_type == op_type]
            reason = failure_reason(error)
            operator = {"op_type": op_type, "count": len(nodes), "nodes": nodes[:3], "reason": reason}
            raise DriverError(
                "onnx_unsupported",
                f"TVM's ONNX importer failed on operator {op_type} (one of node(s) {', '.join(nodes[:5])}): {reason}",
                import_fix(model, request),
                subject=op_type,
                operators=[operator],
            ) from error
        raise DriverError(
            "onnx_import",
            f"{type(error).__name__}: {str(error)[:500]}\n{import_fix(model, request)}",
            traceback.format_exc(limit=-3),
        ) from error
    ir_module = main_in_dataflow_blocks(ir_module)
    weights = None
    if external:
        ir_module, params = relax.frontend.detach_params(ir_module)
        arrays = [value.numpy() for value in params.get("main", [])]
        ir_module, arrays, _ = weight_transforms.precomputed(ir_module, arrays)
        ir_module, weights = scalars_bound(ir_module, arrays)
    # After the integer weights are bound as constants: a product's constant operand
    # is then computed here, once.
    ir_module = integer_products.in_float32(ir_module)
    return ir_module, weights, list(converting.unbuilt_branches)


def main_in_dataflow_blocks(ir_module):
    """`ir_module` with the pure bindings of `main` in dataflow blocks: TVM's importer
    leaves a function holding an `If` in plain binding blocks, and what follows (layout
    conversion, the kernels' offload, fusion) rewrites dataflow blocks only
    (silero-vad's convolutions and LSTM matmuls stayed TVM's default loops). The
    recursive functions of run-time Loops (onnx_ops/control_flow.py) stay as they are:
    TVM's fusion fails on them so converted ("Variable ... could not be found in any
    group", ONNX's test_loop11)."""
    import tvm
    from tvm import relax

    main = ir_module.get_global_var("main")
    alone = tvm.IRModule({main: ir_module[main]})
    converted = relax.transform.ConvertToDataflow(min_size=1)(alone)[main]
    if converted.same_as(ir_module[main]):
        return ir_module
    ir_module = ir_module.clone() if hasattr(ir_module, "clone") else ir_module
    ir_module[main] = converted
    return ir_module


def enclosing_nodes(graph, name):
    """The (op type, name) of the nodes whose branches or body hold the node `name`,
    outermost first: [] for a node of `graph` itself, None when it is not there (TVM's
    importer converts an `If`'s branches itself, outside any converter)."""
    for node in graph.node:
        if node.name == name:
            return []
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else list(attribute.graphs):
                inner = enclosing_nodes(subgraph, name)
                if inner is not None:
                    return [(node.op_type, node.name), *inner]
    return None


def node_failure(model, request, nodes, error):
    """The error for TVM's importer failing on the last of `nodes` (op type, name),
    converted inside the ones before it."""
    op_type, name = nodes[-1]
    reason = failure_reason(error)
    outer = nodes[:-1] or (enclosing_nodes(model.graph, name) if name else None) or []
    inside = "".join(f", inside {outer_type} node `{outer_name}`" for outer_type, outer_name in reversed(outer))
    label = f"node `{name}`" if name else "an unnamed node"
    count = sum(1 for node in model.graph.node if node.op_type == op_type)
    operator = {"op_type": op_type, "count": count, "nodes": [name], "reason": reason}
    return DriverError(
        "onnx_unsupported",
        f"TVM's ONNX importer failed on {label} ({op_type}{inside}): {reason}",
        import_fix(model, request),
        subject=op_type,
        operators=[operator],
    )


def quantization_parameters(function):
    """The variables `function` uses as the scales or zero points of its `quantize` and
    `dequantize` calls: bound as constants, a quantized layer's scales per channel let its
    products run on the 8-bit values (integer_products.py)."""
    from tvm import relax

    found = set()

    def visit(expr):
        op = getattr(expr, "op", None) if isinstance(expr, relax.Call) else None
        if getattr(op, "name", None) in ("relax.quantize", "relax.dequantize"):
            found.update(arg for arg in expr.args[1:3] if isinstance(arg, relax.Var))

    relax.analysis.post_order_visit(function.body, visit)
    return found


def scalars_bound(ir_module, arrays):
    """`main` with its one-value weights (a Clip's bounds, an epsilon), its integer
    and boolean ones (reshape targets, slice bounds, indices: what a graph computes
    shapes and selections with; a quantized layer's 8-bit weights) and its quantization
    scales and zero points bound as constants, and the
    values of the weights it still takes: a constant folds where a weight cannot (a
    ReLU6 into a convolution's epilogue, a shape computation into static dims), and is
    no weight to load. `arrays` are the values of `main`'s weight parameters, in order."""
    from tvm import relax

    function = ir_module["main"]
    weight_vars = list(function.params)[int(function.attrs["num_input"]) :]
    if len(weight_vars) != len(arrays):
        raise DriverError(
            "onnx_import",
            f"TVM's ONNX importer returned {len(arrays)} weights for {len(weight_vars)} weight parameters",
        )
    quantization = quantization_parameters(function)
    scalars = {
        var: array
        for var, array in zip(weight_vars, arrays)
        if array.size == 1 or array.dtype.kind in "biu" or var in quantization
    }
    if scalars:
        ir_module = relax.transform.BindParams("main", scalars)(ir_module)
    return ir_module, [array for var, array in zip(weight_vars, arrays) if var not in scalars]
