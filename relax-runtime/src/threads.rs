//! How many threads one call uses, and on which CPUs.
//!
//! TVM runs a model's parallel loops (and relax-runtime's kernels) on a pool of worker
//! threads that belongs to the thread making the call. Left to itself, TVM sizes that
//! pool at half the cores on x86 (`TVM_NUM_THREADS` aside), pins its workers to single
//! cores, and restricts the calling thread to the first cores, so that two request
//! threads end up on the same core; and it asks the kernel for the CPU count on every
//! parallel loop. So before a thread's first call, relax-runtime configures its pool
//! itself: the threads may run on any CPU the calling thread may run on (nothing is
//! pinned; the calling thread keeps its own affinity), and a call uses
//! `set_threads_per_call`'s count, else `TVM_NUM_THREADS`, else every CPU this process
//! may use (its affinity mask and cgroup quota). With one thread per call the pool has
//! no worker threads at all, and parallel loops run inline.
//!
//! A program that makes one call at a time wants that default. A server whose N request
//! handlers call models at once wants each call to use about cores / N threads, so that
//! the pools do not fight over the cores: [`set_threads_per_call`]`(1)` with one handler
//! per core.

use std::cell::Cell;
use std::ffi::CString;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::object::{self, argument, Callee, Value, CONFIG_THREADPOOL, MAKE_ARRAY};

/// 0: the default (`TVM_NUM_THREADS`, else the CPUs this process may use).
static PER_CALL: AtomicUsize = AtomicUsize::new(0);

/// How this thread's TVM pool is configured.
#[derive(Clone, Copy)]
struct Applied {
    /// The `PER_CALL` setting it was configured for.
    setting: usize,
    /// The threads a call on this thread uses.
    threads: usize,
}

thread_local! {
    /// `None` until this thread's first call.
    static APPLIED: Cell<Option<Applied>> = const { Cell::new(None) };
}

/// TVM's `kSpecifyThreadShareAllCore`: every pool thread may run on any of the given CPUs.
const SHARE_ALL_CPUS: i64 = -3;

/// A CPU id no machine has (glibc's `cpu_set_t` holds ids below `CPU_SETSIZE`). A
/// one-CPU list naming it sizes a thread's pool at one thread (no workers) and makes
/// TVM run parallel loops inline; TVM's attempt to pin the thread to it fails, and the
/// thread's own affinity is restored anyway.
const NO_CPU: usize = libc::CPU_SETSIZE as usize;

/// Sets how many threads each model call uses from now on, in every thread (0 restores
/// the default: `TVM_NUM_THREADS`, else the number of CPUs this process may use). A call
/// never uses more threads than the CPUs its calling thread may run on.
///
/// Each calling thread applies the setting before its next call, so it costs nothing
/// per call once applied. TVM sizes a thread's pool at that thread's first call: a
/// thread whose first call used one thread keeps one thread per call. Set this before
/// starting the threads that call models.
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

/// Configures the calling thread's TVM pool for the current setting, if it changed.
pub(crate) fn apply_to_this_thread() -> Result<()> {
    let setting = PER_CALL.load(Ordering::Relaxed);
    if APPLIED
        .get()
        .is_some_and(|applied| applied.setting == setting)
    {
        return Ok(());
    }
    let cpus = this_thread_cpus();
    let wanted = match setting {
        0 => default_threads(),
        threads => threads,
    };
    let threads = wanted.clamp(1, cpus.len().max(1));
    let affinity = Affinity::of_this_thread();
    let configured = if threads == 1 {
        configure_pool(&[NO_CPU], 1)
    } else {
        configure_pool(&cpus, threads)
    };
    // TVM pins the calling thread when it creates the pool; the thread keeps its own.
    if let Some(affinity) = affinity {
        affinity.restore();
    }
    configured?;
    APPLIED.set(Some(Applied { setting, threads }));
    Ok(())
}

/// The threads a call on this thread uses (1 before the thread's first call).
pub(crate) fn this_thread_threads() -> usize {
    APPLIED.get().map_or(1, |applied| applied.threads)
}

/// `runtime.config_threadpool(SHARE_ALL_CPUS, threads, cpus)`: sizes this thread's pool
/// at `cpus.len()` threads, of which a call uses `threads`.
fn configure_pool(cpus: &[usize], threads: usize) -> Result<()> {
    let context = || format!("configuring this thread's TVM pool ({threads} thread(s) per call)");
    let names: Vec<CString> = cpus
        .iter()
        .map(|cpu| CString::new(cpu.to_string()).expect("a number has no NUL byte"))
        .collect();
    let mut items: Vec<_> = names.iter().map(|name| argument::str(name)).collect();
    let array = match object::call(Callee::Global(MAKE_ARRAY), &mut items, context)? {
        Value::Object(array) => array,
        other => {
            return Err(Error::Tvm {
                kind: "TypeError".to_string(),
                message: format!("`ffi.Array` returned {}", other.describe()),
                context: context(),
            })
        }
    };
    let threads = i64::try_from(threads).unwrap_or(i64::MAX);
    object::call(
        Callee::Global(CONFIG_THREADPOOL),
        &mut [
            argument::int(SHARE_ALL_CPUS),
            argument::int(threads),
            array.as_argument(),
        ],
        context,
    )?;
    Ok(())
}

/// `TVM_NUM_THREADS` if it is a positive number, else the CPUs this process may use.
fn default_threads() -> usize {
    std::env::var("TVM_NUM_THREADS")
        .ok()
        .and_then(|value| value.trim().parse::<usize>().ok())
        .filter(|&threads| threads > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |cpus| cpus.get()))
}

/// A thread's CPU affinity mask.
struct Affinity(libc::cpu_set_t);

impl Affinity {
    /// The calling thread's mask (None if the system does not say).
    fn of_this_thread() -> Option<Affinity> {
        // SAFETY: `cpu_set_t` is plain bits; all zeros is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid, writable `cpu_set_t` of the size passed; pid 0 is the
        // calling thread.
        let status = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
        (status == 0).then_some(Affinity(set))
    }

    /// Makes it the calling thread's mask again.
    fn restore(&self) {
        // SAFETY: a valid `cpu_set_t` of the size passed; pid 0 is the calling thread. A
        // failure leaves the mask as it was, which is all that could be done anyway.
        unsafe { libc::sched_setaffinity(0, std::mem::size_of_val(&self.0), &self.0) };
    }

    fn cpus(&self) -> Vec<usize> {
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
            .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &self.0) })
            .collect()
    }
}

/// The CPUs the calling thread may run on (its affinity mask), in order.
fn this_thread_cpus() -> Vec<usize> {
    match Affinity::of_this_thread() {
        Some(affinity) => affinity.cpus(),
        None => (0..std::thread::available_parallelism().map_or(1, |cpus| cpus.get())).collect(),
    }
}
