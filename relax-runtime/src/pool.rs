//! The thread pool that runs a call's parallel work: the parallel loops TVM compiled into
//! a model (see [`backend`](crate::backend)) and relax-runtime's kernels.
//!
//! Each thread that calls a model has a pool of its own, of [`this_thread_threads`]` -
//! 1` worker threads, started at its first parallel launch (so two request threads never
//! share workers). A launch of `tasks` tasks runs `body(task, tasks)` once for each task;
//! the tasks are claimed, one at a time, by whichever thread comes first: the calling
//! thread claims tasks too, and when none is left it waits only for the tasks that
//! workers claimed and are running.
//!
//! That is the difference with TVM's own pool, which hands task `i` to worker `i` and
//! waits for each worker to run it: on a machine shared with other processes, a worker
//! that the scheduler has not run yet holds the whole launch until it gets a core.
//! Here the calling thread takes that worker's task instead, and the worker, when it
//! wakes, finds nothing left to do.
//!
//! Idle workers spin for [`SPIN`] (a model's launches follow each other within
//! microseconds), then sleep until the next launch wakes them. A launch from inside a
//! task (a nested parallel loop) runs its tasks on the thread that makes it.
//!
//! [`this_thread_threads`]: crate::threads::this_thread_threads

use std::cell::{Cell, RefCell};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How long an idle worker spins, waiting for the next launch, before it sleeps.
const SPIN: Duration = Duration::from_micros(100);

/// A thread that waits (an idle worker, or a caller waiting for a worker's task) yields
/// its core every this many spins: on a machine where another process holds the other
/// cores, the thread it waits for may be queued behind it on the same core.
const YIELD_EVERY: u32 = 64;

/// The stack of a worker thread: what a C or C++ thread gets by default on Linux, since
/// workers run TVM's compiled code (the 2 MiB of a Rust thread is less).
const WORKER_STACK: usize = 8 << 20;

/// Whether launches are counted ([`count`]; the profiler turns it on).
static COUNTING: AtomicBool = AtomicBool::new(false);

/// The parallel work one thread launched (see [`this_thread_counts`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PoolCounts {
    /// Parallel launches (a kernel's or a compiled parallel loop's) of two or more tasks.
    pub(crate) launches: u64,
    /// Launches that found a worker asleep and woke it.
    pub(crate) wakes: u64,
    /// Tasks run by a worker rather than the launching thread.
    pub(crate) worker_tasks: u64,
}

impl PoolCounts {
    /// What was counted between `earlier` and `self`.
    pub(crate) fn since(self, earlier: PoolCounts) -> PoolCounts {
        PoolCounts {
            launches: self.launches - earlier.launches,
            wakes: self.wakes - earlier.wakes,
            worker_tasks: self.worker_tasks - earlier.worker_tasks,
        }
    }
}

/// Turns counting on, for every thread.
pub(crate) fn count() {
    COUNTING.store(true, Ordering::Relaxed);
}

/// The launches this thread made so far, while counting was on.
pub(crate) fn this_thread_counts() -> PoolCounts {
    COUNTS.get()
}

/// A task panicked (relax-runtime's kernels turn their panics into errors first, and
/// TVM's compiled loops cannot panic, so this means a bug).
#[derive(Debug)]
pub(crate) struct Panicked;

/// Runs `body(task, tasks)` for each of `tasks` tasks (0: one per thread of this
/// thread's calls, [`this_thread_threads`](crate::threads::this_thread_threads)) on this
/// thread's pool, and returns when all are done.
pub(crate) fn run(tasks: usize, body: &(dyn Fn(usize, usize) + Sync)) -> Result<(), Panicked> {
    if IN_TASK.get() {
        // A nested launch: this thread's pool is busy with the launch this task is part of.
        return inline(tasks.max(1), body);
    }
    let threads = crate::threads::this_thread_threads();
    let tasks = if tasks == 0 { threads } else { tasks };
    if threads <= 1 || tasks <= 1 {
        return inline(tasks, body);
    }
    let launched = POOL.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        let pool = match &mut *pool {
            Some(pool) if pool.workers.len() == threads - 1 => pool,
            pool => pool.insert(Pool::start(threads - 1)),
        };
        pool.launch(tasks, body)
    });
    // No pool while this thread is exiting (a launch from another thread-local's
    // destructor): this thread runs the tasks.
    launched.unwrap_or_else(|_| inline(tasks, body))
}

/// Runs every task on this thread, in order.
fn inline(tasks: usize, body: &(dyn Fn(usize, usize) + Sync)) -> Result<(), Panicked> {
    let mut outcome = Ok(());
    for task in 0..tasks {
        if !run_task(body, task, tasks) {
            outcome = Err(Panicked);
        }
    }
    outcome
}

/// Runs one task, marked as inside a task; false if it panicked.
fn run_task(body: &(dyn Fn(usize, usize) + Sync), task: usize, tasks: usize) -> bool {
    let outer = IN_TASK.replace(true);
    let finished = catch_unwind(AssertUnwindSafe(|| body(task, tasks))).is_ok();
    IN_TASK.set(outer);
    finished
}

