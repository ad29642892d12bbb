"""ONNX's recurrent layers (LSTM, GRU, RNN), which TVM's importer lacks.

A layer is not unrolled (its time dim may be symbolic). The converter computes the
input projection of every step as one matmul in Relax, then hands the sequential part
to the runtime's kernel `relax_runtime.recurrent` through `R.call_dps_packed`:

    args: 0 xw [D, T, B, G*H]   (X @ W[d]^T + Wb[d], gates in ONNX order)
          1 r [D, H, G*H]       (ONNX R transposed per direction; numpy transposes a
                                constant R at import)
          2 rb [D, G*H]         (the recurrence bias; zeros when the model has no B)
          3 p [D, 3*H]          (LSTM peepholes i, o, f; zeros if absent or not an LSTM)
          4 seq_lens float32 [B], or float32 [0] when every sequence has T steps
          5 h0 [D, B, H], 6 c0 [D, B, H] (zeros when absent, or not an LSTM)
          prim values: 7 kind (0 RNN, 1 GRU, 2 LSTM), 8 direction (0 forward,
          1 reverse, 2 bidirectional), 9 linear_before_reset, 10 input_forget,
          11 clip (0.0 = none), then (code, alpha, beta) for each activation of each
          direction in ONNX order (see ACTIVATION_CODES)
    outputs: y [T, D, B, H], y_h [D, B, H], y_c [D, B, H], all float32

The converter then lays the outputs out as ONNX wants them (layout 0 or 1).
"""

import numpy as np

from tvm import relax, tirx
from tvm.ir import Constant
from tvm.relax.frontend.onnx.onnx_frontend import OnnxOpConverter

KERNEL = "relax_runtime.recurrent"

KIND_RNN, KIND_GRU, KIND_LSTM = 0, 1, 2
DIRECTIONS = {"forward": 0, "reverse": 1, "bidirectional": 2}

# Activation name (lower case) -> (the kernel's code, default alpha, default beta).
# Defaults are those of the ONNX operator of the same name; 0.0 where it takes none.
ACTIVATION_CODES = {
    "relu": (0, 0.0, 0.0),
    "tanh": (1, 0.0, 0.0),
    "sigmoid": (2, 0.0, 0.0),
    "affine": (3, 1.0, 0.0),
    "leakyrelu": (4, 0.01, 0.0),
    "thresholdedrelu": (5, 1.0, 0.0),
    "scaledtanh": (6, 1.0, 1.0),
    "hardsigmoid": (7, 0.2, 0.5),
    "elu": (8, 1.0, 0.0),
    "softsign": (9, 0.0, 0.0),
    "softplus": (10, 0.0, 0.0),
}
# The activations that read alpha, and those that read beta: each consumes the next
# value of activation_alpha / activation_beta, as onnxruntime reads them.
TAKES_ALPHA = {"affine", "leakyrelu", "thresholdedrelu", "scaledtanh", "hardsigmoid", "elu"}
TAKES_BETA = {"affine", "scaledtanh", "hardsigmoid"}


def text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def activation_values(names, alphas, betas):
    """The kernel's prim values for the activations `names`: (code, alpha, beta) each."""
    alphas, betas = list(alphas), list(betas)
    values = []
    for name in names:
        key = text(name).lower()
        if key not in ACTIVATION_CODES:
            raise ValueError(f"recurrent layer: unsupported activation {text(name)}")
        code, alpha, beta = ACTIVATION_CODES[key]
        if key in TAKES_ALPHA and alphas:
            alpha = alphas.pop(0)
        if key in TAKES_BETA and betas:
            beta = betas.pop(0)
        values += [
            relax.prim_value(tirx.IntImm("int64", code)),
            float_value(alpha),
            float_value(beta),
        ]
    return values


def activations(attr, defaults, num_directions):
    """The activation names of every direction, in ONNX order: the model's, or the
    defaults; a list given for one direction of a bidirectional layer serves both."""
    names = [text(name) for name in attr.get("activations", ())] or list(defaults)
    if len(names) == len(defaults) and num_directions == 2:
        names = names * 2
    if len(names) != len(defaults) * num_directions:
        raise ValueError(f"recurrent layer: {len(names)} activations for {num_directions} direction(s)")
    return names


def int_value(value):
    return relax.prim_value(tirx.IntImm("int64", int(value)))


def float_value(value):
    return relax.prim_value(tirx.FloatImm("float64", float(value)))


def float32(bb, expr):
    """`expr` as float32 (the kernel's one dtype)."""
    if expr.ty.dtype == "float32":
        return expr
    return bb.emit(relax.op.astype(expr, "float32"))


def constant_array(expr):
    """The float32 numpy value of a constant, or None."""
    return expr.value.numpy().astype(np.float32) if isinstance(expr, Constant) else None


def zeros(shape):
    return relax.op.zeros(relax.ShapeExpr(shape), "float32")


