"""The ONNX preparation step, run on a graph whose inputs carry the manifest's dims.

1. onnxslim: shape inference (a `Shape` of a tensor whose dims are all pinned becomes a
   constant) and graph simplifications (batch norms folded into convolutions, ...).
   Before it, nodes computed from constants alone are folded (as in 2), so that
   onnxslim sees weights written as `Constant` or `ConstantOfShape` nodes as initializers.
2. Constant folding (here, with onnx's reference evaluator: onnxslim folds only with
   onnxruntime installed): every node whose inputs are all constants becomes a constant,
   so that shape subgraphs the pinned dims determine (`Shape -> Gather -> Concat ->
   Reshape`, as recent exporters write them) end as constant reshape targets, which TVM's
   importer needs. Dims left symbolic stay symbolic.
3. An `If` whose condition is now a constant becomes the nodes of the branch it takes.
4. Rewrites of operators TVM imports poorly: a `Sum` of tensors becomes a chain of
   `Add`s (TVM imports `Sum` as broadcast + stack + a reduction, which no elementwise
   operator after it can fuse with, and which costs ResNet-50 a tenth of its time).

Before importing, `check_supported` lists every operator TVM's importer has no
converter for, so that one build names them all.
"""

import contextlib
import copy
import io

from .errors import DriverError

# Nodes named per operator in an error; the count says how many there are.
NAMED_NODES = 3


def slim(model, warnings):
    """The model after onnxslim's shape inference and simplifications; the model as it
    was when onnxslim fails on it (it does on some graphs of old opsets), with a warning
    in `warnings`: onnxslim is an optimization, and the graph may import without it."""
    import onnxslim

    try:
        with contextlib.redirect_stdout(io.StringIO()):
            prepared = onnxslim.slim(without_declared_shapes(model))
        if prepared is None:
            raise ValueError("it returned no model")
    except Exception as error:
        warnings.append(
            f"the ONNX preparation step skipped onnxslim {onnxslim.__version__}, which failed on this graph "
            f"({type(error).__name__}: {str(error)[:200]}); constant folding still ran"
        )
        return model
    keep_inputs(model, prepared)
    return prepared


def without_declared_shapes(model):
    """A copy of `model` whose outputs and intermediate values declare no shapes (their
    types stay): onnxslim takes a declared shape as the truth and rewrites the graph to
    fit it, but exporters declare wrong ones, which onnxruntime ignores (ddddocr's
    recognizer declares `[1, seqlen]` for its `[seqlen, 1, 8210]` output, and onnxslim
    turned the last Reshape's target into `[1, -1]`). Shapes are inferred again."""
    copied = copy.deepcopy(model)
    for output in copied.graph.output:
        if output.type.HasField("tensor_type"):
            output.type.tensor_type.ClearField("shape")
    del copied.graph.value_info[:]
    return copied


def keep_inputs(original, prepared):
    """Gives `prepared` the graph inputs of `original`, in their order: onnxslim drops
    inputs no node reads, which would silently change the model's signature."""
    # (Old exporters list initializers among the inputs too; those are not inputs.)
    initializers = {init.name for init in original.graph.initializer}
    wanted = [value for value in original.graph.input if value.name not in initializers]
    if [value.name for value in prepared.graph.input] == [value.name for value in wanted]:
        return
    del prepared.graph.input[:]
    prepared.graph.input.extend(wanted)


