//! Where a model's calls spend their time (`RELAX_PROFILE=1`): per call target of the
//! Relax VM (a relax-kernels kernel, a function TVM compiled into the library, a VM
//! builtin) and per Relax function, with calls, total and mean time and share.
//!
//! The Relax VM calls an instrument function (`set_instrument`) before and after each
//! of its `Call` instructions with `(callee, symbol, before, result, args...)`; with
//! profiling on, every VM of a model gets one (a Rust function over the model's
//! [`Profiler`]). Each thread keeps a stack of the calls in flight: a row's time is the
//! call's own time, without the calls it makes (a Relax function calling a kernel is
//! charged its interpreter time only), so the rows add up to the time spent in the
//! model's calls and shares make sense. With profiling off no instrument is set and
//! a call costs one test of a field.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::api;
use crate::error::{Error, Result};
use crate::globals;
use crate::object::{self, Callee, Object};
use crate::pool;
use crate::sys;

/// The variable that turns profiling on (`1`, `true` or `yes`), read once per process.
pub const PROFILE_VARIABLE: &str = "RELAX_PROFILE";

/// The value of [`PROFILE_VARIABLE`] that also splits each row by the shapes of the
/// call's tensor arguments (which layer of a CNN a convolution kernel's time went to).
pub const PROFILE_SHAPES: &str = "shapes";

/// What `RELAX_PROFILE` asks for (read on the first model load).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Off,
    /// A row per call target.
    Calls,
    /// A row per call target and shapes of its tensor arguments.
    Shapes,
}

/// What `RELAX_PROFILE` asks for: `1`, `true` or `yes` a row per call target,
/// `shapes` a row per call target and argument shapes.
pub(crate) fn mode() -> Mode {
    static MODE: OnceLock<Mode> = OnceLock::new();
    *MODE.get_or_init(|| {
        let shapes = std::env::var(PROFILE_VARIABLE)
            .is_ok_and(|value| value.trim().eq_ignore_ascii_case(PROFILE_SHAPES));
        if shapes {
            Mode::Shapes
        } else if flag(PROFILE_VARIABLE) {
            Mode::Calls
        } else {
            Mode::Off
        }
    })
}

/// Whether `RELAX_PROFILE` turns profiling on (read on the first model load).
pub(crate) fn enabled() -> bool {
    mode() != Mode::Off
}

/// Whether the variable `name` is `1`, `true` or `yes` (any case).
pub(crate) fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|value| {
        ["1", "true", "yes"]
            .iter()
            .any(|yes| value.trim().eq_ignore_ascii_case(yes))
    })
}

/// What a row of a [`Profile`] times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CallKind {
    /// A Relax function of the model: its own time (relax-runtime checking the inputs,
    /// the VM interpreting it, the profiler's own cost), without the calls it makes.
    Function,
    /// A relax-kernels kernel that relax-runtime registers (`relax_runtime.dense`, ...).
    Kernel,
    /// A function TVM compiled into the model's library (fused elementwise loops,
    /// pooling, reductions, ...), under the name TVM gave it.
    Compiled,
    /// A function of TVM's runtime or relax-runtime that the VM calls
    /// (`vm.builtin.*`, `relax_runtime.output`).
    Builtin,
}

impl CallKind {
    /// The kind's one-word name, as the table prints it.
    pub fn label(self) -> &'static str {
        match self {
            CallKind::Function => "function",
            CallKind::Kernel => "kernel",
            CallKind::Compiled => "compiled",
            CallKind::Builtin => "builtin",
        }
    }
}

/// One call target of a [`Profile`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProfileRow {
    /// The name the VM calls it by (`relax_runtime.conv2d_bn`, `fused_add_relu`,
    /// `vm.builtin.reshape`), or the Relax function's name.
    pub name: String,
    /// What it is.
    pub kind: CallKind,
    /// How many times it was called.
    pub calls: u64,
    /// Its own time over all calls (without the calls it made).
    pub total: Duration,
}

