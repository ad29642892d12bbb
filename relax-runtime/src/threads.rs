//! How many threads one call uses.
//!
//! A call runs a model's parallel loops (those TVM compiled, and relax-runtime's kernels)
//! on a pool of worker threads that belongs to the thread making the call
//! ([`pool`](crate::pool)). A call uses `set_threads_per_call`'s count, else
//! `TVM_NUM_THREADS`, else every CPU this process may use (its affinity mask and cgroup
//! quota), and never more than the CPUs the calling thread may run on. The workers may
//! run on any of those CPUs: nothing is pinned, and the calling thread keeps its own
//! affinity. With one thread per call the pool has no worker threads at all, and
//! parallel loops run on the calling thread.
//!
//! A program that makes one call at a time wants that default. A server whose N request
//! handlers call models at once wants each call to use about cores / N threads, so that
//! the pools do not fight over the cores: [`set_threads_per_call`]`(1)` with one handler
//! per core.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// 0: the default (`TVM_NUM_THREADS`, else the CPUs this process may use).
static PER_CALL: AtomicUsize = AtomicUsize::new(0);

/// The threads a call on this thread uses, worked out for one setting.
#[derive(Clone, Copy)]
struct WorkedOut {
    /// The `PER_CALL` setting it was worked out for.
    setting: usize,
    threads: usize,
}

thread_local! {
    /// `None` until this thread's first parallel loop.
    static THIS_THREAD: Cell<Option<WorkedOut>> = const { Cell::new(None) };
}

/// Sets how many threads each model call uses from now on, in every thread (0 restores
/// the default: `TVM_NUM_THREADS`, else the number of CPUs this process may use). A call
/// never uses more threads than the CPUs its calling thread may run on.
///
/// Each calling thread reads the setting at its next parallel loop, and resizes its pool
/// then if the setting changed; it costs nothing per call otherwise.
///
/// ```
/// // A server with one request handler per core: one thread per call.
/// relax_runtime::set_threads_per_call(1);
/// ```
pub fn set_threads_per_call(threads: usize) {
    PER_CALL.store(threads, Ordering::Relaxed);
}

/// The threads per call now set (0: the default).
pub fn threads_per_call() -> usize {
    PER_CALL.load(Ordering::Relaxed)
}

/// The threads a call on this thread uses.
pub(crate) fn this_thread_threads() -> usize {
    let setting = PER_CALL.load(Ordering::Relaxed);
    match THIS_THREAD.get() {
        Some(worked_out) if worked_out.setting == setting => worked_out.threads,
        _ => {
            let wanted = match setting {
                0 => default_threads(),
                threads => threads,
            };
            let threads = wanted.clamp(1, this_thread_cpus().max(1));
            THIS_THREAD.set(Some(WorkedOut { setting, threads }));
            threads
        }
    }
}

/// `TVM_NUM_THREADS` if it is a positive number, else the CPUs this process may use.
fn default_threads() -> usize {
    std::env::var("TVM_NUM_THREADS")
        .ok()
        .and_then(|value| value.trim().parse::<usize>().ok())
        .filter(|&threads| threads > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |cpus| cpus.get()))
}

/// How many CPUs the calling thread may run on (its affinity mask).
fn this_thread_cpus() -> usize {
    // SAFETY: `cpu_set_t` is plain bits; all zeros is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable `cpu_set_t` of the size passed; pid 0 is the
    // calling thread.
    let status = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if status == 0 {
        // SAFETY: `set` is the initialized mask read above.
        usize::try_from(unsafe { libc::CPU_COUNT(&set) }).unwrap_or(1)
    } else {
        std::thread::available_parallelism().map_or(1, |cpus| cpus.get())
    }
}
