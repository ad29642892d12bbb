//! The parallel loops TVM compiled into a model, run on relax-runtime's [`pool`].
//!
//! TVM outlines each parallel loop of a model into a function that runs one task's share
//! of the loop (`task` of `num_task`), and calls it through the library's variable
//! `__TVMBackendParallelLaunch`, which the loader fills with the function registered
//! under that name (tvm-ffi's `TVMFFIEnvModRegisterContextSymbol`). relax-runtime
//! registers [`parallel_launch`] there when it loads the runtime, before any model, so
//! that every library loaded afterwards runs its loops on the calling thread's pool,
//! where a task no worker has started is run by the calling thread instead of waited
//! for.
//!
//! A loop whose launches keep finishing within a few microseconds runs on the calling
//! thread alone from then on ([`LoopHistory`]): with shapes known only at run time,
//! relax-build's schedules parallelize every loop, and silero-vad's call had 53 launches
//! over tensors of 128 to 1,000 values, each costing more in the hand-off to a worker
//! than it saved. A loop run so that takes longer goes back to the pool.
//!
//! `TVMBackendParallelBarrier` (a barrier between a launch's tasks, which TIR emits only
//! for the `parallel_barrier_when_finish` pragma; relax-build's schedules never do) needs
//! every task running at once, which the pool does not promise: [`parallel_barrier`]
//! fails with an error that says so, instead of waiting forever.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::api::{self, Api};
use crate::globals;
use crate::object::Object;
use crate::pool;
use crate::sys;

/// `TVMParallelGroupEnv` of TVM's `c_backend_api.h`.
#[repr(C)]
struct ParallelGroupEnv {
    sync_handle: *mut c_void,
    num_task: i32,
}

/// `FTVMParallelLambda` of TVM's `c_backend_api.h`: runs task `task_id` of
/// `penv.num_task`, returns 0 or -1 with an error raised on its thread.
type ParallelLambda =
    unsafe extern "C" fn(task_id: i32, penv: *mut ParallelGroupEnv, cdata: *mut c_void) -> i32;

/// Registers [`parallel_launch`] and [`parallel_barrier`] for the libraries loaded from
/// now on.
pub(crate) fn register(api: &Api) -> Result<(), String> {
    let symbols: [(&std::ffi::CStr, *mut c_void); 2] = [
        (
            c"__TVMBackendParallelLaunch",
            parallel_launch as unsafe extern "C" fn(_, _, _) -> i32 as *mut c_void,
        ),
        (
            c"__TVMBackendParallelBarrier",
            parallel_barrier as unsafe extern "C" fn(_, _) -> i32 as *mut c_void,
        ),
    ];
    for (name, symbol) in symbols {
        // SAFETY: a C string and a function of the type TVM's code calls through that
        // variable (`c_backend_api.h`); tvm-ffi copies the name.
        if unsafe { (api.register_context_symbol)(name.as_ptr(), symbol) } != 0 {
            return Err(format!(
                "registering {} with tvm-ffi failed",
                name.to_string_lossy()
            ));
        }
    }
    Ok(())
}

/// A pointer that the tasks of one launch share (TVM's closure data, which its tasks only
/// read).
#[derive(Clone, Copy)]
struct Closure(*mut c_void);

// SAFETY: TVM's parallel tasks read the closure data, each writing only its own share
// of the loop's output; it outlives the launch (it is on the launching frame's stack).
unsafe impl Send for Closure {}
// SAFETY: as above.
unsafe impl Sync for Closure {}

impl Closure {
    /// The pointer (a method, so closures capture the `Closure`, not the raw pointer).
    fn get(self) -> *mut c_void {
        self.0
    }
}

/// A TVM error a task raised, moved from the thread that ran it.
struct RaisedError(Object);

// SAFETY: tvm-ffi objects are reference counted atomically, and an error object is
// immutable once raised.
unsafe impl Send for RaisedError {}

impl RaisedError {
    /// The error raised on this thread, if any (this thread no longer holds it).
    fn take() -> Option<RaisedError> {
        let mut handle: sys::TVMFFIObjectHandle = std::ptr::null_mut();
        // SAFETY: moves this thread's raised error (if any) into `handle`, which we then
        // own.
        unsafe { (api::loaded().ffi.TVMFFIErrorMoveFromRaised)(&mut handle) };
        // SAFETY: `handle` is null or an error object whose reference we now own.
        unsafe { Object::from_owned(handle) }.map(RaisedError)
    }

    /// Raises it on this thread.
    fn raise(self) {
        // SAFETY: a live error object; the thread's error slot takes a reference of its
        // own, and ours is released when `self` drops.
        unsafe { (api::loaded().ffi.TVMFFIErrorSetRaised)(self.0.handle()) };
    }
}