impl ProfileRow {
    /// The mean time of a call.
    pub fn mean(&self) -> Duration {
        if self.calls == 0 {
            Duration::ZERO
        } else {
            self.total.div_f64(self.calls as f64)
        }
    }
}

/// Where the calls of one model went, since it was loaded or the profile was reset.
///
/// The rows' times add up to [`total`](Profile::total), the time spent in the model's
/// calls (summed over threads). Printed (`Display`) as the table that `RELAX_PROFILE=1`
/// prints to stderr when the model is dropped.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Profile {
    /// The model's name.
    pub model: String,
    /// The calls of the model's functions made from Rust.
    pub calls: u64,
    /// The time spent in those calls.
    pub total: Duration,
    /// One row per call target, the longest total first.
    pub rows: Vec<ProfileRow>,
    /// Parallel launches of two or more tasks on relax-runtime's thread pool (kernels'
    /// and compiled parallel loops') during the model's calls.
    pub pool_launches: u64,
    /// Of those, the launches that found a worker asleep (idle for longer than its spin)
    /// and woke it: each costs the wake-up of a thread.
    pub pool_wakes: u64,
    /// Tasks of those launches run by a worker rather than the calling thread.
    pub pool_worker_tasks: u64,
}

impl Profile {
    /// The row named `name`, if it was called.
    pub fn row(&self, name: &str) -> Option<&ProfileRow> {
        self.rows.iter().find(|row| row.name == name)
    }

    /// A row's share of [`total`](Profile::total), in percent.
    pub fn share(&self, row: &ProfileRow) -> f64 {
        if self.total.is_zero() {
            0.0
        } else {
            100.0 * row.total.as_secs_f64() / self.total.as_secs_f64()
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "relax-runtime profile of model `{}`: {} calls, {:.3} ms",
            self.model,
            self.calls,
            self.total.as_secs_f64() * 1e3
        )?;
        let per_call = |count: u64| count as f64 / self.calls.max(1) as f64;
        writeln!(
            f,
            "thread pools: {} parallel launches ({:.1} a call), {} of them woke a sleeping worker ({:.2} a call), {} tasks ran on workers",
            self.pool_launches,
            per_call(self.pool_launches),
            self.pool_wakes,
            per_call(self.pool_wakes),
            self.pool_worker_tasks
        )?;
        let width = self
            .rows
            .iter()
            .map(|row| row.name.len())
            .chain([4])
            .max()
            .unwrap_or(4);
        writeln!(
            f,
            "{:<width$}  {:<8}  {:>9}  {:>11}  {:>10}  {:>6}",
            "name", "kind", "calls", "total ms", "mean us", "share"
        )?;
        for row in &self.rows {
            writeln!(
                f,
                "{:<width$}  {:<8}  {:>9}  {:>11.3}  {:>10.2}  {:>5.1}%",
                row.name,
                row.kind.label(),
                row.calls,
                row.total.as_secs_f64() * 1e3,
                row.mean().as_secs_f64() * 1e6,
                self.share(row)
            )?;
        }
        Ok(())
    }
}

/// A model's profile while it runs, shared by its VMs' instruments.
pub(crate) struct Profiler {
    model: String,
    /// Whether rows are split by argument shapes ([`Mode::Shapes`]).
    shapes: bool,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    calls: u64,
    total: Duration,
    rows: HashMap<String, Entry>,
    /// The thread pool's launches during the calls.
    pool: pool::PoolCounts,
}

struct Entry {
    kind: CallKind,
    calls: u64,
    total: Duration,
}