class Recurrent(OnnxOpConverter):
    """What the three layers share; subclasses give the kind, gate count and inputs."""

    kind = None
    gates = None
    default_activations = ()

    @classmethod
    def convert(cls, bb, inputs, attr):
        x, w, r = inputs[0], inputs[1], inputs[2]
        bias = inputs[3] if len(inputs) > 3 else None
        seq_lens = inputs[4] if len(inputs) > 4 else None
        initial_h = inputs[5] if len(inputs) > 5 else None
        initial_c = inputs[6] if cls.kind == KIND_LSTM and len(inputs) > 6 else None
        peepholes = inputs[7] if cls.kind == KIND_LSTM and len(inputs) > 7 else None

        direction = DIRECTIONS[text(attr.get("direction", b"forward"))]
        num_directions = 2 if direction == 2 else 1
        layout = int(attr.get("layout", 0))
        dtype = x.ty.dtype
        x, w, r = float32(bb, x), float32(bb, w), float32(bb, r)
        if layout == 1:
            x = bb.emit(relax.op.permute_dims(x, [1, 0, 2]))
        steps, batch, _ = x.ty.shape.values
        hidden = r.ty.shape.values[2]
        width = cls.gates * hidden

        # The input projection of every step, per direction: [T, B, I] @ [I, G*H] + bias,
        # stacked to [D, T, B, G*H]. With constant weights, each direction's product has
        # a constant 2-D right operand, which offload.py runs on the dense kernel.
        weight_values = constant_array(w)
        bias_values = constant_array(float32(bb, bias)) if bias is not None else None
        projections = []
        for d in range(num_directions):
            if weight_values is not None:
                weight_t = relax.const(np.ascontiguousarray(weight_values[d].T))
            else:
                weight_t = relax.op.permute_dims(relax.op.take(w, relax.const(d, "int64"), axis=0), [1, 0])
            projection = relax.op.matmul(x, weight_t)
            if bias_values is not None:
                projection = relax.op.add(projection, relax.const(np.ascontiguousarray(bias_values[d, : bias_values.shape[1] // 2])))
            elif bias is not None:
                row = relax.op.take(float32(bb, bias), relax.const(d, "int64"), axis=0)
                projection = relax.op.add(projection, relax.op.strided_slice(row, axes=[0], begin=[0], end=[width]))
            projections.append(relax.op.expand_dims(bb.emit(projection), 0))
        xw = projections[0] if num_directions == 1 else relax.op.concat(projections, axis=0)
        if bias_values is not None:
            recurrence_bias = relax.const(np.ascontiguousarray(bias_values[:, bias_values.shape[1] // 2 :]))
        elif bias is not None:
            bias = float32(bb, bias)
            recurrence_bias = relax.op.strided_slice(bias, axes=[1], begin=[width], end=[2 * width])
        else:
            recurrence_bias = zeros([num_directions, width])
        xw = bb.emit(xw)

        state_shape = [num_directions, batch, hidden]
        # (Zeros for RNN and GRU too: a library cannot hold a tensor of no elements.)
        peepholes = zeros([num_directions, 3 * hidden]) if peepholes is None else float32(bb, peepholes)
        if seq_lens is None:
            seq_lens = relax.const(np.zeros(0, np.float32))
        else:
            seq_lens = relax.op.astype(seq_lens, "float32")
        initial_h = zeros(state_shape) if initial_h is None else float32(bb, initial_h)
        initial_c = zeros(state_shape) if initial_c is None else float32(bb, initial_c)

        recurrence_values = constant_array(r)
        if recurrence_values is not None:
            r = relax.const(np.ascontiguousarray(recurrence_values.transpose(0, 2, 1)))
        else:
            r = relax.op.permute_dims(r, [0, 2, 1])
        tensors = [xw, r, recurrence_bias, peepholes, seq_lens, initial_h, initial_c]
        args = [tensor if isinstance(tensor, (relax.Var, Constant)) else bb.emit(tensor) for tensor in tensors]
        args += [
            int_value(cls.kind),
            int_value(direction),
            int_value(attr.get("linear_before_reset", 0)),
            int_value(attr.get("input_forget", 0)),
            float_value(attr.get("clip", 0.0)),
        ]
        names = activations(attr, cls.default_activations, num_directions)
        args += activation_values(names, attr.get("activation_alpha", ()), attr.get("activation_beta", ()))

        out_types = [
            relax.TensorType([steps, num_directions, batch, hidden], "float32"),
            relax.TensorType(state_shape, "float32"),
            relax.TensorType(state_shape, "float32"),
        ]
        result = bb.emit(relax.call_dps_packed(KERNEL, relax.Tuple(args), out_types))
        y, y_h, y_c = (bb.emit(relax.TupleGetItem(result, i)) for i in range(3))
        if layout == 1:
            y = relax.op.permute_dims(y, [2, 0, 1, 3])
            y_h = relax.op.permute_dims(y_h, [1, 0, 2])
            y_c = relax.op.permute_dims(y_c, [1, 0, 2])
        outputs = [y, y_h, y_c] if cls.kind == KIND_LSTM else [y, y_h]
        if dtype != "float32":
            outputs = [relax.op.astype(output, dtype) for output in outputs]
        return relax.Tuple([bb.emit(output) for output in outputs])


class LSTM(Recurrent):
    """ONNX LSTM: gates i, o, f, c; activations f, g, h."""

    kind = KIND_LSTM
    gates = 4
    default_activations = ("Sigmoid", "Tanh", "Tanh")

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls.convert(bb, inputs, attr)


class GRU(Recurrent):
    """ONNX GRU: gates z, r, h; activations f, g."""

    kind = KIND_GRU
    gates = 3
    default_activations = ("Sigmoid", "Tanh")

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls.convert(bb, inputs, attr)


class RNN(Recurrent):
    """ONNX RNN: one gate; activation f."""

    kind = KIND_RNN
    gates = 1
    default_activations = ("Tanh",)

    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        return cls.convert(bb, inputs, attr)


CONVERTERS = {"LSTM": LSTM, "GRU": GRU, "RNN": RNN}
