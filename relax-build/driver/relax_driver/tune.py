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


def builder_with_intrinsics_imported(ms, cross_compiler=None):
    """meta-schedule's local builder, its workers importing TVM's tensor intrinsics first.

    Its default build imports them in each worker (a new pool for each round of builds)
    inside the build's 30 s timeout. That import parses hundreds of TVMScript functions,
    10-100 s of CPU on a slow 2-core machine: every build of a round timed out and the
    task recorded nothing. A worker's initializer runs untimed, before its builds.

    With `cross_compiler` (a device's target), each candidate is linked into a shared
    library for the device: relax-rpc-server loads shared libraries only (meta-schedule's
    default is a tar of object files, which TVM's Python server links on the device).
    """

    # Nested, so that the worker gets them by value: it cannot import relax_driver.
    def import_tensor_intrinsics():
        import tvm.s_tir.tensor_intrin  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel

    def export_shared_library(mod):
        import os as os_
        import tempfile

        from tvm.support import cc

        path = os_.path.join(tempfile.mkdtemp(), "tvm_tmp_mod.so")
        compile_function = cc.cross_compiler(
            cross_compiler, get_target_triple=cc.get_target_by_dump_machine(cross_compiler)
        )
        mod.export_library(path, fcompile=compile_function)
        return path

    if cross_compiler:
        return ms.builder.LocalBuilder(initializer=import_tensor_intrinsics, f_export=export_shared_library)
    return ms.builder.LocalBuilder(initializer=import_tensor_intrinsics)


def rpc_runner(ms, device):
    """meta-schedule's RPC runner for `device` (the request's "rpc"), its arguments filled
    from this machine (relax-rpc-server has no random fill of its own)."""

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
    return ms.runner.RPCRunner(config, f_alloc_argument=alloc_argument, max_workers=1)


def device_session(device):
    """A session with the device (the request's "rpc"), through its tracker."""
    from tvm import rpc

    return rpc.connect_tracker(device["host"], device["port"]).request(device["key"], priority=1, session_timeout=0)


def device_cores(device):
    """The worker threads of the machine that measures: this one, or the device (TVM's
    runtime there counts them as it will run)."""
    if not device:
        return os.cpu_count() or 1
    return int(device_session(device).get_function("runtime.NumThreads")())


def wait_for_device(device):
    """Waits (device["wait_seconds"] at most) for a device of the key at the tracker: the
    runner's own request would wait forever."""
    import time

    from tvm import rpc

    host, port, key = device["host"], device["port"], device["key"]
    try:
        tracker = rpc.connect_tracker(host, port)
    except Exception as error:
        raise DriverError(
            "tuning_device", f"cannot reach the tracker at {host}:{port}: {error}; start one with `cargo relax tracker`"
        ) from error
    deadline = time.monotonic() + device["wait_seconds"]
    while True:
        summary = tracker.summary()
        if summary.get("queue_info", {}).get(key, {}).get("free", 0) > 0:
            return
        if time.monotonic() > deadline:
            keys = sorted(
                {info["key"][len("server:"):] for info in summary.get("server_info", []) if info["key"].startswith("server:")}
            )
            raise DriverError(
                "tuning_device",
                f"no device of key `{key}` became free at the tracker {host}:{port} within {device['wait_seconds']} s "
                f"(the devices it knows: {', '.join(f'`{k}`' for k in keys) or 'none'}); start "
                f"`relax-rpc-server --tracker {host}:{port} --key {key}` on the device, or wait longer with --wait",
                subject=key,
            )
        time.sleep(0.5)


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
    device = request.get("rpc")
    if device:
        wait_for_device(device)
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
    ms.relax_integration.tune_relax(
        prepared,
        {},
        tuning_target,
        work_dir,
        max_trials_global=trials * max(len(tasks), 1),
        max_trials_per_task=trials,
        builder=builder_with_intrinsics_imported(ms, request.get("cross_compiler") if device else None),
        runner=rpc_runner(ms, device) if device else "local",
    )
    shutil.rmtree(os.path.join(work_dir, "logs"), ignore_errors=True)
    measure = DeviceMeasure(device, request.get("cross_compiler")) if device else None
    keep_records_that_beat_default_schedules(tasks, work_dir, tuning_target, measure)
    print(f"relax-build: tuning done; records in {work_dir}", flush=True)


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

        from tvm.support import cc

        session = device_session(self.device)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "default_schedule.so")
            compile_function = cc.cross_compiler(
                self.cross_compiler, get_target_triple=cc.get_target_by_dump_machine(self.cross_compiler)
            )
            library.export_library(path, fcompile=compile_function)
            session.upload(path)
        remote = session.load_module("default_schedule.so")
        device = session.cpu()
        import tvm

        remote_arguments = [tvm.runtime.tensor(argument.numpy(), device) for argument in arguments]
        evaluator = remote.time_evaluator("main", device, number=NUMBER, repeat=1, min_repeat_ms=MIN_REPEAT_MS)
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


def keep_records_that_beat_default_schedules(tasks, work_dir, target, measure=None):
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
    for name in ("database_workload.json", "database_tuning_record.json"):
        staged = os.path.join(staging, name)
        if not os.path.exists(staged):
            open(staged, "w").close()
        os.replace(staged, os.path.join(work_dir, name))
    shutil.rmtree(staging, ignore_errors=True)
