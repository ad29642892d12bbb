"""Default CPU schedules for the TIR functions left after offloading, when a model has
no tuning records: without them TVM runs every loop nest on one thread, one element at
a time.

Rules, in order (the first that applies to a function wins): TVM's dlight CPU rules
(`Reduction` for softmax / layer norm / RMS norm, with corner cases fixed; `GEMV`), then `Injective` (this file)
for elementwise and layout functions, then `Fallback` (this file), which parallelizes
the outer spatial loops of any other loop nest.
"""

from tvm import s_tir, sym, tirx
from tvm.s_tir import dlight
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import get_extent, try_inline
from tvm.target import Target
from tvm.target.codegen import llvm_get_vector_width


def vector_lanes(target, dtype_bits=32):
    bits = llvm_get_vector_width(target)
    return max((bits if bits > 0 else 128) // dtype_bits, 1)


def split_vectorize(sch, loop, lanes):
    """Splits `loop` into (outer, lanes) and vectorizes the inner part; returns the outer."""
    extent = get_extent(sch, loop)
    if isinstance(extent, int) and extent <= lanes:
        if extent >= 2:
            sch.vectorize(loop)
        return None
    outer, inner = sch.split(loop, factors=[None, lanes])
    sch.vectorize(inner)
    return outer


class Reduction(dlight.cpu.Reduction):
    """dlight's CPU `Reduction` rule, for reductions along rows (softmax, layer norm, RMS
    norm), except:

    - functions whose reductions produce a single value (a softmax over a [1, n]
      tensor): there dlight nests the reductions inside the loop over the n outputs and
      computes them n times;
    - windowed reductions (pooling: a few values per output): dlight computes the padded
      window of every output in its own parallel iteration (150k iterations for a 3x3
      pool over 192x28x28), about 10 times slower than `Fallback`'s loops;
    - reductions across vectors (`across_vectors`: a squeeze-excitation's mean over the
      plane of a channel-blocked tensor): dlight runs each of the 16 channels of a block
      in its own parallel iteration, reading one value of each cache line.

    Those go to `Fallback`, which keeps the loop nests apart."""

    def apply(self, func, target: Target, tunable: bool):
        if not isinstance(func, tirx.PrimFunc):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        lanes = vector_lanes(target)
        if infos and any(
            info.is_reduction() and (single_output(info) or windowed(info) or across_vectors(sch, info, lanes))
            for info in infos
        ):
            return None
        return super().apply(func, target, tunable)


# A reduction over at most this many values per output (static extents) is a window.
WINDOW_VALUES = 64


def windowed(info):
    """Whether the block reduces a few values (at most WINDOW_VALUES, static) per output."""
    values = 1
    for iterator in info.iters:
        if iterator.kind == "R":
            extent = iterator.dom
            extent = extent.value if hasattr(extent, "value") else extent
            if not isinstance(extent, int):
                return False
            values *= extent
    return values <= WINDOW_VALUES


def across_vectors(sch, info, lanes):
    """Whether the block is spatial iterators then reductions (`S..SR..R`) whose innermost
    spatial iterator has a static extent that is a multiple of `lanes` and is the innermost
    index of everything it reads: it sums whole vectors, one per step of its reductions.
    A mean over the plane of a channel-blocked tensor, `[N, C/16, H, W, 16]` to `[N,
    C/16, 1, 1, 16]`; `Fallback` runs it in parallel over blocks, 16 channels a step.
    EfficientNet-B0's first squeeze-excitation pool (`[1, 2, 112, 112, 16]`), two threads:
    0.41-0.43 ms as dlight's `Reduction` scheduled it, 0.04 ms so."""
    kinds = info.dom_kind()
    spatial = leading_spatial(info)
    if spatial == 0 or spatial == len(kinds) or kinds != "S" * spatial + "R" * (len(kinds) - spatial):
        return False
    innermost = info.iters[spatial - 1]
    extent = innermost.dom.value if hasattr(innermost.dom, "value") else innermost.dom
    if not isinstance(extent, int) or extent % lanes != 0:
        return False
    reads = sch.get(info.block_rv).reads
    return bool(reads) and all(
        len(read.region) > 0 and read.region[-1].min.same_as(innermost.var) for read in reads
    )


# Below this many iterations (over all of a block's loops, its reductions' included) a
# block runs on the calling thread: a parallel launch costs more than it saves. silero-vad's
# call made 46 launches for tensors of 128 to 1,000 values (expand_dims, squeeze, relu).
MIN_PARALLEL_ITERATIONS = 8192


def single_output(info):
    """Whether every spatial iterator of the block has extent 1."""
    for iterator in info.iters:
        if iterator.kind == "S" and not (isinstance(iterator.dom, int) and iterator.dom == 1):
            extent = iterator.dom
            if not (hasattr(extent, "value") and extent.value == 1):
                return False
    return True


class Injective(dlight.cpu.base.CPUScheduleRule):
    """Functions of spatial blocks only (elementwise ops, broadcasts, transposes,
    reshapes, gathers). Producers are first inlined into their consumers, so that a
    chain of elementwise ops (a batch norm, then a ReLU) is one pass over the tensor,
    not one pass and one buffer per op.

    Then per block: when the innermost loop is a multiple of the vector width, it is
    split into vectorized chunks and the loops around it fused into one parallel loop,
    so that index arithmetic (divisions by symbolic dims, for a transpose or a
    broadcast) happens once per row, not per element. A symbolic innermost loop stays a
    plain loop inside the parallel rows, for LLVM to vectorize (a block of fewer than
    MIN_PARALLEL_ITERATIONS iterations runs sequentially). Otherwise the fewest
    innermost loops whose extents multiply to a multiple of the vector width (a 56x56
    plane: 3136 = 196 x 16) are fused and split into vectors, and everything around them
    runs in parallel: a vector loop with a leftover part would be guarded lane by lane,
    which LLVM compiles to scalar code."""

    def apply(self, func, target: Target, _tunable: bool):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos or any(not info.is_injective() for info in infos):
            return None
        if len(infos) > 1:
            infos = inline_whole_domain(sch, infos)
        lanes = vector_lanes(target)
        for info in infos:
            loops = sch.get_loops(info.block_rv)
            if not loops:
                continue
            parallel = enough_iterations(sch, loops, MIN_PARALLEL_ITERATIONS)
            innermost = get_extent(sch, loops[-1])
            if len(loops) > 1 and not isinstance(innermost, int):
                # A symbolic row (an image's width): split into vectors, the last one
                # guarded lane by lane, the whole row would compile to scalar code. A
                # plain row loop LLVM vectorizes itself, with a scalar remainder: a
                # hard-swish over 8x240x320 on 2 threads, 2.2 ms split, 0.21 ms plain.
                sch.parallel(sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0])
                continue
            if len(loops) > 1 and innermost % lanes == 0:
                rows = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
                if parallel:
                    sch.parallel(rows)
                split_vectorize(sch, loops[-1], lanes)
                continue
            count, width = exact_vector_suffix(sch, loops, lanes)
            inner = loops[-count:]
            fused = sch.fuse(*inner) if count > 1 else inner[0]
            vectors = split_vectorize(sch, fused, width)
            outer = loops[:-count] + ([vectors] if vectors is not None else [])
            if outer and parallel:
                sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        return sch


