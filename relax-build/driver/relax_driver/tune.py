"""Meta-schedule tuning of a model's tasks (`cargo relax tune`)."""

import functools
import os
import shutil

from .devices import NO_FREE_DEVICE, DeviceError, runner_session, session
from .errors import DriverError
from .linking import export_candidate, export_shared_library
from .signature import symbolic_dims

# The files of a meta-schedule JSON database, as relax-build/src/tuning.rs names them (its
# tests check that the two agree).
RECORD_FILES = ("database_workload.json", "database_tuning_record.json")


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


def builder_with_intrinsics_imported(ms, on_device=False, cross_compiler=None):
    """meta-schedule's local builder, its workers importing TVM's tensor intrinsics first.

    Its default build imports them in each worker (a new pool for each round of builds)
    inside the build's 30 s timeout. That import parses hundreds of TVMScript functions,
    10-100 s of CPU on a slow 2-core machine: every build of a round timed out and the
    task recorded nothing. A worker's initializer runs untimed, before its builds.

    `on_device` (measuring on a device): each candidate is linked into a shared library,
    which relax-rpc-server loads, by the host's compiler or `cross_compiler`.
    """

    # Nested, so that the worker gets it by value.
    def import_tensor_intrinsics():
        import tvm.s_tir.tensor_intrin  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel

    if not on_device:
        return ms.builder.LocalBuilder(initializer=import_tensor_intrinsics)
    return ms.builder.LocalBuilder(
        initializer=import_tensor_intrinsics, f_export=functools.partial(export_candidate, cross_compiler)
    )


def rpc_runner(ms, device):
    """meta-schedule's RPC runner for `device` (the request's "rpc"): its sessions wait
    `--wait` seconds at most for a free device, and its arguments are filled from this
    machine (relax-rpc-server has no random fill of its own)."""

    def alloc_argument(session, remote_device, args_info, alloc_repeat):
        import numpy as np
        from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

        generator = np.random.default_rng(0)

        def fill(tensor):
            tensor.copyfrom(generator.uniform(size=[int(dim) for dim in tensor.shape]).astype(tensor.dtype))

        return alloc_argument_common(fill, remote_device, args_info, alloc_repeat)

    config = ms.runner.RPCConfig(
        tracker_host=device["host"],
        tracker_port=device["port"],
        tracker_key=device["key"],
        session_priority=1,
        session_timeout_sec=600,
    )
    return ms.runner.RPCRunner(
        config,
        f_create_session=functools.partial(runner_session, device["wait_seconds"]),
        f_alloc_argument=alloc_argument,
        max_workers=1,
    )


def device_session(device):
    """A session with a free device of the request's "rpc", waiting --wait at most."""
    try:
        return session(device["host"], device["port"], device["key"], device["wait_seconds"])
    except DeviceError as error:
        raise DriverError("tuning_device", str(error), subject=device["key"]) from error


def device_cores(device):
    """The worker threads of the machine that measures: this one, or the device (TVM's
    runtime there counts them as it will run)."""
    if not device:
        return os.cpu_count() or 1
    return int(device_session(device).get_function("runtime.NumThreads")())


