"""Compiling an IRModule for the target and exporting the library."""

import json
import os
import traceback

from .errors import DriverError
from .linking import export_shared_library


def make_target(request, extra=None):
    """The request's target dict (relax-build resolved `mcpu = "native"` already)."""
    import tvm

    target = dict(request["target"], **(extra or {}))
    try:
        return tvm.target.Target(target)
    except Exception as error:
        raise DriverError("compile", f"TVM rejects the target {json.dumps(target)}: {error}") from error


def backend_passes(target, request):
    """The CPU backend pipeline, with relax-runtime's kernels and default schedules.

    Every TIR function left after fusion that no tuning record scheduled gets a default
    CPU schedule (parallel outer loops, vectorized inner loops; see schedules.py; dlight
    leaves the functions marked `tirx.is_scheduled` alone). The
    tensors a public function returns are allocated by relax-runtime (see outputs.py), and
    last, the VM's checks of arguments that relax-runtime checks itself are dropped (see
    argument_checks.py).
    """
    from tvm.relax.backend.cpu_generic import pipeline as cpu

    from . import argument_checks, outputs, schedules

    passes = cpu.library_dispatch_passes(target) + fused_in_order(cpu.legalize_passes(target))
    passes.append(schedules.default_schedule_pass(target))
    passes += cpu.dataflow_lower_passes(target)
    for finalize in cpu.finalize_passes(target):
        passes.append(finalize)
        if finalize.info.name == "StaticPlanBlockMemory" and target.kind.name == "llvm":
            passes.append(outputs.allocation_pass())
    return passes + [argument_checks.drop_pass()]


def zero_pipeline_passes():
    """The passes of TVM's "zero" pipeline (`relax.get_pipeline("zero")` without a tuning
    database: legalization and fusion)."""
    from tvm import relax

    return [
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]


def fused_in_order(passes):
    """`passes` with, after each FuseOps, the pass that defines each symbolic dim before
    its first use again (see symbolic_order.py)."""
    from . import symbolic_order

    ordered = []
    for each in passes:
        ordered.append(each)
        if each.info.name == "FuseOps":
            ordered.append(symbolic_order.pass_())
    return ordered


def compile_module(ir_module, target, request):
    """Compiles with the requested pipeline, TIR pipeline and opt level.

    "zero": the passes of TVM's "zero" pipeline as a pre-pass (constant folding, fusion), then the
    CPU backend pipeline; "cpu": the backend pipeline alone (both with fast exponentials,
    see fast_math.py); "default": tvm.compile's "default" pipeline alone. (Offloading, see offload.py, happened before.) With tuning
    records, TVM's static_shape_tuning pipeline with no trials (the records' schedules
    applied) replaces the pre-pass; functions without a record get default schedules.
    """
    import tvm
    from tvm import relax

    from . import bindings, fast_math, half_precision

    ir_module = bindings.copies_as_casts(ir_module)
    pipeline = request["pipeline"]
    if pipeline not in ("zero", "cpu", "default"):
        raise DriverError("pipeline", f"unknown pipeline `{pipeline}`")
    records = request.get("tuning_records")
    try:
        with tvm.transform.PassContext(opt_level=request.get("opt_level", 3)):
            if records:
                work_dir = checked_records_copy(records, request["output_dir"])
                with target:
                    ir_module = relax.get_pipeline(
                        "static_shape_tuning", total_trials=0, target=target, work_dir=work_dir
                    )(ir_module)
            elif pipeline in ("zero", "cpu"):
                # Ops legalized first, those whose libm calls would not vectorize in fast
                # forms (see fast_math.py); the pipelines' own LegalizeOps has nothing left.
                legalize = relax.transform.LegalizeOps(
                    customize_legalize_map={**fast_math.legalizations(), **half_precision.legalizations()}
                )
                ir_module = legalize(ir_module)
            if pipeline == "zero" and not records:
                ir_module = tvm.transform.Sequential(fused_in_order(zero_pipeline_passes()))(ir_module)
            if pipeline == "default":
                relax_pipeline = "default"
            else:
                passes = backend_passes(target, request)

                @tvm.transform.module_pass(opt_level=0)
                def backend(module, _context):
                    with target:
                        return tvm.transform.Sequential(passes)(module)

                relax_pipeline = backend
            return tvm.compile(
                ir_module, target, relax_pipeline=relax_pipeline, tir_pipeline=request.get("tir_pipeline") or "default"
            )
    except DriverError:
        raise
    except Exception as error:
        raise DriverError("compile", f"{type(error).__name__}: {error}", traceback.format_exc(limit=-3)) from error


def checked_records_copy(records, output_dir):
    """Copies the tuning records into output_dir/records, one JSON value a line.

    TVM's JSON database crashes the process on a blank line and on malformed JSON, so
    blank lines (an editor's trailing newline) are dropped and any other bad line is an
    error that names the file and line.
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


def export_library(executable, output_dir, library_name, cross_compiler):
    temporary = os.path.join(output_dir, library_name + ".tmp.so")
    try:
        export_shared_library(executable, temporary, cross_compiler)
    except Exception as error:
        lines = [line for line in str(error).splitlines() if line.strip()]
        raise DriverError(
            "link",
            f"linking the library with `{cross_compiler or 'the host C++ compiler'}` failed",
            "\n".join(lines[-6:]),
        ) from error
    os.replace(temporary, os.path.join(output_dir, library_name))
