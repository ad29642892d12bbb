//! Splitting a kernel's work into parallel tasks: the [`Launch`] a kernel runs on (the
//! runtime's thread pool, or [`threads`] for tests and benchmarks), and the ways the
//! kernels share work between its tasks.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Runs `body(task, tasks)` for every task of some pool (`tasks` of them, at least 1)
/// and returns when all are done; with `inline` (work too small to share), runs
/// `body(0, 1)` on the calling thread instead. relax-runtime's launch is its thread pool,
/// the one that also runs the model's TVM-compiled parallel loops.
pub type Launch = fn(bool, &(dyn Fn(usize, usize) + Sync)) -> Result<(), String>;

/// A [`Launch`] that runs every body on the calling thread.
pub fn inline(_inline: bool, body: &(dyn Fn(usize, usize) + Sync)) -> Result<(), String> {
    body(0, 1);
    Ok(())
}

/// A [`Launch`] on `TASKS` scoped OS threads, started for each launch (for tests and
/// benchmarks; a runtime keeps a pool).
pub fn threads<const TASKS: usize>(
    inline: bool,
    body: &(dyn Fn(usize, usize) + Sync),
) -> Result<(), String> {
    if inline || TASKS <= 1 {
        body(0, 1);
        return Ok(());
    }
    let panicked = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..TASKS)
            .map(|task| scope.spawn(move || body(task, TASKS)))
            .collect();
        handles
            .into_iter()
            .map(|handle| handle.join())
            .any(|outcome| outcome.is_err())
    });
    if panicked {
        Err("a task of a kernel panicked".to_string())
    } else {
        Ok(())
    }
}

/// Tasks that [`for_each_unit`] balances; a launch of more tasks splits its units
/// statically instead.
const MAX_SHARING_TASKS: usize = 64;

/// A counter on a cache line of its own, so that the tasks' counters do not contend.
#[repr(align(64))]
#[derive(Default)]
struct Claims(AtomicUsize);

/// Runs `body(unit)` once for every unit of `0..units`, over the launch's tasks (on
/// this thread alone with `inline`). Each task starts on its own contiguous share (as
/// [`chunk`] splits them, so that neighbouring units, which share weights and inputs,
/// stay on one core) and, when that is done, takes the next units of the other tasks'
/// shares: a task slowed down by another process on a shared machine no longer holds up
/// the whole launch while the others wait at its end.
pub(crate) fn for_each_unit(
    launch: Launch,
    inline: bool,
    units: usize,
    body: &(dyn Fn(usize) + Sync),
) -> Result<(), String> {
    // Units of share `share` claimed so far (counted from the share's start).
    let claims: [Claims; MAX_SHARING_TASKS] = std::array::from_fn(|_| Claims::default());
    launch(inline, &|task, tasks| {
        if tasks > MAX_SHARING_TASKS {
            chunk(units, tasks, task, 1).for_each(body);
            return;
        }
        for share in (task..tasks).chain(0..task) {
            let range = chunk(units, tasks, share, 1);
            loop {
                // Relaxed: a claim only has to be unique; the launch's end orders the
                // units' writes before anything that reads them.
                let claimed = claims[share].0.fetch_add(1, Ordering::Relaxed);
                if claimed >= range.len() {
                    break;
                }
                body(range.start + claimed);
            }
        }
    })
}

/// How the units of a layer that computes `panels` groups of filters over `segments`
/// runs of output pixels are numbered, and so shared out ([`for_each_unit`] gives each
/// task a contiguous run of units first).
///
/// By pixels, a task computes every filter of its share of the plane: the layers of a
/// network then split their pixels alike, so a task reads mostly the pixels that it wrote
/// in the previous layer, from its own core's caches. By panels, it computes its share of
/// the filters over the whole plane, and half of each layer's input was written by the
/// other core. It matters when the cores do not share a level-3 cache: this project's 2
/// cores spend spells of seconds to minutes so (a 1 MiB buffer written by one core then
/// took 41 µs instead of 14 to read from the other, and 234 µs instead of 61 to write
/// again). In those spells, by pixels took 0.91x the time of by panels on MobileNetV2 and
/// EfficientNet-B0, 0.93-0.94x on ResNet-50; out of them, 0.98-1.0x
/// (`cargo run --release -p relax-bench --bin unit_order`). A layer's padded copy and
/// Winograd's transforms are shared out by rows likewise.
///
/// By pixels, every task reads every panel's weights, once per segment: a layer whose
/// weights outweigh its activations is numbered by panels instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnitOrder {
    /// Segment-major: unit `s * panels + p`.
    Pixels,
    /// Panel-major: unit `p * segments + s`.
    Panels,
}

