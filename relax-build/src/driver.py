"""Compile driver of relax-build: one Relax model in, one exported library out.

relax-build runs this file with the toolchain's Python as

    python driver.py REQUEST_JSON

The request names the model source, the entry attribute, the input specs, the
TVM target dict and the output folder. On success the driver writes, into that
folder, the exported library and `signature.json` (functions, arguments with
dtypes and static/symbolic dims, weights, outputs). On failure it writes
`error.json` ({"kind", "message", "detail"}) and exits with status 1, so that
relax-build can report the error in Rust with the model name and manifest key.

The driver never writes a file in place: everything goes to a temporary name in
the output folder and is renamed when complete.
"""

import importlib.util
import json
import os
import sys
import traceback

SUPPORTED_TVM_VERSION = "0.27.0.post1"


class DriverError(Exception):
    """An error with a kind that relax-build maps to a manifest key."""

    def __init__(self, kind, message, detail=""):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.detail = detail


def write_atomically(path, data):
    temporary = path + ".tmp"
    mode = "wb" if isinstance(data, bytes) else "w"
    with open(temporary, mode) as handle:
        handle.write(data)
    os.replace(temporary, path)


def user_traceback(source_path):
    """The current exception's traceback, trimmed to the frames in the user's file.

    The frames of this driver and of importlib say nothing useful to a user; the
    last frames inside TVM are kept when the error was raised there, since they
    name the operator or pass that failed.
    """
    exc_type, exc_value, exc_tb = sys.exc_info()
    frames = traceback.extract_tb(exc_tb)
    source_path = os.path.realpath(source_path)
    user_frames = [f for f in frames if os.path.realpath(f.filename) == source_path]
    if user_frames:
        last_user = max(i for i, f in enumerate(frames) if os.path.realpath(f.filename) == source_path)
        kept = user_frames + frames[last_user + 1 :][-2:]
    else:
        kept = frames[-3:]
    lines = ["Traceback (most recent call last, trimmed to the model source):\n"]
    lines += traceback.format_list(kept)
    lines += traceback.format_exception_only(exc_type, exc_value)
    return "".join(lines).rstrip()


