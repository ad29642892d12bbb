//! The kernels' [`Launch`](relax_kernels::Launch) on the calling thread's [`pool`], the
//! one that runs the model's own parallel loops: no second pool competes for the cores.

use crate::pool;

/// Runs `body(task, tasks)` for every task of the calling thread's pool (`tasks` of them,
/// one per thread of its calls) and returns when all are done. With `inline` (for work
/// too small to share), runs `body(0, 1)` on this thread instead.
pub(super) fn on_pool(inline: bool, body: &(dyn Fn(usize, usize) + Sync)) -> Result<(), String> {
    if inline {
        body(0, 1);
        return Ok(());
    }
    pool::run(0, body)
        .map_err(|pool::Panicked| "a task of a relax-runtime kernel panicked".to_string())
}