/// Set by [`number_units_by_panels`]: every layer numbers its units by panels.
static BY_PANELS: AtomicBool = AtomicBool::new(false);

/// With `true`, every layer numbers its units by panels (and shares out its padded copy
/// and Winograd transforms by blocks), as the kernels did before [`UnitOrder`]; with
/// `false`, as [`UnitOrder::of`] says. For relax-bench's `unit_order`, which times both in
/// turn: a model's outputs are the same either way.
#[doc(hidden)]
pub fn number_units_by_panels(by_panels: bool) {
    BY_PANELS.store(by_panels, Ordering::Relaxed);
}

impl UnitOrder {
    /// By pixels unless the weights (values) outnumber the activations read and written.
    pub(crate) fn of(weights: usize, activations: usize) -> UnitOrder {
        if weights > activations {
            UnitOrder::Panels
        } else {
            UnitOrder::without_weights()
        }
    }

    /// The order of a step without weights (Winograd's transforms): by pixels, unless
    /// [`number_units_by_panels`] says otherwise.
    pub(crate) fn without_weights() -> UnitOrder {
        if BY_PANELS.load(Ordering::Relaxed) {
            UnitOrder::Panels
        } else {
            UnitOrder::Pixels
        }
    }

    /// `(panel, segment)` of unit `unit`.
    pub(crate) fn split(self, unit: usize, panels: usize, segments: usize) -> (usize, usize) {
        match self {
            UnitOrder::Pixels => (unit % panels, unit / panels),
            UnitOrder::Panels => (unit / segments, unit % segments),
        }
    }
}

/// Below this many multiply-adds a matrix product or convolution runs on the calling
/// thread alone (waking the pool costs more).
pub(crate) const INLINE_WORK: usize = 32 * 1024;

/// A pointer that parallel tasks share; each task writes a disjoint part of what it
/// points to, and only reads the rest.
#[derive(Clone, Copy)]
pub(crate) struct Shared(pub(crate) *mut f32);

// SAFETY: tasks write disjoint blocks through it (see every use) and read only data
// no task writes; the pointee outlives the parallel region (the kernel's arguments).
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    /// The pointer (a method, so closures capture the `Shared`, not the raw pointer).
    pub(crate) fn get(self) -> *mut f32 {
        self.0
    }

    pub(crate) fn at(self, offset: usize) -> *mut f32 {
        // SAFETY: callers pass offsets inside the checked tensor (the bounds are checked
        // when the views are validated against each other).
        unsafe { self.0.add(offset) }
    }
}

/// The `part`-th of `parts` contiguous ranges of `0..total` of near-equal sizes, each
/// starting at a multiple of `align` (but an empty one, which starts at `total`).
pub(crate) fn chunk(
    total: usize,
    parts: usize,
    part: usize,
    align: usize,
) -> std::ops::Range<usize> {
    let parts = parts.max(1);
    let align = align.max(1);
    let boundary = |index: usize| {
        if index >= parts {
            total
        } else {
            // Rounded to the nearest multiple of `align`.
            let exact = index * total / parts;
            ((exact + align / 2) / align * align).min(total)
        }
    };
    boundary(part)..boundary(part + 1).max(boundary(part))
}

/// Deterministic values in [-scale, scale), for the kernels' tests and benchmarks.
#[doc(hidden)]
pub fn test_values(count: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..count)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0) * scale
        })
        .collect()
}