def exact_vector_suffix(sch, loops, lanes):
    """(count, width): the fewest innermost `loops` whose static extents multiply to a
    multiple of a vector width, the widest of `lanes`, lanes / 2, ..., 4 that some suffix
    divides; (all loops, lanes) when none does (the vector loop then has a guarded
    leftover part)."""
    width = lanes
    while width >= 4:
        total = 1
        for count, loop in enumerate(reversed(loops), start=1):
            extent = get_extent(sch, loop)
            if not isinstance(extent, int):
                break
            total *= extent
            if total % width == 0:
                return count, width
        width //= 2
    return len(loops), lanes


class Fallback(dlight.cpu.base.CPUScheduleRule):
    """Any other function: producers such as paddings inlined into their consumers (but
    an NCHW pool's padding is computed per row, see `compute_padding_per_row`), then each
    block's leading spatial loops run in parallel, all but the innermost one
    when the others give enough parallel iterations (so that the innermost stays a
    plain loop without index arithmetic); reductions stay sequential inside.

    When that innermost spatial loop is a multiple of the vector width, and nothing or
    a window's reduction follows it (a pool on channel-blocked tensors, `[N, C/16, H,
    W, 16]`: the 16 channels of a pixel), the reduction's loops go outside it and it is
    vectorized: the window is summed 16 channels at a time. A 3x3 average pool over
    256 channels of 28x28, one thread: 1.0-1.1 ms as scalar loops, 0.22-0.40 ms so."""

    def apply(self, func, target: Target, _tunable: bool):
        if not isinstance(func, tirx.PrimFunc) or not self.is_target_available(target):
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if not infos:
            return None
        changed = False
        lanes = vector_lanes(target)
        rows = padded_window_rows(sch, infos, lanes)
        if rows is not None:
            padding, window = infos
            compute_padding_per_row(sch, padding, rows)
            infos = [window]
            changed = True
        elif len(infos) > 1:
            infos = try_inline(sch, infos)
        for info in infos:
            leading = leading_spatial(info)
            loops = sch.get_loops(info.block_rv)
            if leading == 0 or len(loops) < leading:
                continue
            # A sum across vectors runs its vectors whole even with few parallel
            # iterations around them (2 blocks of 16 channels: 2 iterations).
            whole_vectors = across_vectors(sch, info, lanes)
            outer = (
                loops[: leading - 1]
                if leading > 1 and (whole_vectors or enough_iterations(sch, loops[: leading - 1]))
                else loops[:leading]
            )
            if enough_iterations(sch, loops, MIN_PARALLEL_ITERATIONS):
                sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
            changed = True
            if len(outer) == leading - 1:
                try:
                    vectorize_channels(sch, info, loops[leading - 1], loops[leading:], lanes, whole_vectors)
                except s_tir.ScheduleError:
                    # A loop TVM will not vectorize stays as it is (each step left a valid
                    # schedule).
                    pass
        return sch if changed else None