/// A call in flight on this thread.
struct Frame {
    start: Instant,
    /// The time of the calls it made so far.
    children: Duration,
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

fn push() -> usize {
    STACK.with_borrow_mut(|stack| {
        stack.push(Frame {
            start: Instant::now(),
            children: Duration::ZERO,
        });
        stack.len() - 1
    })
}

/// Ends the call at `depth` (and any left above it by a call that failed): its total
/// and own time, the total charged to its caller.
fn pop(depth: usize) -> Option<(Duration, Duration)> {
    STACK.with_borrow_mut(|stack| {
        if stack.len() <= depth {
            return None;
        }
        stack.truncate(depth + 1);
        let frame = stack.pop()?;
        let elapsed = frame.start.elapsed();
        if let Some(caller) = stack.last_mut() {
            caller.children += elapsed;
        }
        Some((elapsed, elapsed.saturating_sub(frame.children)))
    })
}

impl Profiler {
    pub(crate) fn new(model: &str, mode: Mode) -> Profiler {
        pool::count();
        Profiler {
            model: model.to_string(),
            shapes: mode == Mode::Shapes,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `call` (one call of the Relax function `function` from Rust) and records it.
    pub(crate) fn time_call<T>(&self, function: &str, call: impl FnOnce() -> T) -> T {
        let depth = push();
        let launched_before = pool::this_thread_counts();
        let output = call();
        let launched = pool::this_thread_counts().since(launched_before);
        if let Some((elapsed, own)) = pop(depth) {
            let mut state = self.state();
            state.calls += 1;
            state.total += elapsed;
            state.pool.launches += launched.launches;
            state.pool.wakes += launched.wakes;
            state.pool.worker_tasks += launched.worker_tasks;
            record(&mut state, function, || CallKind::Function, own);
        }
        output
    }

    /// The profile so far.
    pub(crate) fn report(&self) -> Profile {
        let state = self.state();
        let mut rows: Vec<ProfileRow> = state
            .rows
            .iter()
            .map(|(name, entry)| ProfileRow {
                name: name.clone(),
                kind: entry.kind,
                calls: entry.calls,
                total: entry.total,
            })
            .collect();
        rows.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.name.cmp(&b.name)));
        Profile {
            model: self.model.clone(),
            calls: state.calls,
            total: state.total,
            rows,
            pool_launches: state.pool.launches,
            pool_wakes: state.pool.wakes,
            pool_worker_tasks: state.pool.worker_tasks,
        }
    }

    /// Forgets what was recorded (to leave warm-up calls out, say).
    pub(crate) fn reset(&self) {
        *self.state() = State::default();
    }

