"""The driver's com.microsoft normalization converters against onnxruntime
(onnx_ops/contrib_normalization.py): optional beta and bias, the outputs onnxruntime's
CPU kernels compute (not mean and inv_std_var), float outputs within 1e-4 relative.
QEmbedLayerNormalization is tested on quantize_dynamic's BERT
(test_onnx_ops_contrib_models)."""

import unittest

import numpy as np
from onnx import helper
from onnx_ops_cases import assert_matches, graph_model

RNG = np.random.default_rng(11)
MICROSOFT = [("com.microsoft", 1)]


def tensor(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(test, op_type, names, feeds, outputs, constants, domain="com.microsoft", graph_outputs=None, **attributes):
    """The node's `outputs` ({name: dtype} or float names), of which `graph_outputs` (all
    by default) are the model's, against onnxruntime."""
    node = helper.make_node(op_type, names, list(outputs), domain=domain, **attributes)
    made = graph_model(node, feeds, graph_outputs or outputs, constants, opset=17, extra_opsets=MICROSOFT)
    assert_matches(test, made, feeds, rtol=1e-4, atol=1e-5)


class SkipLayerNormalization(unittest.TestCase):
    def test_every_output_with_and_without_beta_and_bias(self):
        feeds = {"x": tensor(2, 3, 8), "skip": tensor(2, 3, 8)}
        cases = {"beta and bias": ["x", "skip", "gamma", "beta", "bias"], "neither": ["x", "skip", "gamma"],
                 "bias only": ["x", "skip", "gamma", "", "bias"]}
        for name, names in cases.items():
            with self.subTest(name):
                constants = {"gamma": tensor(8), "beta": tensor(8), "bias": tensor(8)}
                constants = {key: value for key, value in constants.items() if key in names}
                check(self, "SkipLayerNormalization", names, feeds, ["y", "mean", "inv_std", "sum"], constants,
                      graph_outputs=["y", "sum"], epsilon=1e-5)

    def test_a_2d_skip(self):
        feeds = {"x": tensor(2, 3, 8), "skip": tensor(3, 8)}
        check(self, "SkipLayerNormalization", ["x", "skip", "gamma"], feeds, ["y"], {"gamma": tensor(8)})


class SimplifiedLayerNormalizations(unittest.TestCase):
    def test_skip_simplified_with_bias_and_its_sum(self):
        feeds = {"x": tensor(2, 3, 8), "skip": tensor(2, 3, 8)}
        check(self, "SkipSimplifiedLayerNormalization", ["x", "skip", "gamma", "bias"], feeds,
              ["y", "mean", "inv_std", "sum"], {"gamma": tensor(8), "bias": tensor(8)}, graph_outputs=["y", "sum"],
              epsilon=1e-5)

    def test_simplified_over_the_last_axes(self):
        for axis in (-1, 1):
            with self.subTest(axis=axis):
                scale = tensor(8) if axis == -1 else tensor(3, 8)
                check(self, "SimplifiedLayerNormalization", ["x", "scale"], {"x": tensor(2, 3, 8)}, ["y"],
                      {"scale": scale}, domain="", axis=axis, epsilon=1e-5)


class EmbedLayerNormalization(unittest.TestCase):
    def constants(self):
        return {"word": tensor(20, 8), "position": tensor(10, 8), "segment": tensor(2, 8), "gamma": tensor(8),
                "beta": tensor(8)}

    def feeds(self):
        mask = np.ones((2, 5), np.int32)
        mask[1, 3:] = 0
        return {"ids": RNG.integers(0, 20, (2, 5)).astype(np.int32),
                "segments": RNG.integers(0, 2, (2, 5)).astype(np.int32), "mask": mask}

    def test_with_mask_segments_and_the_embedding_sum(self):
        names = ["ids", "segments", "word", "position", "segment", "gamma", "beta", "mask"]
        check(self, "EmbedLayerNormalization", names, self.feeds(), {"y": np.float32, "mask_index": np.int32, "sum": np.float32}, self.constants(), epsilon=1e-5)

    def test_with_position_ids_without_segments(self):
        feeds = {**self.feeds(), "positions": np.array([[4, 3, 2, 1, 0]] * 2, np.int32)}
        del feeds["segments"]
        names = ["ids", "", "word", "position", "", "gamma", "beta", "mask", "positions"]
        # (onnxruntime's shape inference aborts the process when a node with a mask lacks mask_index.)
        check(self, "EmbedLayerNormalization", names, feeds, {"y": np.float32, "mask_index": np.int32},
              self.constants())


if __name__ == "__main__":
    unittest.main()