/// [`threads`] on three threads.
#[cfg(test)]
pub(crate) fn three_threads(
    inline: bool,
    body: &(dyn Fn(usize, usize) + Sync),
) -> Result<(), String> {
    threads::<3>(inline, body)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    use super::{chunk, for_each_unit, threads, three_threads, UnitOrder, MAX_SHARING_TASKS};

    /// How many times `for_each_unit` ran each of `units` units on `launch`.
    fn runs(launch: super::Launch, inline: bool, units: usize) -> Vec<usize> {
        let counts: Vec<AtomicUsize> = (0..units).map(|_| AtomicUsize::new(0)).collect();
        for_each_unit(launch, inline, units, &|unit| {
            counts[unit].fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
        counts.into_iter().map(AtomicUsize::into_inner).collect()
    }

    #[test]
    fn every_unit_runs_once() {
        for units in [0, 1, 2, 3, 7, 100, 1000] {
            assert_eq!(
                runs(three_threads, false, units),
                vec![1; units],
                "{units} units"
            );
            assert_eq!(
                runs(three_threads, true, units),
                vec![1; units],
                "{units} inline"
            );
            // More tasks than `for_each_unit` balances: split statically.
            const { assert!(70 > MAX_SHARING_TASKS) };
            assert_eq!(
                runs(threads::<70>, false, units),
                vec![1; units],
                "{units}, 70 tasks"
            );
        }
    }

    #[test]
    fn a_slow_task_leaves_its_share_to_the_others() {
        // 30 units over 3 tasks: task 0's share is 0..10. It stalls on its first unit, so
        // the other two, done with theirs, take the rest of its share.
        let ran_on: Mutex<Vec<Option<std::thread::ThreadId>>> = Mutex::new(vec![None; 30]);
        for_each_unit(threads::<3>, false, 30, &|unit| {
            if unit == 0 {
                std::thread::sleep(Duration::from_millis(300));
            }
            ran_on.lock().unwrap()[unit] = Some(std::thread::current().id());
        })
        .unwrap();
        let ran_on = ran_on.into_inner().unwrap();
        assert!(ran_on.iter().all(Option::is_some));
        let stolen = ran_on[1..10]
            .iter()
            .filter(|thread| **thread != ran_on[0])
            .count();
        assert!(
            stolen > 0,
            "no other task took a unit of the stalled task's share"
        );
    }

    #[test]
    fn chunks_cover_the_range_once_with_aligned_starts() {
        for (total, parts, align) in [
            (100, 2, 16),
            (7, 4, 1),
            (1536, 2, 16),
            (3, 8, 16),
            (0, 2, 4),
            (49, 2, 4),
            (49, 3, 1),
        ] {
            let mut covered = 0;
            for part in 0..parts {
                let range = chunk(total, parts, part, align);
                assert_eq!(range.start, covered.min(total));
                assert!(range.start.is_multiple_of(align) || range.start == total);
                covered = range.end.max(covered);
            }
            assert_eq!(covered, total);
        }
    }

    #[test]
    fn chunks_are_balanced() {
        assert_eq!((chunk(49, 2, 0, 1), chunk(49, 2, 1, 1)), (0..24, 24..49));
        assert_eq!((chunk(49, 2, 0, 4), chunk(49, 2, 1, 4)), (0..24, 24..49));
        assert_eq!(
            (chunk(3136, 2, 0, 16), chunk(3136, 2, 1, 16)),
            (0..1568, 1568..3136)
        );
    }

    #[test]
    fn unit_orders_number_every_panel_and_segment_once() {
        for (panels, segments) in [(1, 1), (3, 5), (8, 1), (1, 7), (4, 44)] {
            for order in [UnitOrder::Pixels, UnitOrder::Panels] {
                let mut seen = vec![0; panels * segments];
                for unit in 0..panels * segments {
                    let (panel, segment) = order.split(unit, panels, segments);
                    assert!(
                        panel < panels && segment < segments,
                        "{order:?} unit {unit}"
                    );
                    seen[segment * panels + panel] += 1;
                }
                assert_eq!(
                    seen,
                    vec![1; panels * segments],
                    "{order:?} {panels}x{segments}"
                );
            }
        }
    }

    #[test]
    fn by_pixels_a_task_starts_on_every_panel_of_its_segments() {
        // Two tasks' first shares of 4 panels x 6 segments (see `for_each_unit`).
        let share = |order: UnitOrder, task: usize| -> Vec<(usize, usize)> {
            let mut units: Vec<_> = chunk(24, 2, task, 1)
                .map(|unit| order.split(unit, 4, 6))
                .collect();
            units.sort();
            units
        };
        let every = |panels: std::ops::Range<usize>, segments: std::ops::Range<usize>| {
            let mut units: Vec<_> = panels
                .flat_map(|panel| segments.clone().map(move |segment| (panel, segment)))
                .collect();
            units.sort();
            units
        };
        assert_eq!(share(UnitOrder::Pixels, 0), every(0..4, 0..3));
        assert_eq!(share(UnitOrder::Pixels, 1), every(0..4, 3..6));
        assert_eq!(share(UnitOrder::Panels, 0), every(0..2, 0..6));
        assert_eq!(share(UnitOrder::Panels, 1), every(2..4, 0..6));
    }

    #[test]
    fn layers_whose_weights_outweigh_their_activations_are_numbered_by_panels() {
        assert_eq!(UnitOrder::of(100, 300), UnitOrder::Pixels);
        assert_eq!(UnitOrder::of(300, 300), UnitOrder::Pixels);
        assert_eq!(UnitOrder::of(301, 300), UnitOrder::Panels);
        assert_eq!(UnitOrder::of(0, 1), UnitOrder::Pixels);
        assert_eq!(UnitOrder::without_weights(), UnitOrder::Pixels);
    }
}
