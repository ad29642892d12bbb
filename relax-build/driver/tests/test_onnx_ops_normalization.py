"""The driver's LayerNormalization, RMSNormalization and RotaryEmbedding converters
against onnxruntime (onnx_ops/normalization.py, onnx_ops/rotary.py)."""

import unittest

import numpy as np
from onnx import helper
from onnx_ops_cases import assert_matches, graph_model

RNG = np.random.default_rng(1)


def tensor(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


class LayerNormalization(unittest.TestCase):
    def test_every_axis_with_mean_and_inverse_std_dev(self):
        data = tensor(2, 3, 4)
        for axis in (0, 1, -1):
            with self.subTest(axis=axis):
                shape = data.shape[axis:]
                node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv_std"],
                                        axis=axis, epsilon=1e-3)
                made = graph_model(node, {"x": data}, ["y", "mean", "inv_std"],
                                   {"scale": tensor(*shape), "bias": tensor(*shape)}, opset=17)
                assert_matches(self, made, {"x": data})

    def test_no_bias_float16_in_float32(self):
        data = tensor(3, 8, dtype=np.float16)
        node = helper.make_node("LayerNormalization", ["x", "scale"], ["y"])
        made = graph_model(node, {"x": data}, {"y": np.float16}, {"scale": tensor(8, dtype=np.float16)}, opset=17)
        assert_matches(self, made, {"x": data}, rtol=2e-3, atol=2e-3)


class RMSNormalization(unittest.TestCase):
    def test_from_axis_zero_and_the_last(self):
        data = tensor(2, 3, 4)
        for axis in (0, -1):
            with self.subTest(axis=axis):
                node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis)
                made = graph_model(node, {"x": data}, ["y"], {"scale": tensor(*data.shape[axis:])})
                assert_matches(self, made, {"x": data})


class RotaryEmbedding(unittest.TestCase):
    def check(self, data, rotated, positions, **attributes):
        """`rotated`: the features of a head that rotate (their angles: half as many)."""
        caches = {"cos": tensor(16, rotated // 2), "sin": tensor(16, rotated // 2)}
        node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "positions"], ["y"], **attributes)
        feeds = {"x": data, "positions": positions}
        assert_matches(self, graph_model(node, feeds, ["y"], caches), feeds)

    def test_4d_halves(self):
        self.check(tensor(2, 3, 5, 8), 8, RNG.integers(0, 16, (2, 5)))

    def test_3d_interleaved_partial(self):
        self.check(tensor(2, 5, 24), 4, RNG.integers(0, 16, (2, 5)), num_heads=3, interleaved=1, rotary_embedding_dim=4)


if __name__ == "__main__":
    unittest.main()
