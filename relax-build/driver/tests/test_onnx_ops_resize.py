"""The driver's Resize (onnx_ops/resize.py) against onnxruntime: the forms built with
weight matrices (a scale that is not the size ratio, antialiasing, axes,
keep_aspect_ratio_policy) and one TVM still computes; and the dims of a resize to
another tensor's symbolic dims."""

import unittest

import numpy as np
from onnx import TensorProto, helper
from onnx_ops_cases import assert_matches, graph_model
from test_real_export_shapes import imported, symbolic_model

RNG = np.random.default_rng(4)
DATA = RNG.standard_normal((1, 2, 5, 7)).astype(np.float32)
EMPTY = np.array([], np.float32)


def check(test, scales=None, sizes=None, **attributes):
    constants = {"roi": EMPTY, "scales": EMPTY if scales is None else np.array(scales, np.float32)}
    inputs = ["x", "roi", "scales"]
    if sizes is not None:
        constants["sizes"] = np.array(sizes, np.int64)
        inputs.append("sizes")
    node = helper.make_node("Resize", inputs, ["y"], **attributes)
    assert_matches(test, graph_model(node, {"x": DATA}, ["y"], constants, opset=19), {"x": DATA}, atol=1e-5)


class Resize(unittest.TestCase):
    def test_linear_downsample_by_a_scale_that_is_not_the_size_ratio(self):
        check(self, scales=[1, 1, 0.6, 0.7], mode="linear")

    def test_cubic_antialias(self):
        check(self, scales=[1, 1, 0.5, 0.5], mode="cubic", antialias=1)

    def test_nearest_with_axes_and_keep_aspect_ratio(self):
        check(self, sizes=[9, 9], axes=[2, 3], keep_aspect_ratio_policy="not_larger", mode="nearest")

    def test_align_corners_upsample_stays_with_tvm(self):
        check(self, sizes=[1, 2, 10, 14], mode="linear", coordinate_transformation_mode="align_corners")


class ResizeToAnotherTensorsDims(unittest.TestCase):
    """PyTorch's `interpolate(deep, size=shallow.shape[2:])` then `cat([.., shallow])`, as
    a YOLO-style neck exports it with its image dims dynamic: the sizes are a shape
    computed from `shallow`. TVM's converter refused them (`relax.astype requires a
    tensor`); the resize now has `shallow`'s dims, so the concatenation is typed."""

    def model(self):
        nodes = [
            helper.make_node("MaxPool", ["shallow"], ["deep"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Shape", ["shallow"], ["shape"]),
            helper.make_node("Slice", ["shape", "two", "four"], ["spatial"]),
            helper.make_node("Slice", ["shape", "zero", "two"], ["leading"]),
            helper.make_node("Concat", ["leading", "spatial"], ["sizes"], axis=0),
            helper.make_node("Resize", ["deep", "", "", "sizes"], ["upsampled"], mode="nearest"),
            helper.make_node("Concat", ["upsampled", "shallow"], ["y"], axis=1),
        ]
        constants = {name: np.array([value], np.int64) for name, value in (("zero", 0), ("two", 2), ("four", 4))}
        return symbolic_model(nodes, {"shallow": (TensorProto.FLOAT, ["batch", 3, "height", "width"])}, ["y"],
                              constants, opset=13)

    def test_the_resized_tensor_has_the_other_tensors_dims(self):
        ir_module, _, _ = imported(self.model())
        returned = str(ir_module["main"].ret_ty)
        self.assertIn("(batch, 6, height, width)", returned)


if __name__ == "__main__":
    unittest.main()
