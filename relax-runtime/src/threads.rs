//! How many threads one call uses.
//!
//! TVM runs a model's parallel loops on a pool of worker threads that belongs to the
//! thread making the call; its size defaults to `TVM_NUM_THREADS`, else the number of
//! cores. A program that makes one call at a time wants that default. A server whose
//! N request handlers call models at once wants each call to use about cores / N
//! threads, so that the pools do not fight over the cores:
//! [`set_threads_per_call`]`(1)` with one handler per core.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::Result;
use crate::object::{self, argument, Callee, CONFIG_THREADPOOL};

/// 0: TVM's default (`TVM_NUM_THREADS`, else the cores).
static PER_CALL: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// What this thread's TVM pool was configured to (0: untouched).
    static CONFIGURED: Cell<usize> = const { Cell::new(0) };
}

/// TVM's "big cores" affinity mode (all cores on a machine without big.LITTLE).
const BIG_CORES: i64 = 1;

/// Sets how many threads each model call uses from now on, in every thread (0 restores
/// TVM's default: `TVM_NUM_THREADS`, else the number of cores).
///
/// Each calling thread applies the setting before its next call, so it costs nothing
/// per call once applied.
///
/// ```
/// // A server with one request handler per core: one thread per call.
/// relax_runtime::set_threads_per_call(1);
/// ```
pub fn set_threads_per_call(threads: usize) {
    PER_CALL.store(threads, Ordering::Relaxed);
}

/// The threads per call now set (0: TVM's default).
pub fn threads_per_call() -> usize {
    PER_CALL.load(Ordering::Relaxed)
}

/// Configures the calling thread's TVM pool for the current setting, if it changed.
pub(crate) fn apply_to_this_thread() -> Result<()> {
    let wanted = PER_CALL.load(Ordering::Relaxed);
    if CONFIGURED.get() == wanted {
        return Ok(());
    }
    let threads = i64::try_from(wanted).unwrap_or(i64::MAX);
    object::call(
        Callee::Global(CONFIG_THREADPOOL),
        &mut [argument::int(BIG_CORES), argument::int(threads)],
        || format!("setting {wanted} thread(s) per call"),
    )?;
    CONFIGURED.set(wanted);
    Ok(())
}
