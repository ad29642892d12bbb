"""Compile driver of relax-build: one Relax model in, one exported library out.

relax-build runs this file with the toolchain's Python as

    python main.py REQUEST_JSON

The request (relax-build's `driver::Request`) names the action (compile, tune or
inspect), the model source, the entry attribute, the input specs, the TVM target dict
and the output folder; the driver reads nothing else (no environment variables). On
success it leaves its outputs in that folder; on failure it writes `error.json`
({"kind", "message", "detail", "subject", "operators"}, relax-build's
`driver::Failure`) and exits with status 1, so that relax-build reports the error in
Rust with the model name and manifest key. Files are never written in place: each goes
to a temporary name and is renamed when complete.
"""

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from relax_driver import files  # noqa: E402
from relax_driver.errors import DriverError  # noqa: E402

# The version of the request/response protocol (relax-build's DRIVER_PROTOCOL).
PROTOCOL = 1


def check_request(request):
    if request.get("protocol") != PROTOCOL:
        raise DriverError(
            "protocol",
            f"relax-build sent a request of protocol {request.get('protocol')}, but this driver speaks {PROTOCOL}; "
            "run `cargo relax clean` (a stale driver is cached) and build again",
        )


def check_tvm_version(request):
    import tvm

    wanted = request["tvm_version"]
    if tvm.__version__ != wanted and not request.get("allow_other_tvm_version"):
        raise DriverError(
            "tvm_version",
            f"this toolchain has apache-tvm {tvm.__version__}; relax-build supports {wanted}",
        )


def load_model(request):
    """The request's model as (IRModule, weight names or None, weight values to write or
    None, warnings for the build's output)."""
    if request["source_kind"] == "onnx":
        from relax_driver import onnx_source

        ir_module, onnx_weights, warnings = onnx_source.load(request)
        return ir_module, None, onnx_weights, warnings
    if request["source_kind"] == "torch_program":
        from relax_driver import torch_source

        return torch_source.load_program(request)
    from relax_driver import sources, torch_source

    module = sources.import_source(request["model"], request["source"])
    entry = sources.resolve_entry(module, request["entry"], request["source"])
    if torch_source.imported():
        entry = torch_source.resolve(entry, request["source"])
        if torch_source.is_module(entry):
            return torch_source.export_module(entry, request)
    ir_module, weight_names = sources.load_ir_module(entry, request["inputs"], request["source"])
    return ir_module, weight_names, None, []


def run(request):
    check_request(request)
    check_tvm_version(request)
    from relax_driver import signature

    ir_module, weight_names, written_weights, warnings = load_model(request)
    layouts = {}
    if request.get("offload") and request["pipeline"] != "default":
        # Matmuls and convolutions to relax-runtime's kernels; what they run is not
        # TVM's to compile (or tune). A CNN's convolutions first go on channel-blocked
        # tensors where that pays (see blocked_layout.py); 1-D ones are 2-D ones first,
        # and a one-hot encoding's product by a matrix picks its rows (one_hot.py).
        from relax_driver import blocked_layout, conv1d, offload, one_hot

        ir_module = conv1d.as_conv2d(one_hot.as_rows(ir_module))
        ir_module, _, (written_weights, weight_names) = blocked_layout.convert(
            ir_module, request["target"], warnings, (written_weights, weight_names)
        )
        ir_module, layouts = offload.rewrite(
            ir_module,
            None,
            request.get("precision", "f32"),
            request.get("matrix_units", False),
            request.get("fast_bf16", False),
        )
        if request.get("precision") == "bf16":
            warnings.extend(offload.precision_warnings(ir_module))
    functions = signature.signature_of(ir_module, weight_names, layouts)
    if request["source_kind"] == "onnx":
        from relax_driver import onnx_source

        signature.name_outputs(functions, "main", onnx_source.output_names(request["source"]))
    output_dir = request["output_dir"]
    if request["action"] == "inspect":
        files.write_atomically(
            os.path.join(output_dir, "inspection.json"), json.dumps({"functions": functions}, indent=2) + "\n"
        )
        return
    if request["action"] == "tune":
        from relax_driver import tune

        tune.tune_module(ir_module, functions, request)
        return
    from relax_driver import build

    target = build.make_target(request)
    executable = build.compile_module(ir_module, target, request)
    build.export_library(executable, output_dir, request["library_name"], request.get("cross_compiler"))
    if written_weights is not None:
        names = [weight["name"] for weight in functions[0]["weights"]]
        files.write_safetensors(os.path.join(output_dir, request["weights_name"]), list(zip(names, written_weights)))
    import tvm

    document = {
        "model": request["model"],
        "tvm_version": tvm.__version__,
        "target": str(target),
        "functions": functions,
        "weights_written": written_weights is not None,
        "warnings": warnings,
    }
    files.write_atomically(
        os.path.join(output_dir, request["signature_name"]), json.dumps(document, indent=2) + "\n"
    )


def report(path, kind, message, detail="", subject=None, operators=None):
    document = {"kind": kind, "message": message, "detail": detail, "subject": subject, "operators": operators or []}
    files.write_atomically(path, json.dumps(document, indent=2) + "\n")


def main():
    with open(sys.argv[1]) as handle:
        request = json.load(handle)
    error_path = os.path.join(request["output_dir"], "error.json")
    try:
        run(request)
    except DriverError as error:
        report(error_path, error.kind, error.message, error.detail, error.subject, error.operators)
        sys.exit(1)
    except SystemExit as error:
        # Raised by the user's code outside the source import (which reports it itself).
        report(error_path, "source_exit", f"the model code called sys.exit({error.code!r})", traceback.format_exc())
        sys.exit(1)
    except Exception as error:  # a bug here or in TVM: keep the whole traceback
        report(error_path, "internal", f"{type(error).__name__}: {error}", traceback.format_exc())
        sys.exit(1)


if __name__ == "__main__":
    main()
