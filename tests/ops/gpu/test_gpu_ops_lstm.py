"""ops.lstm on the GPU (input matmul + one fused step kernel per time step, both directions in
one launch) against float64 NumPy and torch.nn.LSTM: Kokoro's shapes (512 -> 2 x 256,
bidirectional, batch first), batches above the kernel's 32-row chunk, variable lengths."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from ops_references import rel_err
from signal_references import lstm_ref, torch_full_fp32

import pygpukit as gp
from pygpukit import ops

pytestmark = pytest.mark.gpu

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)
Rand = Callable[..., np.ndarray]
NAMES = ("w_ih", "w_hh", "b_ih", "b_hh")


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def weights(rand: Rand, inputs: int, hidden: int, dt: object) -> list[np.ndarray]:
    scale = 1 / np.sqrt(hidden)
    shapes = [(4 * hidden, inputs), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)]
    return [(rand(s) * scale).astype(dt) for s in shapes]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "batch,steps,inputs,hidden,bidirectional",
    [(1, 67, 512, 256, True), (2, 33, 640, 256, True), (37, 9, 64, 48, False), (3, 5, 7, 13, True)],
)
def test_lstm_gpu(
    rand: Rand, dtype: str, batch: int, steps: int, inputs: int, hidden: int, bidirectional: bool
) -> None:
    dt = gp.dtypes.normalize(dtype)
    x = rand((batch, steps, inputs)).astype(dt)
    fw = weights(rand, inputs, hidden, dt)
    bw = weights(rand, inputs, hidden, dt) if bidirectional else None
    extra = {f"{n}_reverse": gp.from_numpy(a) for n, a in zip(NAMES, bw or [], strict=False)}
    y, (h_n, c_n) = ops.lstm(gp.from_numpy(x), *map(gp.from_numpy, fw), **extra)
    refs = [lstm_ref(x, *fw)] + ([lstm_ref(x, *bw, reverse=True)] if bw is not None else [])
    want_y = np.concatenate([r[0] for r in refs], -1)
    assert rel_err(y.to_numpy(), want_y) < TOL[dtype]
    assert rel_err(h_n.to_numpy(), np.stack([r[1] for r in refs])) < TOL[dtype]
    assert rel_err(c_n.to_numpy(), np.stack([r[2] for r in refs])) < TOL[dtype]
    torch = torch_or_none()
    if torch is None:
        return
    model = torch.nn.LSTM(inputs, hidden, batch_first=True, bidirectional=bidirectional)
    model = model.cuda().to(getattr(torch, dtype))
    with torch.no_grad(), torch_full_fp32(torch):
        for suffix, ws in (("", fw), ("_reverse", bw)):
            if ws is None:
                continue
            for name, a in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"), ws,
                               strict=True):  # fmt: skip
                getattr(model, name + suffix).copy_(torch.from_numpy(a.astype(np.float32)))
        tx = torch.from_numpy(x.astype(np.float32)).cuda().to(getattr(torch, dtype))
        ty, (th, tc) = model(tx)
    assert rel_err(y.to_numpy(), ty.float().cpu().numpy()) < TOL[dtype]
    assert rel_err(h_n.to_numpy(), th.float().cpu().numpy()) < TOL[dtype]
    assert rel_err(c_n.to_numpy(), tc.float().cpu().numpy()) < TOL[dtype]


def test_lstm_gpu_lengths_and_time_first(rand: Rand) -> None:
    batch, steps, inputs, hidden = 5, 21, 32, 24
    x = rand((batch, steps, inputs))
    fw, bw = weights(rand, inputs, hidden, np.float32), weights(rand, inputs, hidden, np.float32)
    h0, c0 = rand((2, batch, hidden)), rand((2, batch, hidden))
    lengths = [21, 3, 17, 1, 10]
    extra = {f"{n}_reverse": gp.from_numpy(a) for n, a in zip(NAMES, bw, strict=True)}
    y, (h_n, c_n) = ops.lstm(
        gp.from_numpy(x.transpose(1, 0, 2).copy()), *map(gp.from_numpy, fw),
        h0=gp.from_numpy(h0), c0=gp.from_numpy(c0), lengths=lengths, batch_first=False, **extra,
    )  # fmt: skip
    refs = [lstm_ref(x, *fw, h0[0], c0[0], False, lengths),
            lstm_ref(x, *bw, h0[1], c0[1], True, lengths)]  # fmt: skip
    want_y = np.concatenate([r[0] for r in refs], -1)
    assert rel_err(y.to_numpy().transpose(1, 0, 2), want_y) < 1e-5
    assert rel_err(h_n.to_numpy(), np.stack([r[1] for r in refs])) < 1e-5
    assert rel_err(c_n.to_numpy(), np.stack([r[2] for r in refs])) < 1e-5
