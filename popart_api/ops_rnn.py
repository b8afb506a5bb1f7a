"""Lowerings of ONNX's RNN, GRU and LSTM (forward, reverse and bidirectional).

The input projection of every time step is one ``poplin::matMul`` (``X·Wᵀ`` over the
whole sequence, as popnn's ``lstmFwd``/``gruFwd`` compute it before their loop); each
step then multiplies the hidden state by ``Rᵀ`` (``poplin::matMul``) and applies the
gate nonlinearities with popops, the loop unrolled in the graph (the sequence length is
known when the graph is built). Gate orders are ONNX's (LSTM ``i, o, f, c``; GRU
``z, r, h``); ``linear_before_reset``, LSTM peepholes, ``clip``, ``layout`` and
initial states are supported; ``sequence_lens`` (forward direction) masks each step:
past a sequence's end its state is kept and its output is 0; activations Sigmoid,
Tanh, Relu, HardSigmoid, Affine, LeakyRelu.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from popart_api.errors import popart_exception
from popart_api.ops import float_check, matmul, register, tensor
from poplar_api import Graph, Tensor, popops
from poplar_api.tensor import concat

_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _act(graph: Graph, kind: str, alpha: float | None, beta: float | None, x: Tensor,
         prog: Any, name: str) -> Tensor:  # fmt: skip
    k = kind.lower()
    if k == "sigmoid":
        return popops.sigmoid(graph, x, prog, name)
    if k == "tanh":
        return popops.tanh(graph, x, prog, name)
    if k == "relu":
        return popops.max(graph, x, 0.0, prog, name)
    if k == "hardsigmoid":
        a = 0.2 if alpha is None else alpha
        b = 0.5 if beta is None else beta
        lin = popops.add(graph, popops.mul(graph, x, a, prog, f"{name}/a"), b, prog, f"{name}/b")
        return popops.clamp(graph, lin, 0.0, 1.0, prog, name)
    if k == "affine":
        a = 1.0 if alpha is None else alpha
        b = 0.0 if beta is None else beta
        return popops.add(graph, popops.mul(graph, x, a, prog, f"{name}/a"), b, prog, name)
    if k == "leakyrelu":
        a = 0.01 if alpha is None else alpha
        scaled = popops.mul(graph, x, a, prog, f"{name}/scaled")
        return popops.select(graph, x, scaled, popops.gt(graph, x, 0.0, prog, f"{name}/pos"),
                             prog, name)  # fmt: skip
    raise popart_exception(f"activation '{kind}' is not supported; required one of Sigmoid, "
                           "Tanh, Relu, HardSigmoid, Affine, LeakyRelu")  # fmt: skip


def _optional(inputs: list, i: int) -> Any:
    return inputs[i] if len(inputs) > i and inputs[i] is not None else None


def _recurrent(op: str) -> Any:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = float_check(tensor(graph, inputs[0], name), op, name)
        w = tensor(graph, inputs[1], name, x)
        r = tensor(graph, inputs[2], name, x)
        layout = int(attrs.get("layout", 0))
        if layout:
            x = x.dimShuffle([1, 0, 2])
        seq, batch, _in = x.shape()
        dirs_n, gh, _ = w.shape()
        hidden = int(attrs.get("hidden_size", gh // _GATES[op]))
        g = _GATES[op]
        direction = str(attrs.get("direction", "forward"))
        dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
        if len(dirs) != dirs_n or gh != g * hidden:
            raise popart_exception(
                f"{op} (node '{name}'): W {w.shape()} does not match direction '{direction}' "
                f"and hidden_size {hidden} (required [{len(dirs)}, {g * hidden}, input])"
            )
        lens = _optional(inputs, 4)
        if lens is not None and not isinstance(lens, Tensor) and np.all(np.asarray(lens) == seq):
            lens = None  # every sequence full: nothing to mask
        if lens is not None:
            lens = tensor(graph, lens, f"{name}/sequenceLens")
            if direction != "forward":
                raise popart_exception(
                    f"{op} (node '{name}'): sequence_lens shorter than the sequence are "
                    f"supported for direction 'forward' only; got '{direction}'"
                )
        acts = [
            a.decode() if isinstance(a, bytes) else str(a)
            for a in attrs.get("activations", _DEFAULT_ACTS[op] * len(dirs))
        ]
        alphas = list(attrs.get("activation_alpha", []))
        betas = list(attrs.get("activation_beta", []))
        per_dir = len(_DEFAULT_ACTS[op])
        clip = attrs.get("clip")
        b = _optional(inputs, 3)
        h0 = _optional(inputs, 5)
        c0 = _optional(inputs, 6) if op == "LSTM" else None
        peep = _optional(inputs, 7) if op == "LSTM" else None
        lbr = int(attrs.get("linear_before_reset", 0))
        if op == "LSTM" and int(attrs.get("input_forget", 0)):
            raise popart_exception(f"LSTM (node '{name}'): input_forget=1 is not supported")

        def state(v: Any, d: int, what: str) -> Tensor:
            if v is None:
                return tensor(graph, np.zeros([batch, hidden], np.float32), f"{name}/{what}0", x)
            t = tensor(graph, v, name, x)
            t = t.dimShuffle([1, 0, 2]) if layout else t
            return t[d]

        ys, hs, cs = [], [], []
        for d, dname in enumerate(dirs):
            pre = f"{name}/{dname}"
            act = [
                (acts[d * per_dir + k], alphas[d * per_dir + k] if len(alphas) > d * per_dir + k
                 else None, betas[d * per_dir + k] if len(betas) > d * per_dir + k else None)
                for k in range(per_dir)
            ]  # fmt: skip
            wd, rd = w[d], r[d]
            xw = matmul(graph, x.reshape([seq * batch, x.dim(2)]), wd.transpose(), prog,
                        f"{pre}/inputProjection").reshape([seq, batch, gh])  # fmt: skip
            if b is not None:
                bd = tensor(graph, b, name, x)[d]
                wb, rb = bd.slice(0, gh, 0), bd.slice(gh, 2 * gh, 0)
            else:
                wb = rb = None
            if wb is not None:
                xw = popops.add(graph, xw, wb, prog, f"{pre}/inputBias")
            h = state(h0, d, "h")
            c = state(c0, d, "c") if op == "LSTM" else None
            pd = tensor(graph, peep, name, x)[d] if peep is not None else None
            order = range(seq) if dname == "forward" else range(seq - 1, -1, -1)
            outs: list[Tensor | None] = [None] * seq
            for t in order:
                sp = f"{pre}/step{t}"

                def gate(k: int, v: Tensor) -> Tensor:
                    return v.slice(k * hidden, (k + 1) * hidden, 1)

                def f(k: int, v: Tensor, where: str, sp: str = sp, act: list = act) -> Tensor:
                    if clip is not None:
                        lim = float(clip)
                        v = popops.clamp(graph, v, -lim, lim, prog, f"{sp}/{where}Clip")
                    kind, alpha, beta = act[k]
                    return _act(graph, kind, alpha, beta, v, prog, f"{sp}/{where}")

                h_prev, c_prev = h, c
                hr = matmul(graph, h, rd.transpose(), prog, f"{sp}/recurrent")
                if rb is not None and not (op == "GRU" and lbr):
                    hr = popops.add(graph, hr, rb, prog, f"{sp}/recurrentBias")
                xt = xw[t]
                if op == "RNN":
                    h = f(0, popops.add(graph, xt, hr, prog, f"{sp}/sum"), "h")
                elif op == "GRU":
                    if lbr and rb is not None:
                        hr = popops.add(graph, hr, rb, prog, f"{sp}/recurrentBias")
                    zr = popops.add(graph, gate(0, xt), gate(0, hr),
                                    prog, f"{sp}/zSum")  # fmt: skip
                    z = f(0, zr, "z")
                    rr = popops.add(graph, gate(1, xt), gate(1, hr), prog, f"{sp}/rSum")
                    rgate = f(0, rr, "r")
                    if lbr:
                        inner = popops.mul(graph, rgate, gate(2, hr), prog, f"{sp}/rTimesHr")
                    else:
                        rh = popops.mul(graph, rgate, h, prog, f"{sp}/rTimesH")
                        inner = matmul(graph, rh, rd.slice(2 * hidden, 3 * hidden, 0).transpose(),
                                       prog, f"{sp}/hRecurrent")  # fmt: skip
                        if rb is not None:
                            inner = popops.add(graph, inner, rb.slice(2 * hidden, 3 * hidden, 0),
                                               prog, f"{sp}/hBias")  # fmt: skip
                    cand = f(1, popops.add(graph, gate(2, xt), inner, prog, f"{sp}/hSum"), "hh")
                    # H = (1 - z)·h~ + z·H  =  h~ + z·(H - h~)
                    delta = popops.sub(graph, h, cand, prog, f"{sp}/delta")
                    h = popops.add(graph, cand, popops.mul(graph, z, delta, prog, f"{sp}/zDelta"),
                                   prog, f"{sp}/h")  # fmt: skip
                else:  # LSTM, gates i, o, f, c
                    s = popops.add(graph, xt, hr, prog, f"{sp}/sum")
                    si, so, sf, sc = (gate(k, s) for k in range(4))
                    if pd is not None:
                        pi, po, pf = (pd.slice(k * hidden, (k + 1) * hidden, 0) for k in range(3))
                        si = popops.add(graph, si, popops.mul(graph, c, pi, prog, f"{sp}/pi"),
                                        prog, f"{sp}/iPeep")  # fmt: skip
                        sf = popops.add(graph, sf, popops.mul(graph, c, pf, prog, f"{sp}/pf"),
                                        prog, f"{sp}/fPeep")  # fmt: skip
                    i_g = f(0, si, "i")
                    f_g = f(0, sf, "f")
                    c_g = f(1, sc, "c")
                    c = popops.add(graph, popops.mul(graph, f_g, c, prog, f"{sp}/fC"),
                                   popops.mul(graph, i_g, c_g, prog, f"{sp}/iC"), prog,
                                   f"{sp}/cell")  # fmt: skip
                    if pd is not None:
                        so = popops.add(graph, so, popops.mul(graph, c, po, prog, f"{sp}/po"),
                                        prog, f"{sp}/oPeep")  # fmt: skip
                    o_g = f(0, so, "o")
                    kind, alpha, beta = act[2]
                    h = popops.mul(graph, o_g, _act(graph, kind, alpha, beta, c, prog,
                                   f"{sp}/hAct"), prog, f"{sp}/h")  # fmt: skip
                if lens is not None:  # past a sequence's end: keep the state, output 0
                    live = popops.gt(graph, lens, t, prog, f"{sp}/live").expand([1])
                    live = live.broadcast(hidden, 1)
                    h = popops.select(graph, h, h_prev, live, prog, f"{sp}/hKeep")
                    if c is not None:
                        c = popops.select(graph, c, c_prev, live, prog, f"{sp}/cKeep")
                    outs[t] = popops.select(graph, h, 0.0, live, prog, f"{sp}/y")
                else:
                    outs[t] = h
            ys.append(concat([o.expand([0]) for o in outs], 0))  # [seq, batch, hidden]
            hs.append(h)
            cs.append(c)
        y = concat([v.expand([1]) for v in ys], 1)  # [seq, dirs, batch, hidden]
        y_h = concat([v.expand([0]) for v in hs], 0)  # [dirs, batch, hidden]
        y_c = concat([v.expand([0]) for v in cs], 0) if op == "LSTM" else None
        if layout:
            y = y.dimShuffle([2, 0, 1, 3])
            y_h = y_h.dimShuffle([1, 0, 2])
            y_c = y_c.dimShuffle([1, 0, 2]) if y_c is not None else None
        return [y, y_h] + ([y_c] if op == "LSTM" else [])

    return lower


for _op in ("RNN", "GRU", "LSTM"):
    register(_op, since=7)(_recurrent(_op))

__all__: list[str] = []
