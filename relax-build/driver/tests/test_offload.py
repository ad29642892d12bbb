"""Unit tests of the driver's choice of weight layouts for relax-runtime's kernels (these
need TVM: tests/driver_python.rs runs them with the toolchain's Python).

    python -m unittest discover -s relax-build/driver/tests
"""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tvm import relax  # noqa: E402

from relax_driver import offload  # noqa: E402


def convolutions(weights, uses):
    """A function of one input per size in `uses` and one weight per `weights` entry
    (`(filters, channels)`), whose bindings are 3x3, stride-1, padding-1 convolution kernel
    calls: `uses` is a list of (weight index, input size)."""
    sizes = sorted({size for _, size in uses})
    channels_of = {size: {weights[w][1] for w, s in uses if s == size} for size in sizes}
    inputs = {}
    for size in sizes:
        (channels,) = channels_of[size]
        inputs[size] = relax.Var(f"x{size}", relax.TensorType([1, channels, size, size], "float32"))
    params = [relax.Var(f"w{index}", relax.TensorType([filters, channels, 3, 3], "float32")) for index, (filters, channels) in enumerate(weights)]
    bindings = []
    for index, (weight, size) in enumerate(uses):
        out_ty = relax.TensorType([1, weights[weight][0], size, size], "float32")
        # strides, padding (4), dilation, groups, epilogue
        ints = [offload.int_value(value) for value in (1, 1, 1, 1, 1, 1, 1, 1, 1, 0)]
        call = offload.packed("relax_runtime.conv2d", [inputs[size], params[weight], *ints], out_ty)
        bindings.append(relax.VarBinding(relax.Var(f"y{index}", out_ty), call))
    body = relax.SeqExpr([relax.DataflowBlock(bindings)], bindings[-1].var)
    function = relax.Function([*inputs.values(), *params], body, bindings[-1].var.ty)
    return function.with_attr("num_input", len(inputs))


class Winograd(unittest.TestCase):
    def layout(self, filters, channels, size):
        _, chosen = offload.winograd_weights(convolutions([(filters, channels)], [(0, size)]))
        return chosen.get(1)

    def test_each_variant_where_it_measured_best(self):
        # ResNet-50's 3x3 layers, then ones below each threshold.
        self.assertEqual(self.layout(64, 64, 56), "winograd4")
        self.assertEqual(self.layout(128, 128, 28), "winograd")
        self.assertEqual(self.layout(256, 256, 14), "winograd")
        self.assertIsNone(self.layout(512, 512, 7))
        self.assertIsNone(self.layout(32, 32, 56))
        self.assertIsNone(self.layout(64, 64, 28))
        self.assertIsNone(self.layout(16, 3, 224))

    def test_the_weight_becomes_its_transform(self):
        function, chosen = offload.winograd_weights(convolutions([(128, 64)], [(0, 56)]))
        self.assertEqual(chosen, {1: "winograd4"})
        self.assertEqual([int(d) for d in offload.dims(function.params[1])], [36, 64, 128])

    def test_a_weight_whose_convolutions_want_different_variants_stays_stored(self):
        # The same 128 x 128 kernel over 56x56 (F(4x4)) and over 28x28 (F(2x2)).
        function, chosen = offload.winograd_weights(convolutions([(128, 128)], [(0, 56), (0, 28)]))
        self.assertEqual(chosen, {})
        self.assertEqual([int(d) for d in offload.dims(function.params[2])], [128, 128, 3, 3])


if __name__ == "__main__":
    unittest.main()
