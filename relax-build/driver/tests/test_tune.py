"""Unit tests of what tuning keeps (tune.py): a task's records stay only where they run
faster than the default schedule, measured on this machine (these need TVM:
tests/driver_python.rs runs them with the toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import sys
import tempfile
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tvm  # noqa: E402
from tvm import relax  # noqa: E402
from tvm.s_tir import meta_schedule as ms  # noqa: E402

from host_cpu import VECTOR_CPU  # noqa: E402
from relax_driver import tune  # noqa: E402

TARGET = tvm.target.Target({"kind": "llvm", "mcpu": VECTOR_CPU, "num-cores": 2})


def tasks(*shapes):
    """meta-schedule's tasks of a module with a relu over each of `shapes`."""
    builder = relax.BlockBuilder()
    inputs = [relax.Var(f"x{index}", relax.TensorType(shape, "float32")) for index, shape in enumerate(shapes)]
    with builder.function("main", inputs):
        with builder.dataflow():
            outputs = [builder.emit(relax.op.nn.relu(x)) for x in inputs]
            output = builder.emit_output(relax.Tuple(outputs))
        builder.emit_func_output(output)
    with TARGET:
        mod = relax.get_pipeline("zero")(builder.get())
    return ms.relax_integration.extract_tasks(mod, TARGET)


def commit(database, task, seconds):
    """A record of `task` (its outer loop parallel) that ran in `seconds`."""
    mod = task.dispatched[0]
    schedule = tvm.s_tir.Schedule(mod)
    (block,) = schedule.get_child_blocks(schedule.get_sblock("root"))
    schedule.parallel(schedule.get_loops(block)[0])
    database.commit_tuning_record(
        ms.database.TuningRecord(
            schedule.trace,
            database.commit_workload(mod),
            [seconds],
            TARGET,
            ms.arg_info.ArgInfo.from_prim_func(mod["main"]),
        )
    )


class KeepRecordsThatBeatDefaults(unittest.TestCase):
    def test_only_records_faster_than_the_default_schedule_stay(self):
        faster, slower = tasks([64, 1024], [32, 1024])
        with tempfile.TemporaryDirectory() as work_dir:
            tuned_dir = os.path.join(work_dir, "unfinished")
            os.makedirs(tuned_dir)
            database = ms.database.JSONDatabase(work_dir=tuned_dir)
            # No schedule runs a 64x1024 relu in a nanosecond, and none takes a second.
            commit(database, faster, 1e-9)
            commit(database, faster, 2e-9)
            commit(database, slower, 1.0)
            del database

            tune.keep_records_that_beat_default_schedules([faster, slower], tuned_dir, work_dir, TARGET)

            self.assertEqual(
                sorted(os.listdir(work_dir)), ["database_tuning_record.json", "database_workload.json", "unfinished"]
            )
            kept = ms.database.JSONDatabase(work_dir=work_dir)
            self.assertTrue(kept.has_workload(faster.dispatched[0]))
            self.assertFalse(kept.has_workload(slower.dispatched[0]))
            best = kept.get_all_tuning_records()
            self.assertEqual([float(run) for record in best for run in record.run_secs], [1e-9])

    def test_the_default_schedule_is_timed_on_the_function(self):
        seconds = tune.default_schedule_seconds(tasks([256, 1024])[0].dispatched[0], TARGET)
        # 1 MB read and written: more than a nanosecond, far less than a second.
        self.assertGreater(seconds, 1e-7)
        self.assertLess(seconds, 0.1)


class UnfinishedDatabase(unittest.TestCase):
    def test_a_new_run_starts_from_the_finished_records_and_an_interrupted_one_resumes(self):
        with tempfile.TemporaryDirectory() as work_dir:
            for name in tune.RECORD_FILES:
                with open(os.path.join(work_dir, name), "w") as handle:
                    handle.write(f"finished {name}\n")
            unfinished = tune.unfinished_database(work_dir)
            for name in tune.RECORD_FILES:
                with open(os.path.join(unfinished, name)) as handle:
                    self.assertEqual(handle.read(), f"finished {name}\n")
                with open(os.path.join(unfinished, name), "a") as handle:
                    handle.write("measured before the interruption\n")
            # The interrupted run's database is resumed, not replaced by the finished one.
            self.assertEqual(tune.unfinished_database(work_dir), unfinished)
            with open(os.path.join(unfinished, tune.RECORD_FILES[1])) as handle:
                self.assertIn("measured before the interruption", handle.read())


if __name__ == "__main__":
    unittest.main()