/// A parallel launch that finished within this runs on the calling thread next time: a
/// hand-off to a worker and back costs about a microsecond (two cores of an Intel Xeon),
/// so a loop this short saves less than it costs.
const INLINE_BELOW: Duration = Duration::from_micros(2);

/// A loop run on the calling thread that took longer than this goes back to the pool
/// (twice [`INLINE_BELOW`]: about what two threads would have finished in that much).
const PARALLEL_ABOVE: Duration = Duration::from_micros(4);

/// How each parallel loop (by its task function) ran last on this thread.
#[derive(Default)]
struct LoopHistory {
    inline: HashMap<usize, bool>,
}

impl LoopHistory {
    /// Whether the loop `key` runs on the calling thread alone this time.
    fn inline(&self, key: usize) -> bool {
        self.inline.get(&key).copied().unwrap_or(false)
    }

    /// Records that the loop `key` took `elapsed`, run inline or not.
    fn ran(&mut self, key: usize, inline: bool, elapsed: Duration) {
        let next = if inline {
            elapsed <= PARALLEL_ABOVE
        } else {
            elapsed < INLINE_BELOW
        };
        self.inline.insert(key, next);
    }
}

thread_local! {
    static HISTORY: RefCell<LoopHistory> = RefCell::new(LoopHistory::default());
}

/// `TVMBackendParallelLaunch(flambda, cdata, num_task)`: runs `flambda` for each task
/// (`num_task` of them, 0 for one per thread of this thread's calls) on the pool, or as
/// one task on this thread when its last launches were short (see the module docs), and
/// raises the first task's error, if one failed, on this thread.
unsafe extern "C" fn parallel_launch(
    lambda: Option<ParallelLambda>,
    cdata: *mut c_void,
    num_task: i32,
) -> i32 {
    let Some(lambda) = lambda else {
        globals::raise(
            api::loaded(),
            "ValueError",
            "TVMBackendParallelLaunch was called with no task function",
        );
        return -1;
    };
    let closure = Closure(cdata);
    // The first failed task's error (None inside if it raised none).
    let failed: Mutex<Option<Option<RaisedError>>> = Mutex::new(None);
    let body = |task: usize, tasks: usize| {
        // The pool gives at most `num_task` tasks (or its threads), which fit.
        let num_task = i32::try_from(tasks).unwrap_or(i32::MAX);
        let mut env = ParallelGroupEnv {
            sync_handle: std::ptr::null_mut(),
            num_task,
        };
        // SAFETY: TVM's task function for this closure, called once per task with the
        // task count the launch runs; `env` outlives the call.
        let status = unsafe { lambda(task as i32, &mut env, closure.get()) };
        if status != 0 {
            let error = RaisedError::take();
            let mut first = failed
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            if first.is_none() {
                *first = Some(error);
            }
        }
    };
    let key = lambda as usize;
    let inline = HISTORY.with(|history| history.borrow().inline(key));
    let started = Instant::now();
    // Inline, one task: the task function then covers the whole loop.
    let tasks = if inline {
        1
    } else {
        usize::try_from(num_task).unwrap_or(0)
    };
    let run = pool::run(tasks, &body);
    let elapsed = started.elapsed();
    HISTORY.with(|history| history.borrow_mut().ran(key, inline, elapsed));
    if run.is_err() {
        globals::raise(
            api::loaded(),
            "InternalError",
            "a task of a parallel loop panicked",
        );
        return -1;
    }
    let failed = failed
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    match failed {
        None => 0,
        Some(Some(error)) => {
            error.raise();
            -1
        }
        Some(None) => {
            globals::raise(
                api::loaded(),
                "RuntimeError",
                "a task of a parallel loop failed and raised no error",
            );
            -1
        }
    }
}

/// `TVMBackendParallelBarrier(task_id, penv)`: refused (see the module docs).
unsafe extern "C" fn parallel_barrier(_task_id: i32, _penv: *mut ParallelGroupEnv) -> i32 {
    globals::raise(
        api::loaded(),
        "RuntimeError",
        "this model's code waits at a barrier between the tasks of a parallel loop \
         (TIR's `parallel_barrier_when_finish` pragma), which relax-runtime's thread pool does \
         not support: its tasks need not all run at once. Build the model without that pragma",
    );
    -1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_short_loop_runs_inline_until_it_takes_long_again() {
        let mut history = LoopHistory::default();
        let (short, long) = (Duration::from_micros(1), Duration::from_micros(50));
        assert!(!history.inline(7), "a loop first runs on the pool");
        history.ran(7, false, long);
        assert!(!history.inline(7));
        history.ran(7, false, short);
        assert!(history.inline(7));
        // Another loop keeps its own history.
        assert!(!history.inline(8));
        // Inline within twice the threshold: it stays inline.
        history.ran(7, true, Duration::from_micros(3));
        assert!(history.inline(7));
        // A larger shape takes longer inline: back to the pool.
        history.ran(7, true, long);
        assert!(!history.inline(7));
    }
}
