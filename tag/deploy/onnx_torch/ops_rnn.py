"""Converters for ONNX recurrent ops: LSTM, GRU and RNN (opset 7-22 semantics), as loops of torch ops.

Shapes (layout 0, the default; layout 1 swaps the first two axes of X, Y and the state tensors):
X [T, B, I]; W [D, G*H, I]; R [D, G*H, H]; B [D, 2*G*H] (the input biases Wb, then the recurrence biases Rb);
initial_h / initial_c [D, B, H]; outputs Y [T, D, B, H], Y_h / Y_c [D, B, H]. G = 4 (LSTM), 3 (GRU), 1 (RNN);
D = 2 for ``direction="bidirectional"`` (direction 1 runs t = T-1 .. 0), else 1. Gate blocks of W, R and B, in
ONNX's order, with f, g, h the ``activations`` (default sigmoid, tanh, tanh):

- LSTM (i, o, f, c): i = f(x Wi' + h Ri' + Pi * c + b_i), f_t = f(x Wf' + h Rf' + Pf * c + b_f),
  c~ = g(x Wc' + h Rc' + b_c), c' = f_t * c + i * c~, o = f(x Wo' + h Ro' + Po * c' + b_o), h' = o * h(c');
  P [D, 3H] the optional peepholes (i, o, f), b_k = Wb_k + Rb_k.
- GRU (z, r, h): z = f(x Wz' + h Rz' + b_z), r = f(x Wr' + h Rr' + b_r); with linear_before_reset = 0,
  h~ = g(x Wh' + (r * h) Rh' + Rb_h + Wb_h), else h~ = g(x Wh' + r * (h Rh' + Rb_h) + Wb_h) (torch's GRU);
  h' = (1 - z) * h~ + z * h.
- RNN: h' = f(x Wi' + h Ri' + Wb_i + Rb_i) (default tanh).

``clip`` bounds every gate's pre-activation to [-clip, clip]. Not implemented (`Unsupported`): LSTM's
input_forget = 1, sequence_lens below T, activations other than Sigmoid / Tanh / Relu, activation alpha / beta.
The x W' products of all steps are one matmul, unbound into steps; the recurrence is a Python loop over T (autograd
flows through it).
"""

from __future__ import annotations

import torch

from tag.deploy.onnx_torch.ops_nn import Unsupported
from tag.deploy.onnx_torch.registry import converter

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
DEFAULT_ACTIVATIONS = {"LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh"), "RNN": ("Tanh",)}
ACTIVATIONS = {"Sigmoid": torch.sigmoid, "Tanh": torch.tanh, "Relu": torch.relu}