def leading_spatial(info):
    """How many of the block's iterators, from the outermost, are spatial."""
    kinds = info.dom_kind()
    return len(kinds) - len(kinds.lstrip("S"))


def padded_window_rows(sch, infos, lanes):
    """The loop over output rows when the function is a padding then a windowed
    reduction over it, whose innermost spatial loop is not a multiple of `lanes` (an NCHW
    pool; a channel-blocked one is vectorized over its 16 channels, see
    `vectorize_channels`), and whose loops down to the rows give enough parallel
    iterations (`Fallback` then fuses those, and the loop over a row's outputs stays out
    of them); else None."""
    if len(infos) != 2:
        return None
    padding, window = infos
    kinds = window.dom_kind()
    spatial = leading_spatial(window)
    if not (
        padding.dom_kind() == "S" * len(padding.iters)
        and spatial >= 2
        and kinds == "S" * spatial + "R" * (len(kinds) - spatial)
        and len(kinds) > spatial
        and windowed(window)
    ):
        return None
    loops = sch.get_loops(window.block_rv)
    innermost = get_extent(sch, loops[spatial - 1])
    if isinstance(innermost, int) and innermost % lanes == 0:
        return None
    if not enough_iterations(sch, loops[: spatial - 1]):
        return None
    return loops[spatial - 2]


def compute_padding_per_row(sch, padding, rows):
    """The padding computed inside the window's loop over output rows, `rows`: the rows
    of padded input that a row of outputs reads.

    Inlined, the padding is a bounds check on every value a window reads; at the root,
    a pass over the whole padded tensor. Per row, its values are in level-1 cache when
    the window reads them. ResNet-50's 3x3 max pool after its stem (64 planes of 112x112
    to 56x56, NCHW), two threads, a slow spell: inlined 1.04-1.09 ms, at the root 1.44;
    inlined against per row in turn, 8 rounds: medians 1.17 and 0.80 ms (meta-schedule's
    record of 32 trials, in the same rounds: 0.87)."""
    sch.compute_at(padding.block_rv, rows)


