"""Models rewritten by onnxruntime's own tools, built by the driver and compared with
onnxruntime (run with its default graph optimizations, as a user runs them): a BERT
encoder through optimize_model (EmbedLayerNormalization, Attention,
SkipLayerNormalization, BiasGelu), then quantize_dynamic (QEmbedLayerNormalization,
QAttention, MatMulInteger) and onnxruntime's session optimizations
(DynamicQuantizeMatMul); a CRNN through quantize_dynamic (DynamicQuantizeLSTM); a CNN
through quantize_static, QOperator (QLinearConv, QLinearAdd, QLinearConcat, QGemm, ...)
and QDQ formats.

Bounds: 1e-4 relative for the float and integer-to-float graphs (onnxruntime and the
driver quantize activations identically); for static quantization, one output
quantization step; for the CRNN, 2e-2 absolute on logits of about 1 (see
DynamicQuantizeLSTM in onnx_ops/contrib_quantized.py).
"""

import collections
import os
import tempfile
import unittest

import numpy as np
import onnx
import onnxruntime
from contrib_models import bert_encoder, bert_feeds, crnn, small_cnn
from onnx_ops_cases import run_driver
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, quantize_dynamic, quantize_static
from onnxruntime.transformers.optimizer import optimize_model

import recurrent_stand_in


def operators(model):
    return collections.Counter(node.op_type for node in model.graph.node)


def onnxruntime_outputs(path, feeds):
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


class Images(CalibrationDataReader):
    def __init__(self, shape, count=4):
        self.batches = iter([{"image": np.random.default_rng(seed).standard_normal(shape).astype(np.float32)}
                             for seed in range(count)])

    def get_next(self):
        return next(self.batches, None)


class OnnxruntimeMadeModels(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)

    def path(self, name):
        return os.path.join(self.folder.name, name)

    def assert_close(self, path, feeds, rtol=1e-4, atol=1e-5):
        got = run_driver(onnx.load(path), feeds)[0]
        want = onnxruntime_outputs(path, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=os.path.basename(path))

    def optimized_bert(self):
        onnx.save(bert_encoder(), self.path("bert.onnx"))
        optimized = optimize_model(self.path("bert.onnx"), model_type="bert", num_heads=2, hidden_size=32, opt_level=0)
        optimized.save_model_to_file(self.path("optimized.onnx"))
        return onnx.load(self.path("optimized.onnx"))

    def test_bert_optimized_by_the_transformer_optimizer(self):
        found = operators(self.optimized_bert())
        for op_type in ("EmbedLayerNormalization", "Attention", "SkipLayerNormalization", "BiasGelu"):
            self.assertIn(op_type, found)
        for batch, sequence in ((2, 7), (1, 4)):  # dynamic batch and sequence
            self.assert_close(self.path("optimized.onnx"), bert_feeds(batch, sequence))

    def test_bert_optimized_then_quantized_dynamically(self):
        self.optimized_bert()
        # (The optimized graph's contrib outputs have no inferred type: the quantizer is told float.)
        quantize_dynamic(self.path("optimized.onnx"), self.path("quantized.onnx"),
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        found = operators(onnx.load(self.path("quantized.onnx")))
        for op_type in ("QEmbedLayerNormalization", "QAttention", "MatMulInteger", "DynamicQuantizeLinear"):
            self.assertIn(op_type, found)
        self.assert_close(self.path("quantized.onnx"), bert_feeds())
        # onnxruntime's own session optimizations fuse DynamicQuantizeLinear + MatMulInteger.
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = self.path("fused.onnx")
        onnxruntime.InferenceSession(self.path("quantized.onnx"), options, providers=["CPUExecutionProvider"])
        self.assertIn("DynamicQuantizeMatMul", operators(onnx.load(self.path("fused.onnx"))))
        self.assert_close(self.path("fused.onnx"), bert_feeds())

    def test_crnn_quantized_dynamically(self):
        recurrent_stand_in.register()
        onnx.save(crnn(), self.path("crnn.onnx"))
        # (Convolutions stay float: onnxruntime has no CPU ConvInteger for int8 weights.)
        quantize_dynamic(self.path("crnn.onnx"), self.path("quantized.onnx"), op_types_to_quantize=["LSTM", "MatMul"])
        self.assertIn("DynamicQuantizeLSTM", operators(onnx.load(self.path("quantized.onnx"))))
        image = np.random.default_rng(3).standard_normal((2, 1, 8, 12)).astype(np.float32)
        self.assert_close(self.path("quantized.onnx"), {"image": image}, rtol=0, atol=2e-2)

    def test_cnn_quantized_statically_in_both_formats(self):
        onnx.save(small_cnn(), self.path("cnn.onnx"))
        image = np.random.default_rng(9).standard_normal((2, 3, 8, 8)).astype(np.float32)
        expected = {"QOperator": ["QLinearConv", "QLinearAdd", "QLinearMul", "QLinearConcat", "QLinearSigmoid",
                                  "QLinearLeakyRelu", "QLinearAveragePool", "QLinearGlobalAveragePool", "QGemm"],
                    "QDQ": ["QuantizeLinear", "DequantizeLinear"]}
        for quant_format in (QuantFormat.QOperator, QuantFormat.QDQ):
            name = "QOperator" if quant_format == QuantFormat.QOperator else "QDQ"
            with self.subTest(name):
                path = self.path(f"{name}.onnx")
                quantize_static(self.path("cnn.onnx"), path, Images((1, 3, 8, 8)), quant_format=quant_format)
                found = operators(onnx.load(path))
                for op_type in expected[name]:
                    self.assertIn(op_type, found)
                model = onnx.load(path)
                output_scale = [node for node in model.graph.node if node.op_type == "DequantizeLinear"][-1].input[1]
                step = float(onnx.numpy_helper.to_array(
                    next(tensor for tensor in model.graph.initializer if tensor.name == output_scale)))
                self.assert_close(path, {"image": image}, rtol=0, atol=step * 1.01)


if __name__ == "__main__":
    unittest.main()
