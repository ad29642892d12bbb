"""The driver's com.microsoft attention converters against onnxruntime
(onnx_ops/contrib_attention.py, and onnxruntime's RotaryEmbedding in onnx_ops/rotary.py):
every mask_index form, past and present, unidirectional, attention_bias; float outputs
within 1e-4 relative."""

import unittest

import numpy as np
from onnx import helper
from onnx_ops_cases import assert_matches, graph_model, run_driver, run_onnxruntime

RNG = np.random.default_rng(10)
MICROSOFT = [("com.microsoft", 1)]


def tensor(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(test, op_type, inputs, outputs, constants=None, **attributes):
    """`op_type` (com.microsoft) on `inputs` ({name: array}, in order; a name of
    `constants` is an initializer), against onnxruntime."""
    constants = constants or {}
    node = helper.make_node(op_type, list(inputs), list(outputs), domain="com.microsoft", **attributes)
    feeds = {name: value for name, value in inputs.items() if name not in constants}
    made = graph_model(node, feeds, list(outputs), constants, opset=17, extra_opsets=MICROSOFT)
    assert_matches(test, made, feeds, rtol=1e-4, atol=1e-5)


def check_with_gaps(test, op_type, names, feeds, outputs, constants=None, **attributes):
    """As `check`, the node's inputs `names` ("" for one left out) fed from `feeds` and
    `constants`."""
    node = helper.make_node(op_type, names, list(outputs), domain="com.microsoft", **attributes)
    made = graph_model(node, feeds, list(outputs), constants or {}, opset=17, extra_opsets=MICROSOFT)
    assert_matches(test, made, feeds, rtol=1e-4, atol=1e-5)


class MicrosoftAttention(unittest.TestCase):
    """com.microsoft Attention: input (2, 5, 16), 2 heads of 8."""

    def inputs(self, mask):
        return {"x": tensor(2, 5, 16), "w": tensor(16, 48) * 0.3, "b": tensor(48), "mask": mask}

    def test_every_mask_index_form(self):
        masks = {
            "key lengths (batch)": np.array([5, 3], np.int32),
            "ends and starts (2 * batch)": np.array([5, 4, 0, 1], np.int32),
            "0/1 mask (batch, total)": np.array([[1, 1, 1, 0, 0], [1, 0, 1, 1, 1]], np.int32),
            "0/1 mask (batch, seq, total)": RNG.integers(0, 2, (2, 5, 5)).astype(np.int32),
        }
        for name, mask in masks.items():
            with self.subTest(name):
                check(self, "Attention", self.inputs(mask), ["y"], num_heads=2)

    def test_past_present_unidirectional_and_scale(self):
        inputs = {**self.inputs(np.ones((2, 8), np.int32)), "past": tensor(2, 2, 2, 3, 8)}
        check(self, "Attention", inputs, ["y", "present"], num_heads=2, unidirectional=1, scale=0.2)

    def test_attention_bias_with_a_mask(self):
        inputs = {**self.inputs(np.array([4, 5], np.int32)), "": None, "bias": tensor(1, 2, 5, 5)}
        feeds = {name: value for name, value in inputs.items() if name}
        check_with_gaps(self, "Attention", list(inputs), feeds, ["y"], num_heads=2)

    def test_qkv_hidden_sizes_and_mask_filter_value(self):
        inputs = {"x": tensor(1, 4, 8), "w": tensor(8, 40), "b": tensor(40), "mask": np.array([[1, 1, 0, 1]], np.int32)}
        check(self, "Attention", inputs, ["y"], num_heads=2, qkv_hidden_sizes=[12, 12, 16], mask_filter_value=-1000.0)

    def test_unsupported_attributes_name_the_op_and_node(self):
        node = helper.make_node("Attention", ["x", "w"], ["y"], domain="com.microsoft", num_heads=2, do_rotary=1,
                                name="rotating")
        data = tensor(1, 4, 16)
        made = graph_model(node, {"x": data}, ["y"], {"w": tensor(16, 48)}, opset=17, extra_opsets=MICROSOFT)
        with self.assertRaises(Exception) as raised:
            run_driver(made, {"x": data})
        message = str(raised.exception)
        self.assertIn("Attention (com.microsoft) node 'rotating'", message)
        self.assertIn("do_rotary=1", message)


class MultiHeadAttention(unittest.TestCase):
    def test_cross_attention_with_bias_and_key_padding_mask(self):
        masks = {"(batch, total)": np.array([[1, 1, 1, 0, 0, 1], [1, 1, 1, 1, 1, 1]], np.int32),
                 "(batch)": np.array([4, 6], np.int32)}
        for name, mask in masks.items():
            with self.subTest(name):
                inputs = {"q": tensor(2, 3, 16), "k": tensor(2, 6, 16), "v": tensor(2, 6, 16), "bias": tensor(48),
                          "mask": mask}
                check(self, "MultiHeadAttention", inputs, ["y"], num_heads=4)

    def test_self_attention_after_a_past_unidirectional_with_attention_bias(self):
        feeds = {"q": tensor(1, 3, 16), "k": tensor(1, 3, 16), "v": tensor(1, 3, 16), "attention_bias": tensor(1, 2, 3, 7),
                 "past_key": tensor(1, 2, 4, 8), "past_value": tensor(1, 2, 4, 8)}
        names = ["q", "k", "v", "", "", "attention_bias", "past_key", "past_value"]
        check_with_gaps(self, "MultiHeadAttention", names, feeds, ["y", "present_key", "present_value"], num_heads=2,
                        unidirectional=1)

    def test_packed_key_value_as_separate_key_and_value(self):
        # (onnxruntime's CPU kernel lacks packed K/V: its result on K and V apart is the judge.)
        query, packed = tensor(2, 3, 16), tensor(2, 5, 2, 2, 8)
        separate = {"q": query, "k": packed[:, :, :, 0].reshape(2, 5, 16), "v": packed[:, :, :, 1].reshape(2, 5, 16)}
        node = helper.make_node("MultiHeadAttention", list(separate), ["y"], domain="com.microsoft", num_heads=2)
        expected = run_onnxruntime(graph_model(node, separate, ["y"], opset=17, extra_opsets=MICROSOFT), separate)
        node = helper.make_node("MultiHeadAttention", ["q", "kv"], ["y"], domain="com.microsoft", num_heads=2)
        feeds = {"q": query, "kv": packed}
        made = graph_model(node, feeds, ["y"], opset=17, extra_opsets=MICROSOFT)
        assert_matches(self, made, feeds, rtol=1e-4, atol=1e-5, expected=expected)


class GroupQueryAttention(unittest.TestCase):
    def run_case(self, seq, past, seqlens, total, rotary=False, **attributes):
        """4 query heads over 2 key/value heads of 16 (onnxruntime's rotary wants a multiple
        of 16), batch 2. The rows of padding queries (past a row's length) are left out:
        onnxruntime leaves them undefined."""
        names = ["q", "k", "v", "past_key" if past else "", "past_value" if past else "", "seqlens", "total"]
        feeds = {"q": tensor(2, seq, 64), "k": tensor(2, seq, 32), "v": tensor(2, seq, 32)}
        if past:
            feeds.update(past_key=tensor(2, 2, past, 16), past_value=tensor(2, 2, past, 16))
        constants = {"seqlens": np.array(seqlens, np.int32), "total": np.array(total, np.int32)}
        if rotary:
            names += ["cos", "sin"]
            angles = np.arange(16)[:, None] * (0.5 ** np.arange(8))[None]
            constants.update(cos=np.cos(angles).astype(np.float32), sin=np.sin(angles).astype(np.float32))
        node = helper.make_node("GroupQueryAttention", names, ["y", "present_key", "present_value"],
                                domain="com.microsoft", num_heads=4, kv_num_heads=2, do_rotary=int(rotary), **attributes)
        made = graph_model(node, feeds, ["y", "present_key", "present_value"], constants, opset=17,
                           extra_opsets=MICROSOFT)
        got, want = run_driver(made, feeds), run_onnxruntime(made, feeds)
        for row, length in enumerate(seqlens):
            valid = length + 1 - (past or 0)
            np.testing.assert_allclose(got[0][row, :valid], want[0][row, :valid], rtol=1e-4, atol=1e-5)
        for index in (1, 2):
            np.testing.assert_allclose(got[index], want[index], rtol=1e-4, atol=1e-5)

    def test_prompt_with_a_padded_row(self):
        self.run_case(seq=5, past=0, seqlens=[4, 2], total=5)

    def test_decoding_after_a_past_with_rotary_and_a_local_window(self):
        self.run_case(seq=1, past=4, seqlens=[4, 4], total=5, rotary=True, local_window_size=3)

    def test_prompt_with_interleaved_rotary_and_softcap(self):
        self.run_case(seq=4, past=0, seqlens=[3, 3], total=4, rotary=True, rotary_interleaved=1, softcap=2.0)


class MicrosoftRotaryEmbedding(unittest.TestCase):
    def caches(self, rows, half):
        angles = np.arange(rows)[:, None] * (0.5 ** np.arange(half))[None]
        return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)

    def test_position_forms_layouts_and_interleaving(self):
        cos, sin = self.caches(12, 4)
        cases = {
            "3-D, (batch, seq) positions": (tensor(2, 3, 16), np.array([[0, 1, 2], [5, 6, 7]], np.int64), {"num_heads": 2}),
            "4-D, a first position, interleaved": (tensor(1, 2, 4, 8), np.array([3], np.int64), {"interleaved": 1}),
            "3-D without num_heads": (tensor(1, 4, 16), np.array([2], np.int64), {}),
        }
        for name, (data, positions, attributes) in cases.items():
            with self.subTest(name):
                constants = {"positions": positions, "cos": cos, "sin": sin}
                check(self, "RotaryEmbedding", {"x": data, **constants}, ["y"], constants, **attributes)

    def test_partial_rotation(self):
        cos, sin = self.caches(8, 2)
        constants = {"positions": np.array([[0, 1, 2]], np.int64), "cos": cos, "sin": sin}
        check(self, "RotaryEmbedding", {"x": tensor(1, 3, 16), **constants}, ["y"], constants, num_heads=2,
              rotary_embedding_dim=4)


if __name__ == "__main__":
    unittest.main()
