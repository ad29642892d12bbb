//! The kernels' [`Launch`](relax_kernels::Launch) on TVM's thread pool
//! (`TVMBackendParallelLaunch`), so that one pool, sized by `TVM_NUM_THREADS` /
//! `set_threads_per_call`, runs both TVM's code and the kernels: no second pool
//! competes for the cores.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::api::{self, ParallelGroupEnv};

/// What one task runs: `body(task, tasks)`.
struct Job<'a> {
    body: &'a (dyn Fn(usize, usize) + Sync),
}

unsafe extern "C" fn run_task(task: i32, env: *mut ParallelGroupEnv, data: *mut c_void) -> i32 {
    // SAFETY: `data` is the `Job` that `on_tvm_pool` passed, alive until the launch
    // returns; `env` is TVM's group environment for this launch.
    let (job, tasks) = unsafe { (&*(data as *const Job<'_>), (*env).num_task) };
    let (task, tasks) = (task.max(0) as usize, tasks.max(1) as usize);
    match catch_unwind(AssertUnwindSafe(|| (job.body)(task, tasks))) {
        Ok(()) => 0,
        Err(_) => -1,
    }
}

/// Runs `body(task, tasks)` for every task of TVM's pool for this thread (`tasks` of
/// them, from 1 to the pool's size), and returns when all are done. With `inline` (for
/// work too small to share), or when calls on this thread use one thread, runs
/// `body(0, 1)` on this thread instead.
pub(super) fn on_tvm_pool(
    inline: bool,
    body: &(dyn Fn(usize, usize) + Sync),
) -> Result<(), String> {
    if inline || crate::threads::this_thread_threads() == 1 {
        body(0, 1);
        return Ok(());
    }
    let job = Job { body };
    let launch = api::loaded().parallel_launch;
    // SAFETY: `run_task` reads `job` only during the launch, which returns after every
    // task finished; the tasks only share `body`, which is `Sync`.
    let status = unsafe {
        launch(
            Some(run_task),
            (&job as *const Job<'_>).cast_mut().cast(),
            0,
        )
    };
    if status == 0 {
        Ok(())
    } else {
        Err("a task of a relax-runtime kernel failed".to_string())
    }
}
