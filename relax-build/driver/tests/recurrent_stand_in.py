"""A numpy stand-in for the runtime's `relax_runtime.recurrent` kernel, for tests.

It is a literal, slow rendering of the kernel's semantics (see
relax_driver/onnx_ops/recurrent.py for the interface): per direction and batch row, the
steps run over the row's length forward or backward; y is zero past a row's length;
y_h / y_c hold the state after the last processed step. `register()` makes the compiled
modules' `call_dps_packed` calls reach it.
"""

import numpy as np
import tvm_ffi

KIND_RNN, KIND_GRU, KIND_LSTM = 0, 1, 2


def activation(code, alpha, beta, x):
    """The kernel's activation `code` on x."""
    if code == 0:
        return np.maximum(x, 0)
    if code == 1:
        return np.tanh(x)
    if code == 2:
        return 1 / (1 + np.exp(-x))
    if code == 3:
        return alpha * x + beta
    if code == 4:
        return np.where(x >= 0, x, alpha * x)
    if code == 5:
        return np.where(x > alpha, x, 0)
    if code == 6:
        return alpha * np.tanh(beta * x)
    if code == 7:
        return np.clip(alpha * x + beta, 0, 1)
    if code == 8:
        return np.where(x >= 0, x, alpha * (np.exp(x) - 1))
    if code == 9:
        return x / (1 + np.abs(x))
    if code == 10:
        return np.log1p(np.exp(x))
    raise ValueError(f"activation code {code}")


def step(kind, gates, h, c, r, rb, p, hidden, linear_before_reset, input_forget, clip, acts):
    """One step of one batch row: (h, c) after it. `gates` is xw at this step."""

    def clipped(x):
        return np.clip(x, -clip, clip) if clip > 0 else x

    def f(index, x):
        code, alpha, beta = acts[index]
        return activation(code, alpha, beta, x)

    def part(values, index):
        return values[index * hidden : (index + 1) * hidden]

    if kind == KIND_RNN:
        return f(0, clipped(gates + r @ h + rb)), c
    if kind == KIND_GRU:
        recurrent = r @ h + rb
        z = f(0, clipped(part(gates, 0) + part(recurrent, 0)))
        reset = f(0, clipped(part(gates, 1) + part(recurrent, 1)))
        r_h, rb_h = r[2 * hidden :], rb[2 * hidden :]
        if linear_before_reset:
            candidate = part(gates, 2) + reset * (r_h @ h + rb_h)
        else:
            candidate = part(gates, 2) + r_h @ (reset * h) + rb_h
        candidate = f(1, clipped(candidate))
        return (1 - z) * candidate + z * h, c
    # LSTM: gates i, o, f, c; peepholes i, o, f.
    pre = gates + r @ h + rb
    p_i, p_o, p_f = part(p, 0), part(p, 1), part(p, 2)
    i = f(0, clipped(part(pre, 0) + p_i * c))
    if input_forget:
        forget = 1 - i
    else:
        forget = f(0, clipped(part(pre, 2) + p_f * c))
    candidate = f(1, clipped(part(pre, 3)))
    c = forget * c + i * candidate
    o = f(0, clipped(part(pre, 1) + p_o * c))
    return o * f(2, c), c


def recurrent(xw, r, rb, p, seq_lens, h0, c0, kind, direction, linear_before_reset, input_forget, clip, *rest):
    """The kernel: `rest` is the activations' (code, alpha, beta) triples, then the
    outputs y, y_h, y_c to write."""
    xw, r, rb, p = xw.numpy(), r.numpy(), rb.numpy(), p.numpy()
    # The kernel takes R transposed per direction, [D, H, G*H]; the steps read ONNX's.
    r = r.transpose(0, 2, 1)
    seq_lens, h0, c0 = seq_lens.numpy(), h0.numpy(), c0.numpy()
    *act_values, y_out, y_h_out, y_c_out = rest
    num_directions, steps, batch, _ = xw.shape
    hidden = r.shape[2]
    per_direction = len(act_values) // 3 // num_directions
    y = np.zeros((steps, num_directions, batch, hidden), np.float32)
    y_h, y_c = h0.copy(), c0.copy()
    for d in range(num_directions):
        backward = direction == 1 or (direction == 2 and d == 1)
        acts = [tuple(act_values[3 * (d * per_direction + k) : 3 * (d * per_direction + k) + 3]) for k in range(per_direction)]
        for b in range(batch):
            length = int(seq_lens[b]) if seq_lens.size else steps
            h, c = h0[d, b].astype(np.float64), c0[d, b].astype(np.float64)
            order = range(length - 1, -1, -1) if backward else range(length)
            for t in order:
                h, c = step(kind, xw[d, t, b], h, c, r[d], rb[d], p[d], hidden, linear_before_reset, input_forget, clip, acts)
                y[t, d, b] = h
            y_h[d, b], y_c[d, b] = h, c
    y_out.copyfrom(y)
    y_h_out.copyfrom(y_h.astype(np.float32))
    y_c_out.copyfrom(y_c.astype(np.float32))


def register():
    tvm_ffi.register_global_func("relax_runtime.recurrent", recurrent, override=True)
