"""Small graphs reproducing what real exports do to shapes and failed to build (the
real-model corpus, relax-conformance/corpus.toml, has the models themselves), each
against onnxruntime with its dims left symbolic."""

import os
import sys
import tempfile
import unittest

import numpy as np
import onnx
import tvm
from onnx import TensorProto, helper, numpy_helper
from onnx_ops_cases import run_driver, run_onnxruntime

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from relax_driver import blocked_layout, onnx_source  # noqa: E402

RNG = np.random.default_rng(55)
X86 = {"kind": "llvm", "mtriple": "x86_64-unknown-linux-gnu"}


def symbolic_model(nodes, inputs, outputs, initializers, opset=17):
    """A model whose `inputs` are {name: (elem_type, dims)} (dims may be names)."""
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(name, elem, dims) for name, (elem, dims) in inputs.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in outputs],
        [numpy_helper.from_array(array, name) for name, array in initializers.items()],
    )
    made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    made.ir_version = 8
    return made


def imported(made, weights_mode="embed"):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        onnx.save(made, path)
        return onnx_source.load({"source": path, "inputs": [], "onnx_prepare": True, "weights_mode": weights_mode})


def assert_close(test, made, feeds, rtol=1e-4, atol=1e-5):
    got = run_driver(made, feeds)
    want = run_onnxruntime(made, feeds)
    for mine, theirs in zip(got, want):
        test.assertEqual(mine.shape, theirs.shape)
        np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=atol)


class RecognizerConcat(unittest.TestCase):
    """PP-OCRv4's recognizer (SVTR) concatenates a feature map whose height is
    `(height - 33) // 48 + 1` with a pooled one of height 1, then convolves: TVM could not
    prove the heights equal, gave the concatenation an unknown shape, and its layout
    conversion failed with `RuntimeError: Back optional access`."""

    def model(self):
        nodes = [
            helper.make_node("MaxPool", ["x"], ["tall"], kernel_shape=[33, 1], strides=[48, 1]),
            helper.make_node("ReduceMean", ["x"], ["flat"], axes=[2], keepdims=1),
            helper.make_node("Concat", ["tall", "flat"], ["both"], axis=1),
            helper.make_node("Conv", ["both", "w"], ["y"], kernel_shape=[1, 3], pads=[0, 1, 0, 1]),
        ]
        weight = RNG.standard_normal((16, 32, 1, 3)).astype(np.float32) * 0.2
        return symbolic_model(
            nodes, {"x": (TensorProto.FLOAT, ["batch", 16, "height", "width"])}, ["y"], {"w": weight}, opset=13
        )

    def test_the_concatenation_keeps_its_dims_and_converts_to_blocks(self):
        ir_module, weights, _ = imported(self.model(), "external")
        concat = [b for block in ir_module["main"].body.blocks for b in block.bindings
                  if getattr(getattr(b.value, "op", None), "name", None) == "relax.concat"]
        self.assertEqual(len(concat), 1)
        self.assertIsNotNone(concat[0].var.ty.shape, "the concatenation's dims are known")
        warnings = []
        names = [str(param.name) for param in ir_module["main"].params[1:]]
        _, converted, _ = blocked_layout.convert(ir_module, X86, warnings, (weights, names))
        self.assertEqual(warnings, [])
        self.assertTrue(converted)

    def test_it_matches_onnxruntime(self):
        x = RNG.standard_normal((2, 16, 48, 20)).astype(np.float32)
        assert_close(self, self.model(), {"x": x})


