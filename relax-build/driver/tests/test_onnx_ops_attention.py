"""The driver's standard Attention converter against onnxruntime (onnx_ops/attention.py)."""

import unittest

import numpy as np
from onnx import helper
from onnx_ops_cases import assert_matches, graph_model

RNG = np.random.default_rng(0)


def tensor(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


class StandardAttention(unittest.TestCase):
    def check(self, inputs, outputs=("y",), **attributes):
        names = list(inputs)
        node = helper.make_node("Attention", names, list(outputs), **attributes)
        feeds = {name: value for name, value in inputs.items() if name}
        assert_matches(self, graph_model(node, feeds, outputs), feeds, rtol=1e-4, atol=1e-5)

    def test_4d_causal_with_a_float_mask(self):
        self.check({"q": tensor(2, 3, 4, 8), "k": tensor(2, 3, 6, 8), "v": tensor(2, 3, 6, 8), "mask": tensor(4, 6)},
                   is_causal=1)

    def test_3d_grouped_query_heads_scaled_and_softcapped(self):
        self.check({"q": tensor(1, 5, 32), "k": tensor(1, 5, 16), "v": tensor(1, 5, 16)},
                   q_num_heads=4, kv_num_heads=2, scale=0.3, softcap=2.0)

    def test_boolean_mask_and_past_key_value_with_present_outputs(self):
        mask = RNG.random((1, 1, 2, 5)) > 0.3
        mask[..., 0] = True
        self.check(
            {"q": tensor(1, 2, 2, 4), "k": tensor(1, 2, 2, 4), "v": tensor(1, 2, 2, 4), "mask": mask,
             "past_key": tensor(1, 2, 3, 4), "past_value": tensor(1, 2, 3, 4)},
            outputs=("y", "present_key", "present_value"),
        )

    def test_causal_with_past_aligns_the_frontier_to_the_end(self):
        self.check(
            {"q": tensor(1, 2, 2, 4), "k": tensor(1, 2, 2, 4), "v": tensor(1, 2, 2, 4), "": None,
             "past_key": tensor(1, 2, 3, 4), "past_value": tensor(1, 2, 3, 4)},
            outputs=("y", "present_key", "present_value"), is_causal=1,
        )


if __name__ == "__main__":
    unittest.main()