def import_source(model_name, source_path):
    """Executes the model source as a module registered in sys.modules.

    TVMScript's parser looks the defining module up in sys.modules to read the
    class source, so the module must be registered before it is executed.
    """
    module_name = "relax_model_" + model_name
    spec = importlib.util.spec_from_file_location(module_name, source_path)
    if spec is None or spec.loader is None:
        raise DriverError("source", f"cannot import {source_path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    sys.path.insert(0, os.path.dirname(source_path))
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's code may raise anything
        raise DriverError(
            "source_exception",
            f"{type(error).__name__}: {error}",
            user_traceback(source_path),
        ) from error
    return module


def resolve_entry(module, entry, source_path):
    if not hasattr(module, entry):
        public = sorted(
            name for name in vars(module) if not name.startswith("_") and not isinstance(getattr(module, name), type(sys))
        )
        raise DriverError(
            "entry_missing",
            f"{source_path} has no attribute `{entry}`",
            "attributes defined there: " + (", ".join(public) if public else "(none)"),
        )
    return getattr(module, entry)


def tensor_spec(nn, spec):
    dims = [dim if isinstance(dim, int) else str(dim) for dim in spec["shape"]]
    return nn.spec.Tensor(dims, spec["dtype"])


def export_nn_module(module_object, inputs, source_path):
    """relax.frontend.nn module -> (IRModule, parameter names in call order)."""
    from tvm.relax.frontend import nn

    if not inputs:
        raise DriverError(
            "inputs_missing",
            "a relax.frontend.nn module needs an input spec for each method to export",
        )
    spec = {method: {arg["name"]: tensor_spec(nn, arg) for arg in args} for method, args in inputs.items()}
    for method in spec:
        if not callable(getattr(module_object, method, None)):
            raise DriverError("inputs_method", f"the module has no method `{method}`", method)
    try:
        ir_module, parameters = module_object.export_tvm(spec=spec)
    except Exception as error:
        raise DriverError("export", f"{type(error).__name__}: {error}", user_traceback(source_path)) from error
    return ir_module, [name for name, _ in parameters]


def reject_inputs(inputs):
    if inputs:
        raise DriverError(
            "inputs_unused",
            "the entry is an IRModule, whose functions declare their own argument names, shapes and dtypes",
        )


def load_ir_module(entry_object, inputs, source_path):
    """Turns the entry attribute into an IRModule.

    Accepted: a TVMScript IRModule, a relax.frontend.nn.Module subclass (built
    with no arguments) or instance, or a function taking no arguments that
    returns an IRModule.
    Returns (IRModule, weight names or None when weights keep their Relax names).
    """
    import tvm
    from tvm.relax.frontend import nn

    if isinstance(entry_object, tvm.IRModule):
        reject_inputs(inputs)
        return entry_object, None
    if isinstance(entry_object, type) and issubclass(entry_object, nn.Module):
        try:
            entry_object = entry_object()
        except Exception as error:
            raise DriverError(
                "entry_construct",
                f"constructing {entry_object.__name__}() failed: {type(error).__name__}: {error}",
                user_traceback(source_path),
            ) from error
    if isinstance(entry_object, nn.Module):
        return export_nn_module(entry_object, inputs, source_path)
    if callable(entry_object) and not isinstance(entry_object, type):
        try:
            result = entry_object()
        except Exception as error:
            raise DriverError("source_exception", f"{type(error).__name__}: {error}", user_traceback(source_path)) from error
        if isinstance(result, tvm.IRModule):
            reject_inputs(inputs)
            return result, None
        raise DriverError("entry_type", f"calling the entry returned {type(result).__name__}, not an IRModule")
    raise DriverError("entry_type", f"the entry is a {type(entry_object).__name__}")


ONNX_EMBED_LIMIT_BYTES = 1 << 20


def onnx_dtype_name(elem_type):
    from onnx import helper

    return str(helper.tensor_dtype_to_np_dtype(elem_type))


def pin_onnx_inputs(model, inputs, source_path):
    """Applies the manifest's input specs to the graph's inputs (pin or rename dims).

    A spec that contradicts the graph (unknown input, dtype, rank, a static dim) is an error.
    """
    if not inputs:
        return
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = {i.name: i for i in model.graph.input if i.name not in initializers}
    for method, arguments in inputs.items():
        if method != "main":
            raise DriverError("inputs_method", f"an ONNX model has one function, `main`, not `{method}`", method)
        for argument in arguments:
            name = argument["name"]
            if name not in graph_inputs:
                raise DriverError(
                    "inputs_contradiction",
                    f"the graph of {source_path} has no input `{name}`",
                    "graph inputs: " + ", ".join(graph_inputs),
                )
            tensor_type = graph_inputs[name].type.tensor_type
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


def load_onnx(request):
    """An .onnx file -> (IRModule, weights or None).

    Initializers are compiled in as constants when `weights` is "embed", or when they
    total at most ONNX_EMBED_LIMIT_BYTES and `weights` is not "external"; otherwise they
    become trailing parameters whose values are returned to be written as weights.
    """
    import io
    import contextlib
    import re

    import onnx
    import tvm
    from tvm import relax
    from tvm.relax.frontend.onnx import from_onnx

    source_path = request["source"]
    try:
        model = onnx.load(source_path)
    except Exception as error:
        raise DriverError(
            "onnx_invalid",
            f"{source_path} is not an ONNX model ({type(error).__name__}: {str(error)[:200]})",
        ) from error
    if not model.graph.node and not model.graph.output:
        raise DriverError("onnx_invalid", f"{source_path} is not an ONNX model (it has no graph)")
    pin_onnx_inputs(model, request.get("inputs"), source_path)
    initializer_bytes = sum(onnx.numpy_helper.to_array(init).nbytes for init in model.graph.initializer)
    mode = request.get("weights_mode") or "auto"
    external = mode == "external" or (mode == "auto" and initializer_bytes > ONNX_EMBED_LIMIT_BYTES)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            ir_module = from_onnx(model, keep_params_in_input=external)
    except tvm.error.OpNotImplemented as error:
        unsupported = str(error).split(":", 1)[-1].strip()
        nodes = [node.name or f"#{i}" for i, node in enumerate(model.graph.node) if node.op_type in unsupported.split(", ")]
        raise DriverError(
            "unsupported_op",
            f"TVM's ONNX importer does not support operator(s) {unsupported} (node(s) {', '.join(nodes[:5])})",
            unsupported,
        ) from error
    except Exception as error:
        failed = re.findall(r"Error converting operator (\w+)", printed.getvalue())
        if failed:
            nodes = [node.name or f"#{i}" for i, node in enumerate(model.graph.node) if node.op_type == failed[-1]]
            raise DriverError(
                "unsupported_op",
                f"TVM's ONNX importer failed on operator {failed[-1]} (node(s) {', '.join(nodes[:5])}): "
                f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}",
                failed[-1],
            ) from error
        raise DriverError("onnx_import", f"{type(error).__name__}: {str(error)[:500]}", traceback.format_exc(limit=-3)) from error
    weights = None
    if external:
        ir_module, params = relax.frontend.detach_params(ir_module)
        weights = [param.numpy() for param in params.get("main", [])]
    return ir_module, weights