class NegativeDims(unittest.TestCase):
    """Paddle's exporter declares a free dim as -1 (PP-OCR's text-angle classifier:
    `x[-1, 3, ?, ?]`), which TVM's importer took as a size: its head, Reshape to
    `[-1, 8]`, MatMul, Add, Softmax at opset 11, failed with "The type is not
    populated"."""

    def test_a_classifier_head_over_a_dim_declared_negative_matches_onnxruntime(self):
        nodes = [
            helper.make_node("GlobalAveragePool", ["x"], ["pooled"]),
            helper.make_node("Reshape", ["pooled", "target"], ["flat"]),
            helper.make_node("MatMul", ["flat", "w"], ["logits"]),
            helper.make_node("Add", ["logits", "b"], ["biased"]),
            helper.make_node("Softmax", ["biased"], ["y"], axis=1),
        ]
        initializers = {
            "target": np.array([-1, 8], np.int64),
            "w": RNG.standard_normal((8, 2)).astype(np.float32),
            "b": RNG.standard_normal(2).astype(np.float32),
        }
        made = symbolic_model(nodes, {"x": (TensorProto.FLOAT, [-1, 8, None, None])}, ["y"], initializers, opset=11)
        for batch in (1, 3):
            with self.subTest(batch=batch):
                assert_close(self, made, {"x": RNG.standard_normal((batch, 8, 5, 7)).astype(np.float32)})

    def test_the_dim_becomes_symbolic_in_the_signature(self):
        made = symbolic_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (TensorProto.FLOAT, [-1, 4])}, ["y"], {})
        ir_module, _, _ = imported(made)
        dims = ir_module["main"].params[0].ty.shape.values
        self.assertNotIsInstance(dims[0], tvm.tirx.IntImm)
        self.assertEqual(int(dims[1]), 4)

    def test_dims_declared_as_question_marks_are_dims_of_their_own(self):
        # Paddle writes "?" for each free dim: an image's height and width, not one dim
        # (onnxruntime runs a 48x192 image).
        made = symbolic_model(
            [helper.make_node("Relu", ["x"], ["y"])], {"x": (TensorProto.FLOAT, [-1, 3, "?", "?"])}, ["y"], {}
        )
        ir_module, _, _ = imported(made)
        height, width = ir_module["main"].params[0].ty.shape.values[2:]
        self.assertFalse(height.same_as(width))
        self.assertNotEqual(str(height), str(width))
        assert_close(self, made, {"x": RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)})

class ShapesCastToInt32(unittest.TestCase):
    """jax2tf (magika's export) casts `Shape` to int32, slices it, concatenates int32
    constants and casts back to int64 for its `Reshape` and `Expand` targets: TVM made
    the shape a tensor, whose values nothing after it knew ("Reshape expects the input
    tensor to have known shape")."""

    def model(self):
        nodes = [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Cast", ["shape"], ["shape32"], to=TensorProto.INT32),
            helper.make_node("Slice", ["shape32", "zero", "one", "zero"], ["batch"]),
            helper.make_node("Concat", ["batch", "tail"], ["target32"], axis=0),
            helper.make_node("Cast", ["target32"], ["target"], to=TensorProto.INT64),
            helper.make_node("Reshape", ["x", "target"], ["reshaped"]),
            helper.make_node("Expand", ["reshaped", "target"], ["expanded"]),
            helper.make_node("Reshape", ["expanded", "flat"], ["y"]),
        ]
        initializers = {
            "zero": np.array([0], np.int32),
            "one": np.array([1], np.int32),
            "tail": np.array([4, 2], np.int32),
            "flat": np.array([-1, 8], np.int64),
        }
        return symbolic_model(nodes, {"x": (TensorProto.FLOAT, ["batch", 8])}, ["y"], initializers)

    def test_the_targets_stay_shapes_and_the_result_matches_onnxruntime(self):
        ir_module, weights, _ = imported(self.model(), "external")
        self.assertIsNone(weights or None, "integer initializers are constants, not weights")
        self.assertIsNotNone(ir_module["main"].ret_ty.shape, "the result's dims are known")
        for batch in (1, 3):
            with self.subTest(batch=batch):
                assert_close(self, self.model(), {"x": RNG.standard_normal((batch, 8)).astype(np.float32)})