def vectorize_channels(sch, info, channels, reductions, lanes, whole_vectors=False):
    """Vectorizes the block's innermost spatial loop `channels` when its extent is a
    multiple of `lanes` and `reductions` (the loops after it) are those of a window, or
    of any sum across vectors (`whole_vectors`, see `across_vectors`), moved outside it
    first (see `Fallback`)."""
    extent = get_extent(sch, channels)
    if not isinstance(extent, int) or extent % lanes != 0:
        return
    if reductions:
        if info.dom_kind() != "S" * (len(info.iters) - len(reductions)) + "R" * len(reductions) or not (
            windowed(info) or whole_vectors
        ):
            return
        # TVM does not vectorize a loop over a reduction's update; innermost and of
        # static extent, with contiguous reads, LLVM does.
        sch.reorder(*reductions, channels)
        initial = sch.decompose_reduction(info.block_rv, reductions[0])
        split_vectorize(sch, sch.get_loops(initial)[-1], lanes)
        return
    split_vectorize(sch, channels, lanes)


# Parallel iterations that keep two threads busy without the innermost loop.
ENOUGH_ITERATIONS = 16


def points_of(sch, block_rv):
    """The points of a block's iteration domain (a product of symbolic extents)."""
    total = 1
    for iteration in sch.get(block_rv).iter_vars:
        total = total * iteration.dom.extent
    return total


def inline_whole_domain(sch, infos):
    """dlight's `try_inline` (each block inlined into its consumers, or a consumer into
    its producer, while any can be; the blocks left), but only between blocks over as
    many points: a smaller producer (a per-channel vector computed from a run-time scale,
    then broadcast over an image) is computed once into its buffer, its own chain
    inlined into it, rather than again at every point of its consumer. Inlined into an
    image of symbolic width, each of the 21 bias chains of ddddocr's quantized model (a
    Floor, a Where, a FloorMod over 192 channels) took TVM's simplifier 6 s to minutes."""
    analyzer = sym.Analyzer()

    def same_points(block_rv, others):
        points = points_of(sch, block_rv)
        return bool(others) and all(analyzer.can_prove_equal(points_of(sch, other), points) for other in others)

    def inlined(info):
        if same_points(info.block_rv, sch.get_consumers(info.block_rv)):
            try:
                sch.compute_inline(info.block_rv)
                return True
            except Exception:  # noqa: BLE001 - TVM's ScheduleError: not inlinable
                pass
        producers = sch.get_producers(info.block_rv)
        # A consumer goes into its producers only where it is their one consumer: TVM's
        # reverse_compute_inline would drop a producer's buffer that another block still
        # reads (ONNX's rotary embedding: a split's second, empty half of a transpose).
        alone = all(len(sch.get_consumers(producer)) == 1 for producer in producers)
        if alone and same_points(info.block_rv, producers):
            try:
                sch.reverse_compute_inline(info.block_rv)
                return True
            except Exception:  # noqa: BLE001 - as above
                pass
        return False

    remaining = list(infos)
    while True:
        index = next((index for index, info in enumerate(remaining) if inlined(info)), None)
        if index is None:
            return remaining
        remaining.pop(index)


def enough_iterations(sch, loops, count=ENOUGH_ITERATIONS):
    """Whether `loops` together run at least `count` times (symbolic: yes)."""
    total = 1
    for loop in loops:
        extent = get_extent(sch, loop)
        if not isinstance(extent, int):
            return True
        total *= extent
    return total >= count


def default_schedule_pass(target):
    """dlight's ApplyDefaultSchedule with the rules above, for `target`."""
    return dlight.ApplyDefaultSchedule(
        Reduction(),
        dlight.cpu.GEMV(),
        Injective(),
        Fallback(),
    )