SAFETENSORS_DTYPES = {
    "float16": "F16", "float32": "F32", "float64": "F64", "int8": "I8", "int16": "I16", "int32": "I32",
    "int64": "I64", "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL",
}


def write_safetensors(path, named_arrays):
    """Writes arrays as a safetensors file (8-byte header length, JSON header, data)."""
    import struct

    import numpy as np

    header, chunks, offset = {}, [], 0
    for name, array in named_arrays:
        array = np.ascontiguousarray(array)
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[str(array.dtype)],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        chunks.append(data)
        offset += len(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    write_atomically(path, struct.pack("<Q", len(encoded)) + encoded + b"".join(chunks))


def dim_to_json(dim):
    """A static dim as an int, a symbolic one as its expression text (`batch`)."""
    value = getattr(dim, "value", None)
    return int(value) if isinstance(value, int) else str(dim)


def tensor_type_to_json(ty, what):
    """A tensor type as {"dtype", "shape"}; dims without a known size are "?"."""
    from tvm import relax

    if not isinstance(ty, relax.TensorType):
        raise DriverError("unsupported_type", f"{what} has type {ty}; only tensors are supported")
    if ty.ndim < 0:
        raise DriverError("unsupported_type", f"{what} is a tensor of unknown rank ({ty})")
    values = getattr(ty.shape, "values", None) if ty.shape is not None else None
    shape = [dim_to_json(d) for d in values] if values is not None else ["?"] * ty.ndim
    return {"dtype": str(ty.dtype), "shape": shape}


def outputs_to_json(ty, function_name):
    import tvm

    if isinstance(ty, tvm.ir.TupleType):
        return [tensor_type_to_json(field, f"output {i} of `{function_name}`") for i, field in enumerate(ty.fields)], True
    return [tensor_type_to_json(ty, f"the output of `{function_name}`")], False


def signature_of(ir_module, weight_names):
    """Public Relax functions of the module, with arguments split into inputs and weights."""
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
        for index, param in enumerate(params):
            entry = tensor_type_to_json(param.ty, f"argument `{param.name}` of `{name}`")
            entry["name"] = str(param.name)
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


def make_target(request, extra=None):
    import tvm

    target = dict(request["target"], **(extra or {}))
    if target.get("mcpu") == "native":
        from tvm.target import codegen

        target["mcpu"] = str(codegen.llvm_get_system_cpu())
    return tvm.target.Target(target)


def compile_module(ir_module, target, request):
    """Compiles with the requested pipeline, TIR pipeline and opt level.

    "zero": relax.get_pipeline("zero") as a pre-pass (constant folding, fusion), then the
    target's backend pipeline relax.get_default_pipeline(target); "cpu": the backend
    pipeline alone; "default": tvm.compile's "default" pipeline alone. With tuning
    records, TVM's static_shape_tuning pipeline with no trials (zero pipeline, then the
    records' schedules applied) replaces the pre-pass.
    """
    import tvm
    from tvm import relax

    pipeline = request["pipeline"]
    records = request.get("tuning_records")
    if records:
        work_dir = checked_records_copy(records, request["output_dir"])
        with target:
            ir_module = relax.get_pipeline("static_shape_tuning", total_trials=0, target=target, work_dir=work_dir)(ir_module)
        relax_pipeline = relax.get_default_pipeline(target)
    elif pipeline == "zero":
        ir_module = relax.get_pipeline("zero")(ir_module)
        relax_pipeline = relax.get_default_pipeline(target)
    elif pipeline == "cpu":
        relax_pipeline = relax.get_default_pipeline(target)
    elif pipeline == "default":
        relax_pipeline = "default"
    else:
        raise DriverError("pipeline", f"unknown pipeline `{pipeline}`")
    with tvm.transform.PassContext(opt_level=request.get("opt_level", 3)):
        return tvm.compile(
            ir_module, target, relax_pipeline=relax_pipeline, tir_pipeline=request.get("tir_pipeline") or "default"
        )


def checked_records_copy(records, output_dir):
    """Copies the tuning records into output_dir/records, one JSON value a line.

    TVM's JSON database crashes the process on a blank line and on malformed JSON, so
    blank lines (an editor's trailing newline) are dropped and any other bad line is
    an error that names the file and line.
    """
    work_dir = os.path.join(output_dir, "records")
    os.makedirs(work_dir, exist_ok=True)
    for name in ("database_workload.json", "database_tuning_record.json"):
        lines = []
        with open(os.path.join(records, name)) as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    json.loads(line)
                except ValueError as error:
                    raise DriverError(
                        "tuning_records",
                        f"{os.path.join(records, name)} line {number} is not valid JSON ({error}); "
                        "restore it from version control or run `cargo relax tune` again",
                    ) from error
                lines.append(line if line.endswith("\n") else line + "\n")
        with open(os.path.join(work_dir, name), "w") as handle:
            handle.writelines(lines)
    return work_dir


def tune_module(ir_module, request):
    """Meta-schedule tuning of every task of the module, `trials` per task, recorded in
    `work_dir` (a JSON database; an interrupted run resumes from what it holds)."""
    import shutil

    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    work_dir = request["tune"]["work_dir"]
    trials = int(request["tune"]["trials"])
    # Meta-schedule needs the core count of the machine it measures on.
    tuning_target = make_target(request, {"num-cores": os.cpu_count() or 1})
    with tuning_target:
        prepared = tvm.transform.Sequential(
            [relax.transform.DecomposeOpsForInference(), relax.transform.CanonicalizeBindings(), relax.get_pipeline("zero")]
        )(ir_module)
    tasks = ms.relax_integration.extract_tasks(prepared, tuning_target)
    print(f"relax-build: tuning {len(tasks)} task(s), {trials} trials each, records in {work_dir}", flush=True)
    with tuning_target:
        relax.transform.MetaScheduleTuneIRMod(
            params={}, work_dir=work_dir, max_trials_global=trials * max(len(tasks), 1), max_trials_per_task=trials
        )(prepared)
    shutil.rmtree(os.path.join(work_dir, "logs"), ignore_errors=True)
    print(f"relax-build: tuning done; records in {work_dir}", flush=True)


def export_library(executable, output_dir, library_name, cross_compiler):
    from tvm.support import cc

    temporary = os.path.join(output_dir, library_name + ".tmp.so")
    try:
        if cross_compiler:
            executable.export_library(temporary, fcompile=cc.cross_compiler(cross_compiler))
        else:
            executable.export_library(temporary)
    except Exception as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        raise DriverError("link", f"linking the library with `{cross_compiler or 'the host C++ compiler'}` failed", "\n".join(lines[-6:])) from error
    os.replace(temporary, os.path.join(output_dir, library_name))


def run(request):
    import tvm

    if tvm.__version__ != SUPPORTED_TVM_VERSION and os.environ.get("RELAX_ALLOW_TVM_VERSION") != "1":
        raise DriverError(
            "tvm_version",
            f"this toolchain has apache-tvm {tvm.__version__}; relax-build supports {SUPPORTED_TVM_VERSION}",
        )
    source_path = request["source"]
    onnx_weights = None
    if source_path.endswith(".onnx"):
        ir_module, onnx_weights = load_onnx(request)
        weight_names = None
    else:
        module = import_source(request["model"], source_path)
        entry_object = resolve_entry(module, request["entry"], source_path)
        ir_module, weight_names = load_ir_module(entry_object, request.get("inputs"), source_path)
    functions = signature_of(ir_module, weight_names)
    target = make_target(request)
    if request.get("tune"):
        tune_module(ir_module, request)
        return
    try:
        executable = compile_module(ir_module, target, request)
    except DriverError:
        raise
    except Exception as error:
        raise DriverError("compile", f"{type(error).__name__}: {error}", traceback.format_exc(limit=-3)) from error
    output_dir = request["output_dir"]
    export_library(executable, output_dir, request["library_name"], request.get("cross_compiler"))
    if onnx_weights is not None:
        names = [weight["name"] for weight in functions[0]["weights"]]
        write_safetensors(os.path.join(output_dir, request["weights_name"]), list(zip(names, onnx_weights)))
    signature = {
        "model": request["model"],
        "tvm_version": tvm.__version__,
        "target": str(target),
        "functions": functions,
        "weights_written": onnx_weights is not None,
    }
    write_atomically(os.path.join(output_dir, "signature.json"), json.dumps(signature, indent=2) + "\n")


def main():
    with open(sys.argv[1]) as handle:
        request = json.load(handle)
    output_dir = request["output_dir"]
    error_path = os.path.join(output_dir, "error.json")
    if os.path.exists(error_path):
        os.remove(error_path)
    try:
        run(request)
    except DriverError as error:
        report = {"kind": error.kind, "message": error.message, "detail": error.detail}
        write_atomically(error_path, json.dumps(report, indent=2) + "\n")
        sys.exit(1)
    except Exception as error:  # a bug here or in TVM: keep the whole traceback
        report = {"kind": "internal", "message": f"{type(error).__name__}: {error}", "detail": traceback.format_exc()}
        write_atomically(error_path, json.dumps(report, indent=2) + "\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
