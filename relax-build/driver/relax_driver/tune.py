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


def builder_with_intrinsics_imported(ms):
    """meta-schedule's local builder, its workers importing TVM's tensor intrinsics first.

    Its default build imports them in each worker (a new pool for each round of builds)
    inside the build's 30 s timeout. That import parses hundreds of TVMScript functions,
    10-100 s of CPU on a slow 2-core machine: every build of a round timed out and the
    task recorded nothing. A worker's initializer runs untimed, before its builds.
    """

    # Nested, so that the worker gets it by value: it cannot import relax_driver.
    def import_tensor_intrinsics():
        import tvm.s_tir.tensor_intrin  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel

    return ms.builder.LocalBuilder(initializer=import_tensor_intrinsics)


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
    ms.relax_integration.tune_relax(
        prepared,
        {},
        tuning_target,
        work_dir,
        max_trials_global=trials * max(len(tasks), 1),
        max_trials_per_task=trials,
        builder=builder_with_intrinsics_imported(ms),
    )
    shutil.rmtree(os.path.join(work_dir, "logs"), ignore_errors=True)
    keep_records_that_beat_default_schedules(tasks, work_dir, tuning_target)
    print(f"relax-build: tuning done; records in {work_dir}", flush=True)


# meta-schedule's runner settings (its EvaluatorConfig defaults): the mean of 3 runs,
# more while they take under 100 ms, after one warm-up run.
NUMBER, MIN_REPEAT_MS = 3, 100


def default_schedule_seconds(mod, target):
    """The mean run time of `mod`'s `main` (a task's function) under relax-build's default
    schedules, on random inputs, measured as meta-schedule's runner measures."""
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from .schedules import default_schedule_pass

    # dlight's pass updates the module it is given in place: a copy keeps `mod` the
    # workload it is.
    with target:
        scheduled = default_schedule_pass(target)(tvm.IRModule(dict(mod.functions_items())))
    library = tvm.tirx.build(scheduled, target=target)
    device = tvm.cpu()
    generator = np.random.default_rng(0)
    arguments = [
        tvm.runtime.tensor(generator.uniform(size=[int(dim) for dim in info.shape]).astype(info.dtype), device)
        for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    ]
    evaluator = library.time_evaluator("main", device, number=NUMBER, repeat=1, min_repeat_ms=MIN_REPEAT_MS)
    return evaluator(*arguments).mean


def keep_records_that_beat_default_schedules(tasks, work_dir, target):
    """Keeps in `work_dir` the best record of each task that runs faster than relax-build's
    default schedule of it, and drops the others' (a build gives a function without
    records its default schedule).

    A few trials on a small task can leave a record slower than the default schedule:
    ResNet-50's input layout transform has a design space of one serial loop nest, 733 us
    tuned against a parallel, vectorized default. Tuning must not make a model slower.
    """
    from tvm.s_tir import meta_schedule as ms

    database = ms.database.JSONDatabase(work_dir=work_dir)
    kept = []
    for task in tasks:
        mod = task.dispatched[0]
        if not database.has_workload(mod):
            continue
        best = database.get_top_k(database.commit_workload(mod), 1)
        if not best:
            continue
        tuned = sum(float(run) for run in best[0].run_secs) / len(best[0].run_secs)
        default = default_schedule_seconds(mod, target)
        verdict = "kept" if tuned < default else "dropped: the default schedule is faster"
        print(
            f"relax-build: task `{task.task_name}`: tuned {tuned * 1e6:.1f} us, "
            f"default schedule {default * 1e6:.1f} us; records {verdict}",
            flush=True,
        )
        if tuned < default:
            kept.append((mod, best[0]))
    staging = os.path.join(work_dir, "kept")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    selected = ms.database.JSONDatabase(work_dir=staging)
    for mod, record in kept:
        selected.commit_tuning_record(
            ms.database.TuningRecord(
                record.trace, selected.commit_workload(mod), record.run_secs, record.target, record.args_info
            )
        )
    for name in ("database_workload.json", "database_tuning_record.json"):
        staged = os.path.join(staging, name)
        if not os.path.exists(staged):
            open(staged, "w").close()
        os.replace(staged, os.path.join(work_dir, name))
    shutil.rmtree(staging, ignore_errors=True)