thread_local! {
    /// This thread's pool, started at its first parallel launch.
    static POOL: RefCell<Option<Pool>> = const { RefCell::new(None) };
    /// Whether this thread is running a task (of its own pool's launch or, for a
    /// worker, of its owner's).
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
    /// The launches this thread made, while counting is on.
    static COUNTS: Cell<PoolCounts> = const {
        Cell::new(PoolCounts { launches: 0, wakes: 0, worker_tasks: 0 })
    };
}

/// One launch's body, which the caller keeps alive until every task has finished.
struct Job<'a> {
    body: &'a (dyn Fn(usize, usize) + Sync),
}

/// What a pool's owner and its workers share.
struct Shared {
    /// `(tasks << 32) | claimed`: the current launch's task count and how many of its
    /// tasks have been claimed. A thread claims a task with `fetch_add(1)`: it got task
    /// `claimed` if that is below `tasks`. Whatever value a claim increments belongs to
    /// the current launch, so a claim can never reach a launch that has ended.
    claims: AtomicU64,
    /// The current launch's job, set before its `claims` are published.
    job: AtomicPtr<Job<'static>>,
    /// Tasks of the current launch that have finished.
    finished: AtomicUsize,
    /// Whether a task of the current launch panicked.
    panicked: AtomicBool,
    /// Workers that are asleep, or about to be: a launch wakes them when this is not 0.
    sleeping: AtomicUsize,
    /// Set when the pool is dropped: its workers exit.
    stop: AtomicBool,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            claims: AtomicU64::new(0),
            job: AtomicPtr::new(std::ptr::null_mut()),
            finished: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        }
    }

    fn has_unclaimed_task(&self) -> bool {
        let claims = self.claims.load(Ordering::SeqCst);
        claims & u64::from(u32::MAX) < claims >> 32
    }

    /// Claims a task of the current launch and runs it; false when none was left.
    fn claim_and_run(&self) -> bool {
        if !self.has_unclaimed_task() {
            return false;
        }
        // Acquire: the claim reads the value the launch published (or a later claim's),
        // which makes the launch's `job` and reset counters visible.
        let claims = self.claims.fetch_add(1, Ordering::Acquire);
        let (tasks, task) = (
            (claims >> 32) as usize,
            (claims & u64::from(u32::MAX)) as usize,
        );
        if task >= tasks {
            return false;
        }
        // SAFETY: the launch that published `tasks` set `job` before, and keeps the job
        // alive until all its tasks have finished, this one included (it waits for
        // `finished`, which this thread increments only after the body returned).
        let job = unsafe { &*self.job.load(Ordering::Relaxed) };
        if !run_task(job.body, task, tasks) {
            self.panicked.store(true, Ordering::Relaxed);
        }
        // Release: the task's writes happen before the launch returns.
        self.finished.fetch_add(1, Ordering::Release);
        true
    }
}

/// A thread's pool: its workers and what they share.
struct Pool {
    shared: Arc<Shared>,
    workers: Vec<Thread>,
}

impl Pool {
    fn start(workers: usize) -> Pool {
        let shared = Arc::new(Shared::new());
        let workers = (0..workers)
            .filter_map(|index| {
                let shared = Arc::clone(&shared);
                std::thread::Builder::new()
                    .name(format!("relax-pool-{index}"))
                    .stack_size(WORKER_STACK)
                    .spawn(move || work(&shared))
                    .ok()
                    .map(|handle| handle.thread().clone())
            })
            .collect();
        // A worker that could not be started leaves fewer workers; the calling thread
        // claims what they would have (and the next launch tries to start them again).
        Pool { shared, workers }
    }