class OuterConstantInABranch(unittest.TestCase):
    """Silero's VAD reads top-level `Constant`s inside its `If` branches: the preparation
    step folded the Constants into values no node of the main graph read, dropped them,
    and the import failed with `KeyError: '/Constant_output_0'`."""

    def test_a_branch_reading_an_outer_constant_matches_onnxruntime(self):
        then_branch = helper.make_graph(
            [helper.make_node("Mul", ["x", "scale"], ["then_y"])],
            "then",
            [],
            [helper.make_tensor_value_info("then_y", TensorProto.FLOAT, None)],
        )
        else_branch = helper.make_graph(
            [helper.make_node("Add", ["x", "scale"], ["else_y"])],
            "else",
            [],
            [helper.make_tensor_value_info("else_y", TensorProto.FLOAT, None)],
        )
        nodes = [
            helper.make_node("Constant", [], ["scale"], value=numpy_helper.from_array(np.array(3.0, np.float32))),
            helper.make_node("If", ["flag"], ["y"], then_branch=then_branch, else_branch=else_branch),
        ]
        made = symbolic_model(
            nodes, {"x": (TensorProto.FLOAT, ["n"]), "flag": (TensorProto.BOOL, [])}, ["y"], {}
        )
        _, _, warnings = imported(made)
        self.assertEqual(warnings, [], "the prepared graph imports (the step is not undone)")
        x = RNG.standard_normal(5).astype(np.float32)
        for flag in (True, False):
            with self.subTest(flag=flag):
                assert_close(self, made, {"x": x, "flag": np.array(flag)})

class WrongDeclaredOutputShape(unittest.TestCase):
    """ddddocr's recognizer declares its `[seqlen, 1, 8210]` output as `[1, seqlen]`;
    onnxslim trusted the declaration and rewrote the last Reshape's target (computed
    from `Shape`) to `[1, -1]`: a wrong result, not an error."""

    def test_the_computed_shape_wins_over_the_declared_one(self):
        nodes = [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "zero"], ["steps"], axis=0),
            helper.make_node("Gather", ["shape", "one"], ["batch"], axis=0),
            helper.make_node("Unsqueeze", ["steps", "axes"], ["steps1"]),
            helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
            helper.make_node("Reshape", ["x", "flat"], ["rows"]),
            helper.make_node("MatMul", ["rows", "w"], ["projected"]),
            helper.make_node("Concat", ["steps1", "batch1", "minus_one"], ["target"], axis=0),
            helper.make_node("Reshape", ["projected", "target"], ["y"]),
        ]
        initializers = {
            "zero": np.array(0, np.int64),
            "one": np.array(1, np.int64),
            "axes": np.array([0], np.int64),
            "flat": np.array([-1, 4], np.int64),
            "minus_one": np.array([-1], np.int64),
            "w": RNG.standard_normal((4, 6)).astype(np.float32),
        }
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seqlen", 1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, "seqlen"])],
            [numpy_helper.from_array(array, name) for name, array in initializers.items()],
        )
        made = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        made.ir_version = 8
        assert_close(self, made, {"x": RNG.standard_normal((5, 1, 4)).astype(np.float32)})

class SymbolicSqueezeInABranch(unittest.TestCase):
    """Silero's VAD (opset 15) branches on whether its encoder's time dim is 1 and
    squeezes it in one branch; TVM's importer converts both branches, and cannot squeeze
    a symbolic dim. The error names the node, the If it is in, and the manifest line
    that pins the dims (which folds the condition)."""

    def model(self):
        then_branch = helper.make_graph(
            [helper.make_node("Squeeze", ["x", "time_axis"], ["squeezed"], name="squeeze_time")],
            "then",
            [],
            [helper.make_tensor_value_info("squeezed", TensorProto.FLOAT, None)],
        )
        else_branch = helper.make_graph(
            [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[2], keepdims=0)],
            "else",
            [],
            [helper.make_tensor_value_info("mean", TensorProto.FLOAT, None)],
        )
        nodes = [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "two"], ["time"], axis=0),
            helper.make_node("Equal", ["time", "one"], ["single"]),
            helper.make_node("If", ["single"], ["y"], name="time_is_one", then_branch=then_branch, else_branch=else_branch),
        ]
        initializers = {
            "two": np.array(2, np.int64),
            "one": np.array(1, np.int64),
            "time_axis": np.array([2], np.int64),
        }
        return symbolic_model(nodes, {"x": (TensorProto.FLOAT, ["batch", 4, "time"])}, ["y"], initializers, opset=13)

    def test_the_error_names_the_node_the_if_and_the_manifest_line(self):
        from relax_driver.errors import DriverError

        with self.assertRaises(DriverError) as raised:
            imported(self.model())
        message = raised.exception.message
        self.assertIn("failed on node `squeeze_time`", message)
        self.assertIn("(Squeeze, inside If node `time_is_one`)", message)
        self.assertIn("symbolic extent", message)
        self.assertIn('inputs.main = { x = "float32[<batch>, 4, <time>]" }', raised.exception.detail or message)

    def test_pinned_it_folds_to_its_branch_and_matches_onnxruntime(self):
        made = self.model()
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "model.onnx")
            onnx.save(made, path)
            pins = [{"method": "main", "arguments": [{"name": "x", "dtype": "float32", "shape": [2, 4, 1]}]}]
            onnx_source.load({"source": path, "inputs": pins, "onnx_prepare": True, "weights_mode": "embed"})