def let_workers_import_the_driver():
    """meta-schedule's builder and runner workers are fresh Python processes; the
    functions given to them by reference (`linking.export_candidate`,
    `devices.runner_session`) need this driver importable there."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    if root not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *paths])


def failure_reporter(ms, device):
    """A measure callback that prints each candidate that failed to build or to run (on
    the device, with `device`), counts them, and stops the run when the device has left
    the tracker and none came back within --wait (every later candidate would wait as long)."""
    from tvm.ir.utils import derived_object

    @derived_object
    class ReportFailures(ms.measure_callback.PyMeasureCallback):
        def __init__(self):
            super().__init__()
            self.failed = 0
            self.measured = 0
            self.device_lost = None

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            task = task_scheduler.tasks_[task_id].ctx.task_name
            where = f"on device `{device['key']}`" if device else "on this machine"
            for built, ran in zip(builder_results, runner_results):
                self.measured += 1
                error = built.error_msg or ran.error_msg
                if not error:
                    continue
                self.failed += 1
                stage = "to build" if built.error_msg else f"to run {where}"
                reason = " ".join(line.strip() for line in error.strip().splitlines()[-2:])
                print(f"relax-build: task `{task}`: a candidate failed {stage}; tuning goes on ({reason[:300]})", flush=True)
                if device and NO_FREE_DEVICE in error:
                    self.device_lost = error[error.index(NO_FREE_DEVICE) :].splitlines()[0]
                    raise RuntimeError(self.device_lost)

    return ReportFailures()


def tune_module(ir_module, functions, request):
    """Tunes every task of the module, `trials` per task. meta-schedule records into
    `work_dir`/unfinished (a JSON database; an interrupted run resumes from it); at the
    end, each task's best record that beats the default schedule goes to `work_dir`,
    which builds apply."""
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from .build import make_target

    refuse_symbolic_dims(functions, request["model"])
    work_dir = request["work_dir"]
    trials = int(request["trials"])
    unfinished = unfinished_database(work_dir)
    # Meta-schedule needs the core count of the machine it measures on.
    device = request.get("rpc")
    tuning_target = make_target(request, {"num-cores": device_cores(device)})
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
    let_workers_import_the_driver()
    reporter = failure_reporter(ms, device)
    try:
        ms.relax_integration.tune_relax(
            prepared,
            {},
            tuning_target,
            unfinished,
            max_trials_global=trials * max(len(tasks), 1),
            max_trials_per_task=trials,
            builder=builder_with_intrinsics_imported(ms, bool(device), request.get("cross_compiler")),
            runner=rpc_runner(ms, device) if device else "local",
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), reporter],
        )
    except Exception as error:
        if not reporter.device_lost:
            raise
        raise DriverError(
            "tuning_device",
            f"the device left during tuning: {reporter.device_lost}. The {reporter.measured} candidate(s) "
            f"measured so far are kept in {unfinished}, and the same `cargo relax tune` command resumes from "
            "them; builds apply only a finished run's records",
            subject=device["key"],
        ) from error
    if reporter.failed:
        print(
            f"relax-build: {reporter.failed} of {reporter.measured} candidates failed (each is recorded as failed, "
            "and the search went on without it)",
            flush=True,
        )
    shutil.rmtree(os.path.join(unfinished, "logs"), ignore_errors=True)
    measure = DeviceMeasure(device, request.get("cross_compiler")) if device else None
    keep_records_that_beat_default_schedules(tasks, unfinished, work_dir, tuning_target, measure)
    shutil.rmtree(unfinished, ignore_errors=True)
    print(f"relax-build: tuning done; records in {work_dir}", flush=True)


def unfinished_database(work_dir):
    """The folder meta-schedule records into: left by an interrupted run (resumed), or new,
    starting from the records of the last finished run."""
    unfinished = os.path.join(work_dir, "unfinished")
    if not os.path.isdir(unfinished):
        os.makedirs(unfinished)
        for name in RECORD_FILES:
            if os.path.exists(os.path.join(work_dir, name)):
                shutil.copyfile(os.path.join(work_dir, name), os.path.join(unfinished, name))
    return unfinished


# meta-schedule's runner settings (its EvaluatorConfig defaults): the mean of 3 runs,
# more while they take under 100 ms, after one warm-up run.
NUMBER, MIN_REPEAT_MS = 3, 100


class DeviceMeasure:
    """Runs a compiled function on the device (the request's "rpc") instead of this
    machine: linked with the target's cross compiler, uploaded, loaded, timed there."""

    def __init__(self, device, cross_compiler):
        self.device = device
        self.cross_compiler = cross_compiler

    def time(self, library, arguments):
        import tempfile

        import tvm

        remote = device_session(self.device)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "default_schedule.so")
            export_shared_library(library, path, self.cross_compiler)
            remote.upload(path)
        module = remote.load_module("default_schedule.so")
        remote_device = remote.cpu()
        remote_arguments = [tvm.runtime.tensor(argument.numpy(), remote_device) for argument in arguments]
        evaluator = module.time_evaluator("main", remote_device, number=NUMBER, repeat=1, min_repeat_ms=MIN_REPEAT_MS)
        return evaluator(*remote_arguments).mean


def default_schedule_seconds(mod, target, measure=None):
    """The mean run time of `mod`'s `main` (a task's function) under relax-build's default
    schedules, on random inputs, measured as meta-schedule's runner measures (on the
    device, with `measure`)."""
    import numpy as np
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from .schedules import default_schedule_pass

    # dlight's pass updates the module it is given in place: a copy keeps `mod` the
    # workload it is.
    with target:
        scheduled = default_schedule_pass(target)(tvm.IRModule(dict(mod.functions_items())))
    library = tvm.tirx.build(scheduled, target=target)
    generator = np.random.default_rng(0)
    arguments = [
        tvm.runtime.tensor(generator.uniform(size=[int(dim) for dim in info.shape]).astype(info.dtype))
        for info in ms.arg_info.ArgInfo.from_prim_func(mod["main"])
    ]
    if measure:
        return measure.time(library, arguments)
    evaluator = library.time_evaluator("main", tvm.cpu(), number=NUMBER, repeat=1, min_repeat_ms=MIN_REPEAT_MS)
    return evaluator(*arguments).mean


def keep_records_that_beat_default_schedules(tasks, tuned_dir, work_dir, target, measure=None):
    """Keeps in `work_dir` the best record in `tuned_dir` of each task that runs faster
    than relax-build's default schedule of it, and drops the others' (a build gives a
    function without records its default schedule).

    A few trials on a small task can leave a record slower than the default schedule:
    ResNet-50's input layout transform has a design space of one serial loop nest, 733 us
    tuned against a parallel, vectorized default. Tuning must not make a model slower.
    """
    from tvm.s_tir import meta_schedule as ms

    database = ms.database.JSONDatabase(work_dir=tuned_dir)
    kept = []
    for task in tasks:
        mod = task.dispatched[0]
        if not database.has_workload(mod):
            continue
        best = database.get_top_k(database.commit_workload(mod), 1)
        if not best:
            continue
        tuned = sum(float(run) for run in best[0].run_secs) / len(best[0].run_secs)
        default = default_schedule_seconds(mod, target, measure)
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
    for name in RECORD_FILES:
        staged = os.path.join(staging, name)
        if not os.path.exists(staged):
            open(staged, "w").close()
        os.replace(staged, os.path.join(work_dir, name))
    shutil.rmtree(staging, ignore_errors=True)