def _text(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _activations(node, n_dir: int) -> list[tuple]:
    """Per direction, the tuple of activation functions (Unsupported for names outside ACTIVATIONS)."""
    if node.attrs.get("activation_alpha") or node.attrs.get("activation_beta"):
        raise Unsupported(f"{node.op_type} with activation_alpha / activation_beta")
    names = [_text(a) for a in node.attrs.get("activations", [])] or list(DEFAULT_ACTIVATIONS[node.op_type]) * n_dir
    per = len(DEFAULT_ACTIVATIONS[node.op_type])
    if len(names) != per * n_dir:
        raise Unsupported(f"{node.op_type} with {len(names)} activations for {n_dir} direction(s)")
    for n in names:
        if n not in ACTIVATIONS:
            raise Unsupported(f"{node.op_type} activation {n!r}")
    return [tuple(ACTIVATIONS[n] for n in names[d * per:(d + 1) * per]) for d in range(n_dir)]


def _state(t, layout: int, d: int):
    """Direction d's [B, H] slice of an initial state (None stays None)."""
    if t is None:
        return None
    return t[:, d] if layout else t[d]


def _recurrent(node, ins):
    op = node.op_type
    x, w, r = ins[0], ins[1], ins[2]
    b = ins[3] if len(ins) > 3 else None
    seq_lens = ins[4] if len(ins) > 4 else None
    h0 = ins[5] if len(ins) > 5 else None
    c0 = ins[6] if len(ins) > 6 and op == "LSTM" else None
    p = ins[7] if len(ins) > 7 and op == "LSTM" else None
    layout = int(node.attrs.get("layout", 0))
    if layout:
        x = x.transpose(0, 1)  # [T, B, I] from here on
    steps, batch = x.shape[0], x.shape[1]
    if seq_lens is not None and bool((seq_lens != steps).any()):
        raise Unsupported(f"{op} with sequence_lens below the sequence length {steps}")
    if op == "LSTM" and int(node.attrs.get("input_forget", 0)):
        raise Unsupported("LSTM with input_forget=1")
    direction = _text(node.attrs.get("direction", "forward"))
    n_dir = w.shape[0]
    clip = node.attrs.get("clip")
    acts = _activations(node, n_dir)
    gates, hidden = GATES[op], r.shape[-1]
    linear_before_reset = int(node.attrs.get("linear_before_reset", 0))

    def bound(z):
        return z.clamp(-clip, clip) if clip is not None else z

    ys, hs, cs = [], [], []
    for d in range(n_dir):
        reverse = direction == "reverse" or d == 1
        wb = b[d, :gates * hidden] if b is not None else None
        rb = b[d, gates * hidden:] if b is not None else None
        xw = torch.matmul(x, w[d].t())  # [T, B, G*H]: every step's input product at once
        if wb is not None:
            xw = xw + wb
        xw = xw.unbind(0)  # one view per step; its backward stacks the steps' gradients once (indexing xw[t]
        # would make every step's backward allocate and fill a whole [T, B, G*H] gradient)
        h = _state(h0, layout, d)
        h = h if h is not None else x.new_zeros(batch, hidden)
        c = _state(c0, layout, d)
        c = c if c is not None else x.new_zeros(batch, hidden)
        f, g, hact = (acts[d] + (None, None))[:3]
        out = [None] * steps
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            if op == "GRU":
                xz, xr, xh = xw[t].split(hidden, dim=-1)
                hz, hr = (h @ r[d][:2 * hidden].t() + (rb[:2 * hidden] if rb is not None else 0)).split(hidden, -1)
                rh, bh = r[d][2 * hidden:], (rb[2 * hidden:] if rb is not None else None)
                z = f(bound(xz + hz))
                rg = f(bound(xr + hr))
                if linear_before_reset:
                    hh = h @ rh.t()
                    cand = g(bound(xh + rg * (hh + bh if bh is not None else hh)))
                else:
                    hh = (rg * h) @ rh.t()
                    cand = g(bound(xh + (hh + bh if bh is not None else hh)))
                h = cand + z * (h - cand)  # (1 - z) * cand + z * h
            else:
                pre = xw[t] + h @ r[d].t()
                if rb is not None:
                    pre = pre + rb
                if op == "RNN":
                    h = f(bound(pre))
                else:
                    zi, zo, zf, zc = pre.split(hidden, dim=-1)
                    if p is not None:  # peepholes read the previous cell (i, f) and the new one (o)
                        pi, po, pf = p[d].split(hidden)
                        zi, zf = zi + pi * c, zf + pf * c
                    i = f(bound(zi))
                    fg = f(bound(zf))
                    c = fg * c + i * g(bound(zc))
                    o = f(bound(zo + po * c if p is not None else zo))
                    h = o * hact(c)
            out[t] = h
        ys.append(torch.stack(out))  # [T, B, H]
        hs.append(h)
        cs.append(c)
    y = torch.stack(ys, dim=1)  # [T, D, B, H]
    y_h, y_c = torch.stack(hs), torch.stack(cs)  # [D, B, H]
    if layout:
        y, y_h, y_c = y.permute(2, 0, 1, 3), y_h.transpose(0, 1), y_c.transpose(0, 1)
    return (y, y_h, y_c) if op == "LSTM" else (y, y_h)


converter("LSTM", "GRU", "RNN")(_recurrent)