if __name__ == "__main__":
    unittest.main()


class DetectorHeadShapes(unittest.TestCase):
    """YOLOv8's head (nudenet's export, 320x320 with dims left symbolic) reshapes its box
    logits (here `[batch, 2, 2, n]`) to `[batch, 4, -1]` (a target concatenated from a `Shape` at run time), takes
    the halves `[:, :2]` and `[:, 2:]`, subtracts and adds them to anchors `[1, 2, n]`,
    and multiplies by strides filled by a `ConstantOfShape` of `n * 1`. Three failures:
    the `ConstantOfShape` became a `broadcast_to` of a shape nothing knew (an
    AssertionError in TVM's legalization of it), the reshape's new dims lost the 4 (the
    sum of a half, `min(2, dim)` rows, and the anchors' 2 rows had no shape), and once
    built, the two halves read the same memory (the importer's dim-forgetting copy,
    which TVM's memory planning took for a new tensor)."""

    def model(self):
        nodes = [
            helper.make_node("Relu", ["x"], ["boxes"]),
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
            helper.make_node("Gather", ["shape", "three"], ["count"], axis=0),
            helper.make_node("Unsqueeze", ["batch", "axes"], ["batch1"]),
            helper.make_node("Concat", ["batch1", "four", "minus_one"], ["target"], axis=0),
            helper.make_node("Reshape", ["boxes", "target"], ["reshaped"]),
            helper.make_node("Slice", ["reshaped", "zero1", "two1", "one1"], ["left_top"]),
            helper.make_node("Slice", ["reshaped", "two1", "four", "one1"], ["right_bottom"]),
            helper.make_node("Cast", ["count"], ["count_float"], to=TensorProto.FLOAT),
            helper.make_node("Range", ["zero_float", "count_float", "one_float"], ["positions"]),
            helper.make_node("Unsqueeze", ["positions", "axes"], ["row"]),
            helper.make_node("Concat", ["row", "row"], ["grid"], axis=0),
            helper.make_node("Unsqueeze", ["grid", "axes"], ["anchors"]),
            helper.make_node("Mul", ["count", "one"], ["cells"]),
            helper.make_node("Unsqueeze", ["cells", "axes"], ["cells1"]),
            helper.make_node("Concat", ["cells1", "one1"], ["stride_shape"], axis=0),
            helper.make_node(
                "ConstantOfShape", ["stride_shape"], ["strides"],
                value=numpy_helper.from_array(np.array([8.0], np.float32)),
            ),
            helper.make_node("Transpose", ["strides"], ["stride_row"], perm=[1, 0]),
            helper.make_node("Sub", ["anchors", "left_top"], ["corner"]),
            helper.make_node("Add", ["anchors", "right_bottom"], ["far_corner"]),
            helper.make_node("Add", ["corner", "far_corner"], ["doubled"]),
            helper.make_node("Div", ["doubled", "two_float"], ["center"]),
            helper.make_node("Sub", ["far_corner", "corner"], ["size"]),
            helper.make_node("Concat", ["center", "size"], ["decoded"], axis=1),
            helper.make_node("Mul", ["decoded", "stride_row"], ["y"]),
        ]
        initializers = {
            "zero": np.array(0, np.int64),
            "three": np.array(3, np.int64),
            "one": np.array(1, np.int64),
            "axes": np.array([0], np.int64),
            "four": np.array([4], np.int64),
            "minus_one": np.array([-1], np.int64),
            "zero1": np.array([0], np.int64),
            "one1": np.array([1], np.int64),
            "two1": np.array([2], np.int64),
            "zero_float": np.array(0.0, np.float32),
            "one_float": np.array(1.0, np.float32),
            "two_float": np.array(2.0, np.float32),
        }
        return symbolic_model(nodes, {"x": (TensorProto.FLOAT, ["batch", 2, 2, "count"])}, ["y"], initializers)

    def test_the_reshape_keeps_its_constant_dims(self):
        ir_module, _, _ = imported(self.model())
        reshapes = [b for block in ir_module["main"].body.blocks for b in block.bindings
                    if getattr(getattr(b.value, "op", None), "name", None) == "relax.reshape"]
        boxes = [reshape for reshape in reshapes if reshape.var.ty.ndim == 3]
        rows = [reshape.var.ty.shape.values[1] for reshape in boxes]
        self.assertEqual([int(row) if isinstance(row, tvm.tirx.IntImm) else str(row) for row in rows], [4])

    def test_built_by_the_driver_it_matches_onnxruntime(self):
        from compiled_models import compiled
        from onnx_ops_cases import run_onnxruntime
        from tvm import relax

        made = self.model()
        ir_module, _, _ = imported(made)
        vm = relax.VirtualMachine(compiled(ir_module, tvm.target.Target(X86)), tvm.cpu())
        for batch, count in ((1, 6), (2, 5)):
            with self.subTest(batch=batch, count=count):
                x = RNG.standard_normal((batch, 2, 2, count)).astype(np.float32)
                got = vm["main"](tvm.runtime.tensor(x)).numpy()
                np.testing.assert_allclose(got, run_onnxruntime(made, {"x": x})[0], rtol=1e-5, atol=1e-5)