    /// Makes the VM `vm` report its calls to this profiler.
    pub(crate) fn attach(self: &Arc<Profiler>, vm: &Object, model: &str) -> Result<()> {
        let set_instrument =
            object::module_function(vm, "set_instrument")?.ok_or_else(|| Error::LibraryLoad {
                path: model.into(),
                message: "its VM has no `set_instrument`, which RELAX_PROFILE=1 needs".to_string(),
            })?;
        let api = api::loaded();
        let handle = Arc::into_raw(Arc::clone(self)).cast_mut().cast::<c_void>();
        let mut function: sys::TVMFFIObjectHandle = std::ptr::null_mut();
        // SAFETY: `instrument` has TVM's safe-call signature and reads `handle` as the
        // `Profiler` it is; `release` gives back the reference `into_raw` took when TVM
        // deletes the function; `function` receives an owned function object.
        let status = unsafe {
            (api.ffi.TVMFFIFunctionCreate)(handle, Some(instrument), Some(release), &mut function)
        };
        // SAFETY: on success `function` is an owned function object.
        let Some(function) = (unsafe { Object::from_owned(function) }).filter(|_| status == 0)
        else {
            // SAFETY: TVM did not take the reference: it is given back.
            unsafe { release(handle) };
            return Err(object::take_raised_error(format!(
                "making the profiler's instrument for model `{model}`"
            )));
        };
        object::call(
            Callee::Object(&set_instrument),
            &mut [function.as_argument()],
            || format!("setting the profiler's instrument on a VM of model `{model}`"),
        )?;
        Ok(())
    }
}

fn record(state: &mut State, name: &str, kind: impl FnOnce() -> CallKind, own: Duration) {
    let entry = match state.rows.get_mut(name) {
        Some(entry) => entry,
        None => state.rows.entry(name.to_string()).or_insert(Entry {
            kind: kind(),
            calls: 0,
            total: Duration::ZERO,
        }),
    };
    entry.calls += 1;
    entry.total += own;
}

/// Gives back the reference to a `Profiler` that an instrument function held.
unsafe extern "C" fn release(handle: *mut c_void) {
    // SAFETY: `handle` came from `Arc::into_raw` in `attach`, released once (by TVM
    // deleting the function, or by `attach` when TVM did not take it).
    drop(unsafe { Arc::from_raw(handle.cast_const().cast::<Profiler>()) });
}

/// The instrument: `(callee, symbol, before, result, args...)` before and after each
/// call the VM makes; returns 0 (TVM's `kNoOp`: run the call as usual).
unsafe extern "C" fn instrument(
    handle: *mut c_void,
    args: *const sys::TVMFFIAny,
    count: i32,
    result: *mut sys::TVMFFIAny,
) -> i32 {
    // SAFETY: `attach` made the function with a `Profiler` handle that it keeps alive.
    let profiler = unsafe { &*handle.cast_const().cast::<Profiler>() };
    // SAFETY: TVM passes `count` valid values that outlive the call.
    let args = unsafe { globals::arguments(args, count) };
    if let [callee, symbol, before, ..] = args {
        // SAFETY: the VM passes a bool (stored in v_int64) third.
        if unsafe { before.__bindgen_anon_2.v_int64 } != 0 {
            push();
        } else {
            // The frame pushed before this call is the top of the stack.
            let depth = STACK.with_borrow(|stack| stack.len().checked_sub(1));
            if let Some((_, own)) = depth.and_then(pop) {
                // SAFETY: the VM passes the callee's name (a string value) second.
                let name = unsafe { object::string_value(symbol) }
                    .unwrap_or_else(|| format!("<{}>", object::type_name(symbol.type_index)));
                let row = if profiler.shapes {
                    // The call's own arguments follow the result.
                    format!("{name} {}", shapes_label(&args[4.min(args.len())..]))
                } else {
                    name.clone()
                };
                let mut state = profiler.state();
                record(&mut state, &row, || classify(callee, &name), own);
            }
        }
    }
    if !result.is_null() {
        // SAFETY: TVM passes a result slot it owns; an integer holds no reference.
        unsafe { *result = object::argument::int(0) };
    }
    0
}

/// The shapes of the tensors among `args`, in order (`[1, 6, 56, 56, 16] [96, 1, 3, 3]
/// ...`; a destination-passing kernel's output last); `-` for none.
fn shapes_label(args: &[sys::TVMFFIAny]) -> String {
    let shapes: Vec<String> = args
        .iter()
        .filter_map(crate::kernels::dl_tensor)
        .map(|tensor| {
            // SAFETY: the VM passes tensors valid for the call; a DLTensor's shape has
            // `ndim` entries (none read when the rank is not positive).
            let shape = unsafe {
                let tensor = &*tensor;
                let rank = usize::try_from(tensor.ndim).unwrap_or(0);
                crate::tensor::slice_or_empty(tensor.shape.cast_const(), rank)
            };
            format!("{shape:?}")
        })
        .collect();
    if shapes.is_empty() {
        "-".to_string()
    } else {
        shapes.join(" ")
    }
}

/// What the VM calls by `name` is, from the callee passed to the instrument.
fn classify(callee: &sys::TVMFFIAny, name: &str) -> CallKind {
    if relax_kernels::KERNELS
        .iter()
        .any(|(kernel, _)| *kernel == name)
    {
        CallKind::Kernel
    } else if callee.type_index != sys::TVMFFITypeIndex_kTVMFFIFunction {
        // A closure of the VM: a Relax function (or a TIR function the VM runs).
        CallKind::Function
    } else if globals::is_global(api::loaded(), name) {
        CallKind::Builtin
    } else {
        CallKind::Compiled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_is_charged_its_own_time_without_the_calls_it_made() {
        let profiler = Profiler::new("m", Mode::Calls);
        profiler.time_call("main", || {
            let depth = push();
            std::thread::sleep(Duration::from_millis(20));
            let (elapsed, own) = pop(depth).unwrap();
            assert_eq!(elapsed, own);
            let mut state = profiler.state();
            record(&mut state, "kernel", || CallKind::Kernel, own);
        });
        let profile = profiler.report();
        assert_eq!(profile.calls, 1);
        assert_eq!(profile.rows[0].name, "kernel");
        let main = profile.row("main").unwrap();
        assert_eq!(main.kind, CallKind::Function);
        assert!(main.total < Duration::from_millis(10), "{profile}");
        let shares: f64 = profile.rows.iter().map(|row| profile.share(row)).sum();
        assert!((shares - 100.0).abs() < 1e-6, "{profile}");
        profiler.reset();
        assert!(profiler.report().rows.is_empty());
    }

    #[test]
    fn a_shapes_row_names_its_tensor_arguments_shapes_in_order() {
        let tensor = |shape: &mut [i64]| sys::DLTensor {
            data: std::ptr::null_mut(),
            device: crate::Device::cpu().to_dlpack(),
            ndim: shape.len() as i32,
            dtype: crate::DType::F32.to_dlpack(),
            shape: shape.as_mut_ptr(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        };
        let (mut x, mut w, mut scalar) = ([1i64, 6, 56, 56, 16], [96i64, 1, 3, 3], []);
        let tensors = [tensor(&mut x), tensor(&mut w), tensor(&mut scalar)];
        let pointer = |tensor: &sys::DLTensor| {
            let mut any = object::argument::none();
            any.type_index = sys::TVMFFITypeIndex_kTVMFFIDLTensorPtr;
            any.__bindgen_anon_2.v_ptr = std::ptr::from_ref(tensor).cast_mut().cast();
            any
        };
        let args = [
            pointer(&tensors[0]),
            object::argument::int(2),
            pointer(&tensors[1]),
            pointer(&tensors[2]),
        ];
        assert_eq!(shapes_label(&args), "[1, 6, 56, 56, 16] [96, 1, 3, 3] []");
        assert_eq!(shapes_label(&[object::argument::int(2)]), "-");
    }

    #[test]
    fn a_call_that_failed_midway_leaves_no_frame_behind() {
        let profiler = Profiler::new("m", Mode::Calls);
        profiler.time_call("main", || {
            push();
            push();
        });
        assert_eq!(STACK.with_borrow(Vec::len), 0);
        assert_eq!(profiler.report().calls, 1);
    }

    #[test]
    fn the_table_has_a_line_per_row_with_its_share() {
        let profile = Profile {
            model: "m".to_string(),
            calls: 2,
            total: Duration::from_millis(4),
            rows: vec![
                ProfileRow {
                    name: "relax_runtime.dense".to_string(),
                    kind: CallKind::Kernel,
                    calls: 4,
                    total: Duration::from_millis(3),
                },
                ProfileRow {
                    name: "main".to_string(),
                    kind: CallKind::Function,
                    calls: 2,
                    total: Duration::from_millis(1),
                },
            ],
            pool_launches: 6,
            pool_wakes: 1,
            pool_worker_tasks: 5,
        };
        let table = profile.to_string();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0],
            "relax-runtime profile of model `m`: 2 calls, 4.000 ms"
        );
        assert_eq!(
            lines[1],
            "thread pools: 6 parallel launches (3.0 a call), 1 of them woke a sleeping worker (0.50 a call), 5 tasks ran on workers"
        );
        assert!(lines[2].starts_with("name"), "{table}");
        assert!(
            lines[3].starts_with("relax_runtime.dense  kernel")
                && lines[3].ends_with("3.000      750.00   75.0%"),
            "{table}"
        );
        assert!(lines[4].ends_with("25.0%"), "{table}");
    }
}