# Operators never folded: random ones, and those with subgraphs.
UNFOLDABLE = {"RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}
# A folded value may be at most this many elements larger than its inputs together
# (so that a ConstantOfShape or Expand does not grow the model), unless it is a layer's
# weights (see `weight_values`) or a `Constant` node's (already in the file).
FOLD_GROWTH_LIMIT = 1 << 16

# The operands that hold a layer's weights and biases, by operator. A value computed
# from constants alone that reaches one of them (ConstantOfShape, a Constant node, a
# Transpose of one...) is folded into an initializer whatever its size: TVM then takes
# it as a parameter, which relax-runtime packs for its kernels at load (filter panels,
# Winograd transforms), as it does an initializer; as a graph constant it would not be.
WEIGHT_OPERANDS = {
    "Conv": (1, 2),
    "ConvTranspose": (1, 2),
    "ConvInteger": (1,),
    "Gemm": (1, 2),
    "MatMul": (1,),
    "MatMulInteger": (1,),
    "QLinearConv": (3, 8),
    "QLinearMatMul": (3,),
    "BatchNormalization": (1, 2, 3, 4),
    "InstanceNormalization": (1, 2),
    "LayerNormalization": (1, 2),
    "LSTM": (1, 2, 3),
    "GRU": (1, 2, 3),
    "RNN": (1, 2, 3),
}


def weight_values(graph):
    """The names of the values a layer's weight operand is computed from (itself
    included), through any chain of nodes."""
    bound = set()
    for node in graph.node:
        for index in WEIGHT_OPERANDS.get(node.op_type, ()) if node.domain in ("", "ai.onnx") else ():
            if index < len(node.input) and node.input[index]:
                bound.add(node.input[index])
    for node in reversed(graph.node):
        if any(name in bound for name in node.output):
            bound.update(name for name in node.input if name)
    return bound


def fold_constants(model):
    """Replaces, in place, the main graph's nodes whose inputs are all constants by
    initializers holding their outputs. Returns how many nodes were folded."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    known = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    graph_inputs = {value.name for value in graph.input}
    weights = weight_values(graph)
    opsets = list(model.opset_import)
    # Shape inference (for `Size`s and the Ifs' branches) only for graphs that have them.
    needs_shapes = any(node.op_type == "Size" or subgraphs_of(node) for node in graph.node)
    shapes = static_shapes(model) if needs_shapes else {}
    kept, folded_outputs = [], []
    for node in graph.node:
        unlimited = node.op_type == "Constant" or any(name in weights for name in node.output)
        outputs = (
            evaluate(node, known, opsets, helper, ReferenceEvaluator, unlimited)
            if foldable(node, known, graph_inputs)
            else None
        )
        if outputs is None and node.op_type == "Size":
            outputs = shape_value(node, shapes)
        if outputs is None:
            kept.append(node)
            continue
        for name, value in outputs.items():
            known[name] = value
            folded_outputs.append(name)
    folded_inside = sum(fold_branches(node, known, opsets, shapes) for node in kept)
    if len(kept) == len(graph.node):
        return folded_inside
    used = {name for node in kept for name in (*node.input, *subgraph_reads(node))}
    used |= {value.name for value in graph.output}
    existing = {init.name for init in graph.initializer}
    for name in folded_outputs:
        if name in used and name not in existing:
            graph.initializer.append(numpy_helper.from_array(known[name], name))
    folded = len(graph.node) - len(kept)
    del graph.node[:]
    graph.node.extend(kept)
    return folded + folded_inside


def foldable(node, known, excluded=()):
    """Whether `node` can be evaluated now: an ONNX operator the reference evaluator
    folds, without graphs of its own, whose inputs are all `known` values and none of
    them `excluded` (a main graph's inputs: an initializer that is also an input is a
    default the caller may replace)."""
    return (
        node.domain in ("", "ai.onnx")
        and node.op_type not in UNFOLDABLE
        and not any(attribute.type in (attribute.GRAPH, attribute.GRAPHS) for attribute in node.attribute)
        and all(name in known and name not in excluded for name in node.input if name)
    )


def subgraphs_of(node):
    """The graphs of `node`'s attributes (an `If`'s branches, a `Loop`'s body)."""
    graphs = []
    for attribute in node.attribute:
        graphs.extend([attribute.g] if attribute.HasField("g") else list(attribute.graphs))
    return graphs


def static_shapes(model):
    """{value name: dims} for the values of the model, its subgraphs' included, whose
    dims ONNX's shape inference finds all known (it infers inside branches, where
    onnxslim does not)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a graph the inference refuses: no shapes, nothing folded by them
        return {}
    shapes = {}

    def collect(graph):
        for value in (*graph.input, *graph.value_info, *graph.output):
            tensor = value.type.tensor_type
            if tensor.HasField("shape") and all(dim.HasField("dim_value") for dim in tensor.shape.dim):
                shapes[value.name] = [dim.dim_value for dim in tensor.shape.dim]
        for node in graph.node:
            for subgraph in subgraphs_of(node):
                collect(subgraph)

    collect(inferred.graph)
    return shapes


def shape_value(node, shapes):
    """The output of a `Shape` or `Size` node whose input has static dims (`shapes`),
    else None. (`Size` of a `Shape` is the rank, known when the dims are not: TVM's
    importer refuses a `Size` of a shape, silero-vad's test of its LSTM input's rank.)"""
    import numpy as np

    if node.op_type not in ("Shape", "Size") or node.domain not in ("", "ai.onnx") or node.input[0] not in shapes:
        return None
    dims = shapes[node.input[0]]
    if node.op_type == "Size":
        return {node.output[0]: np.array(int(np.prod(dims, dtype=np.int64)), np.int64)}
    bounds = {attribute.name: attribute.i for attribute in node.attribute}
    start, end = bounds.get("start", 0), bounds.get("end", len(dims))
    return {node.output[0]: np.array(dims[start:end], np.int64)}


def fold_branches(node, outer, opsets, shapes=None):
    """Folds, in place, the nodes of `node`'s graphs (an `If`'s branches, a `Loop`'s
    body) whose inputs are constants of the graph itself or of the graphs around it
    (`outer`, by name), and their `Shape`s of tensors whose dims shape inference knows
    (`shapes`), into initializers of that graph; returns how many. Silero's VAD computes
    its `Pad`'s pads from `Constant`s inside an `If` branch, which TVM's importer takes
    only as a constant ("Dynamic pads are not supported yet"), and the conditions of the
    `If`s nested in its branches from the shapes there."""
    from onnx import helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    shapes = shapes or {}
    count = 0
    for graph in subgraphs_of(node):
        inputs = {value.name for value in graph.input}
        known = {name: value for name, value in outer.items() if name not in inputs}
        known.update({init.name: numpy_helper.to_array(init) for init in graph.initializer})
        kept, folded = [], []
        for inner in graph.node:
            outputs = evaluate(inner, known, opsets, helper, ReferenceEvaluator, True) if foldable(inner, known) else None
            if outputs is None and node.op_type == "If":
                # (A Loop body's shapes may change from one iteration to the next.)
                outputs = shape_value(inner, shapes)
            if outputs is None:
                kept.append(inner)
                continue
            known.update(outputs)
            folded.extend(outputs)
        count += sum(fold_branches(inner, known, opsets, shapes) for inner in kept)
        if len(kept) == len(graph.node):
            continue
        used = {name for inner in kept for name in (*inner.input, *subgraph_reads(inner))}
        used |= {value.name for value in graph.output}
        for name in folded:
            if name in used:
                graph.initializer.append(numpy_helper.from_array(known[name], name))
        count += len(graph.node) - len(kept)
        del graph.node[:]
        graph.node.extend(kept)
    return count


def subgraph_reads(node):
    """The names the graphs of `node`'s attributes (an `If`'s branches, a `Loop`'s body)
    read from the graph around them: a value folded there must stay, as an initializer
    (a branch reading an outer `Constant` failed with a KeyError once the Constant was
    folded away)."""
    read = set()
    for graph in subgraphs_of(node):
        defined = {value.name for value in graph.input} | {init.name for init in graph.initializer}
        for inner in graph.node:
            read.update(name for name in (*inner.input, *subgraph_reads(inner)) if name and name not in defined)
            defined.update(inner.output)
    return read


def evaluate(node, known, opsets, helper, evaluator_class, unlimited=False):
    """The outputs of `node` on the known values, or None when it cannot be evaluated or
    its outputs would grow the model too much (never too much when `unlimited`)."""
    inputs = [name for name in node.input if name]
    try:
        evaluator = evaluator_class(
            helper.make_model(
                helper.make_graph(
                    [node],
                    "fold",
                    [helper.make_tensor_value_info(name, 0, None) for name in inputs],
                    [helper.make_tensor_value_info(name, 0, None) for name in node.output if name],
                ),
                opset_imports=opsets,
            )
        )
        values = evaluator.run(None, {name: known[name] for name in inputs})
    except Exception:  # an operator the reference evaluator lacks: leave it to TVM
        return None
    import numpy as np

    names = [name for name in node.output if name]
    budget = sum(known[name].size for name in inputs) + FOLD_GROWTH_LIMIT
    # Only tensors become initializers (not sequences or optionals).
    if len(values) != len(names) or not all(isinstance(value, np.ndarray) for value in values):
        return None
    if not unlimited and sum(value.size for value in values) > budget:
        return None
    return dict(zip(names, values))


def default_opset(model):
    """The version of the default ("" / ai.onnx) operator set the model imports."""
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return 0


def sums_to_adds(model):
    """Rewrites every `Sum` of the main graph into a chain of binary `Add`s, in place.

    `Add` and `Sum` broadcast alike from opset 8 on; older graphs are left alone.
    Returns how many `Sum` nodes were rewritten.
    """
    from onnx import helper

    if default_opset(model) < 8:
        return 0
    rewritten = 0
    nodes = []
    for node in model.graph.node:
        if node.op_type != "Sum" or node.domain not in ("", "ai.onnx") or len(node.input) < 2:
            nodes.append(node)
            continue
        rewritten += 1
        base = node.name or node.output[0]
        running = node.input[0]
        for index, addend in enumerate(node.input[1:], start=1):
            last = index == len(node.input) - 1
            output = node.output[0] if last else f"{base}/relax_sum_{index}"
            nodes.append(helper.make_node("Add", [running, addend], [output], name=f"{base}/add_{index}"))
            running = output
    if rewritten:
        del model.graph.node[:]
        model.graph.node.extend(nodes)
    return rewritten


def inline_constant_ifs(model):
    """Replaces, in place, every `If` whose condition is an initializer (of its graph or
    of a graph around it) by the nodes of the branch it takes (and Identity nodes from
    the branch's outputs to the If's): one branch, no control flow left to import. Ifs
    nested in the branches of another (whose condition is known only at run time:
    silero-vad's sample rate) are inlined in those branches. Returns how many were
    inlined."""
    return inlined_in(model.graph, {})


def inlined_in(graph, outer):
    from onnx import helper, numpy_helper

    known = dict(outer)
    known.update({init.name: init for init in graph.initializer})
    nodes, inlined = [], 0
    for node in graph.node:
        if node.op_type != "If" or node.domain not in ("", "ai.onnx") or node.input[0] not in known:
            for subgraph in subgraphs_of(node):
                inlined += inlined_in(subgraph, known)
            nodes.append(node)
            continue
        taken = "then_branch" if numpy_helper.to_array(known[node.input[0]]).all() else "else_branch"
        branch = next(attribute.g for attribute in node.attribute if attribute.name == taken)
        graph.initializer.extend(branch.initializer)
        nodes.extend(branch.node)
        for branch_output, output in zip(branch.output, node.output):
            nodes.append(helper.make_node("Identity", [branch_output.name], [output], name=f"{node.name or output}/{taken}"))
        inlined += 1
    if nodes != list(graph.node):
        del graph.node[:]
        graph.node.extend(nodes)
    return inlined


def prepare(model):
    """The steps; returns the prepared model and warnings for the build's output."""
    warnings = []
    # Constants computed from constants (weights among them) become initializers first,
    # so that onnxslim's fusions (a MatMul and an Add into a Gemm, ...) see them as an
    # exporter writes them.
    fold_constants(model)
    prepared = slim(model, warnings)
    fold_constants(prepared)
    # An inlined branch may make its nodes' shapes known (a squeeze taken or not), and
    # their shapes the conditions of the Ifs nested in it: shape inference and folding
    # again, while Ifs are inlined (silero-vad nests three levels).
    for _ in range(MAX_INLINING_ROUNDS):
        if not inline_constant_ifs(prepared):
            break
        fold_constants(prepared)
        prepared = slim(prepared, warnings)
        fold_constants(prepared)
    sums_to_adds(prepared)
    return prepared, warnings


# Rounds of inlining Ifs, shape inference and folding (each round inlines every If whose
# condition is known, at every depth reached so far).
MAX_INLINING_ROUNDS = 8


# Operator domains only onnxruntime implements (its contrib operators, which its graph
# optimizations and quantizer write: FusedConv, QLinearAdd, DynamicQuantizeLSTM, ...).
ONNXRUNTIME_DOMAINS = {"com.microsoft", "com.microsoft.nchwc", "com.ms.internal.nhwc"}
# The com.microsoft operators that are converted in onnxruntime's form (by onnx_ops'
# contrib_* modules, or TVM's converter where it is right): another contrib operator
# named like an ONNX one (e.g. com.microsoft's Pad or Range) is refused, not converted
# as the ONNX operator.
ONNXRUNTIME_CONVERTED = {
    "Attention", "MultiHeadAttention", "GroupQueryAttention", "QAttention", "RotaryEmbedding",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization",
    "QEmbedLayerNormalization", "Gelu", "BiasGelu", "FastGelu", "QuickGelu", "BiasAdd", "BiasSplitGelu",
    "FusedConv", "FusedMatMul", "NhwcConv", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
    "DynamicQuantizeLSTM", "QGemm", "QLinearAdd", "QLinearMul", "QLinearSigmoid", "QLinearLeakyRelu",
    "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat", "QLinearSoftmax", "QLinearWhere",
    "QuantizeLinear", "DequantizeLinear",
}
ONNXRUNTIME_FIX = (
    "export or quantize without onnxruntime's optimizations (e.g. quantize_static with QuantFormat.QDQ, "
    "or an ONNX export without graph optimization)"
)


def unsupported_operators(model, supported):
    """The main graph's operators without a converter in `supported`, in order of first
    appearance: [{op_type, count, nodes, reason}]."""
    found = {}
    for index, node in enumerate(model.graph.node):
        contrib = node.domain in ONNXRUNTIME_DOMAINS
        if node.op_type in supported and (not contrib or node.op_type in ONNXRUNTIME_CONVERTED):
            continue
        reason = "onnxruntime-only contrib operator" if contrib else "unsupported"
        entry = found.setdefault(node.op_type, {"op_type": node.op_type, "count": 0, "nodes": [], "reason": reason})
        entry["count"] += 1
        if len(entry["nodes"]) < NAMED_NODES:
            entry["nodes"].append(node.name or f"#{index}")
    return list(found.values())


def describe(operator):
    nodes = ", ".join(operator["nodes"])
    more = ", ..." if operator["count"] > len(operator["nodes"]) else ""
    contrib = ", an onnxruntime-only contrib operator" if operator["reason"] != "unsupported" else ""
    return f"{operator['op_type']} x{operator['count']} (node(s) {nodes}{more}{contrib})"


def check_supported(model, source_path):
    """Raises one error naming every operator of `model` TVM's importer cannot convert."""
    import tvm

    from . import onnx_ops

    operators = unsupported_operators(model, onnx_ops.convert_map())
    if not operators:
        return
    contrib = [operator["op_type"] for operator in operators if operator["reason"] != "unsupported"]
    fix = (
        "Fix: export the model without them (another opset_version or exporter option, e.g. "
        "torch.onnx.export(..., opset_version=17), or disable fused custom ops), or write the model "
        "as a Relax nn.Module source."
    )
    if contrib:
        fix = (
            f"Fix: {', '.join(contrib)} exist only in onnxruntime (its contrib operators, written by its graph "
            f"optimizations or quantizer): {ONNXRUNTIME_FIX}. " + fix
        )
    raise DriverError(
        "onnx_unsupported",
        f"TVM {tvm.__version__}'s ONNX importer has no converter for {len(operators)} operator type(s) "
        f"of {source_path}: " + "; ".join(describe(operator) for operator in operators),
        fix,
        subject=", ".join(operator["op_type"] for operator in operators),
        operators=operators,
    )