class ComputedPadsInABranch(unittest.TestCase):
    """Silero's VAD (opset 16) pads its input in each branch of its `If` on the sample
    rate, with pads computed from `Constant`s in the branch (ConstantOfShape, Concat,
    Reshape): the preparation step folded only the main graph, and TVM's importer,
    which takes pads only as a constant, failed with "Dynamic pads are not supported
    yet"."""

    def branch(self, name, right):
        constant = lambda output, array: helper.make_node(  # noqa: E731
            "Constant", [], [output], value=numpy_helper.from_array(array)
        )
        return helper.make_graph(
            [
                constant(f"{name}_count", np.array([2], np.int64)),
                helper.make_node("ConstantOfShape", [f"{name}_count"], [f"{name}_zeros"],
                                 value=numpy_helper.from_array(np.array([0], np.int64))),
                constant(f"{name}_right", np.array([0, right], np.int64)),
                helper.make_node("Concat", [f"{name}_zeros", f"{name}_right"], [f"{name}_pads"], axis=0),
                helper.make_node("Pad", ["x", f"{name}_pads"], [f"{name}_y"], mode="reflect"),
            ],
            name,
            [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, None)],
        )

    def test_both_branches_import_and_match_onnxruntime(self):
        nodes = [helper.make_node("If", ["flag"], ["y"], then_branch=self.branch("then", 3),
                                  else_branch=self.branch("else", 3))]
        made = symbolic_model(
            nodes, {"x": (TensorProto.FLOAT, ["batch", "samples"]), "flag": (TensorProto.BOOL, [])}, ["y"], {}
        )
        _, _, warnings = imported(made)
        self.assertEqual(warnings, [], "the prepared graph imports (the step is not undone)")
        x = RNG.standard_normal((2, 9)).astype(np.float32)
        for flag in (True, False):
            with self.subTest(flag=flag):
                assert_close(self, made, {"x": x, "flag": np.array(flag)})
