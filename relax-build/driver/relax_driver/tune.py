"""Meta-schedule tuning of a model's tasks (`cargo relax tune`)."""

import os
import shutil

from .errors import DriverError
from .signature import symbolic_dims


def refuse_symbolic_dims(functions, model):
    """Tuning measures kernels of fixed sizes: a symbolic input dim is refused up front."""
    names = symbolic_dims(functions)
    if names:
        arguments = [
            f"{function['name']}({argument['name']})"
            for function in functions
            for argument in function["inputs"]
            if any(isinstance(dim, str) for dim in argument["shape"])
        ]
        raise DriverError(
            "tuning_symbolic",
            f"tuning needs static shapes, but the inputs of model `{model}` have symbolic dims "
            f"{', '.join(names)} (in {', '.join(arguments)}); pin them in `inputs` "
            f"(e.g. replace `{names[0]}` by a size) for the tuned model",
            subject=names[0],
        )


def tune_module(ir_module, functions, request):
    """Tunes every task of the module, `trials` per task, recorded in `work_dir` (a JSON
    database; an interrupted run resumes from what it holds)."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from .build import make_target

    refuse_symbolic_dims(functions, request["model"])
    work_dir = request["work_dir"]
    trials = int(request["trials"])
    os.makedirs(work_dir, exist_ok=True)
    # Meta-schedule needs the core count of the machine it measures on.
    tuning_target = make_target(request, {"num-cores": os.cpu_count() or 1})
    with tuning_target:
        prepared = tvm.transform.Sequential(
            [
                relax.transform.DecomposeOpsForInference(),
                relax.transform.CanonicalizeBindings(),
                relax.get_pipeline("zero"),
            ]
        )(ir_module)
    tasks = ms.relax_integration.extract_tasks(prepared, tuning_target)
    print(f"relax-build: tuning {len(tasks)} task(s), {trials} trials each, records in {work_dir}", flush=True)
    with tuning_target:
        relax.transform.MetaScheduleTuneIRMod(
            params={}, work_dir=work_dir, max_trials_global=trials * max(len(tasks), 1), max_trials_per_task=trials
        )(prepared)
    shutil.rmtree(os.path.join(work_dir, "logs"), ignore_errors=True)
    print(f"relax-build: tuning done; records in {work_dir}", flush=True)