    fn launch(&self, tasks: usize, body: &(dyn Fn(usize, usize) + Sync)) -> Result<(), Panicked> {
        let shared = &*self.shared;
        let Ok(tasks_field) = u32::try_from(tasks) else {
            return inline(tasks, body);
        };
        let job = Job { body };
        shared.job.store(
            (&job as *const Job<'_>).cast_mut().cast(),
            Ordering::Relaxed,
        );
        shared.finished.store(0, Ordering::Relaxed);
        shared.panicked.store(false, Ordering::Relaxed);
        // SeqCst, with the workers' `sleeping` and `claims` accesses: either a worker
        // going to sleep sees these tasks, or this launch sees it sleeping and wakes it.
        shared
            .claims
            .store(u64::from(tasks_field) << 32, Ordering::SeqCst);
        let woke = shared.sleeping.load(Ordering::SeqCst) > 0;
        if woke {
            for worker in &self.workers {
                worker.unpark();
            }
        }
        let mut own_tasks = 0;
        while shared.claim_and_run() {
            own_tasks += 1;
        }
        // Every task is claimed; the ones left run on workers that started them (and
        // may share this thread's core: see `YIELD_EVERY`).
        let mut spins = 0u32;
        while shared.finished.load(Ordering::Acquire) < tasks {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(YIELD_EVERY) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        if COUNTING.load(Ordering::Relaxed) {
            let mut counts = COUNTS.get();
            counts.launches += 1;
            counts.wakes += u64::from(woke);
            counts.worker_tasks += (tasks - own_tasks) as u64;
            COUNTS.set(counts);
        }
        if shared.panicked.load(Ordering::Relaxed) {
            Err(Panicked)
        } else {
            Ok(())
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for worker in &self.workers {
            worker.unpark();
        }
    }
}

/// A worker's loop: run the tasks it claims, spin for [`SPIN`] when there are none, then
/// sleep until a launch wakes it.
fn work(shared: &Shared) {
    while !shared.stop.load(Ordering::Relaxed) {
        if shared.claim_and_run() {
            continue;
        }
        let idle = Instant::now();
        let mut spins = 0u32;
        while !shared.has_unclaimed_task() && !shared.stop.load(Ordering::Relaxed) {
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(YIELD_EVERY) {
                std::hint::spin_loop();
                continue;
            }
            std::thread::yield_now();
            if idle.elapsed() > SPIN {
                shared.sleeping.fetch_add(1, Ordering::SeqCst);
                // A launch that published its tasks before the increment is seen here;
                // one after it sees `sleeping` and unparks this thread (an unpark before
                // the park makes the park return at once).
                if !shared.has_unclaimed_task() && !shared.stop.load(Ordering::SeqCst) {
                    std::thread::park();
                }
                shared.sleeping.fetch_sub(1, Ordering::SeqCst);
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{mpsc, Arc, Mutex};

    use super::{run, work, Pool, Shared};

    /// How many times each of `tasks` tasks ran in one launch, and the task counts the
    /// body was given.
    fn counts(pool: &Pool, tasks: usize) -> (Vec<usize>, Vec<usize>) {
        let runs: Vec<AtomicUsize> = (0..tasks).map(|_| AtomicUsize::new(0)).collect();
        let given = Mutex::new(Vec::new());
        pool.launch(tasks, &|task, count| {
            runs[task].fetch_add(1, Ordering::Relaxed);
            given.lock().unwrap().push(count);
        })
        .unwrap();
        let runs = runs.into_iter().map(AtomicUsize::into_inner).collect();
        (runs, given.into_inner().unwrap())
    }

    #[test]
    fn every_task_runs_once_per_launch() {
        let pool = Pool::start(2);
        for tasks in [2, 3, 7, 64, 1000] {
            for _ in 0..50 {
                let (runs, given) = counts(&pool, tasks);
                assert_eq!(runs, vec![1; tasks], "{tasks} tasks");
                assert!(given.iter().all(|&count| count == tasks), "{given:?}");
            }
        }
    }

    #[test]
    fn launches_after_the_workers_slept_still_run_every_task() {
        let pool = Pool::start(1);
        for _ in 0..3 {
            std::thread::sleep(super::SPIN * 20);
            assert_eq!(counts(&pool, 4).0, vec![1; 4]);
        }
    }

    #[test]
    fn a_launch_does_not_wait_for_a_worker_that_has_not_started() {
        // A worker the scheduler does not run: held before its loop until released.
        let shared = Arc::new(Shared::new());
        let (release, held) = mpsc::channel::<()>();
        let worker = {
            let shared = Arc::clone(&shared);
            std::thread::spawn(move || {
                held.recv().unwrap();
                work(&shared);
            })
        };
        let pool = Pool {
            shared,
            workers: vec![worker.thread().clone()],
        };
        let caller = std::thread::current().id();
        for tasks in [2, 5] {
            let ran_by = Mutex::new(Vec::new());
            pool.launch(tasks, &|task, _| {
                ran_by
                    .lock()
                    .unwrap()
                    .push((task, std::thread::current().id()));
            })
            .unwrap();
            let mut ran_by = ran_by.into_inner().unwrap();
            ran_by.sort_by_key(|&(task, _)| task);
            let expected: Vec<_> = (0..tasks).map(|task| (task, caller)).collect();
            assert_eq!(ran_by, expected);
        }
        release.send(()).unwrap();
        assert_eq!(counts(&pool, 8).0, vec![1; 8]);
        drop(pool);
        worker.join().unwrap();
    }

    #[test]
    fn a_panicking_task_is_reported_and_the_pool_still_works() {
        let pool = Pool::start(1);
        let outcome = pool.launch(4, &|task, _| {
            if task == 3 {
                panic!("task 3");
            }
        });
        assert!(outcome.is_err());
        assert_eq!(counts(&pool, 4).0, vec![1; 4]);
    }

    #[test]
    fn a_nested_launch_runs_on_the_thread_that_makes_it() {
        let inner_threads = Mutex::new(Vec::new());
        run(4, &|_, _| {
            let outer = std::thread::current().id();
            run(3, &|_, tasks| {
                inner_threads
                    .lock()
                    .unwrap()
                    .push((outer == std::thread::current().id(), tasks));
            })
            .unwrap();
        })
        .unwrap();
        let inner = inner_threads.into_inner().unwrap();
        assert_eq!(inner.len(), 12);
        assert!(inner.iter().all(|&(same, tasks)| same && tasks == 3));
    }
}
