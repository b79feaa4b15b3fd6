"""layers.Conv1d, ConvTranspose1d and LSTM: the same results as the function ops, plans made
once per input shape, PyTorch state-dict names, typed errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err
from signal_references import conv1d_ref, conv_transpose1d_ref, lstm_ref

import pygpukit as gp
from pygpukit.ops import layers

Rand = Callable[..., np.ndarray]


def test_conv1d_layer(rand: Rand) -> None:
    w, b = rand((6, 2, 5)), rand((6,))
    layer = layers.Conv1d(gp.from_numpy(w), gp.from_numpy(b), padding="same", dilation=2, groups=2)
    for length in (11, 30, 11):
        x = rand((2, 4, length))
        y = layer(gp.from_numpy(x))
        assert rel_err(y.to_numpy(), conv1d_ref(x, w, b, 1, (4, 4), 2, 2)) < 1e-5
    assert len(layer._plans) == 2  # one per (batch, length), reused for the third call
    with pytest.raises(ValueError, match=r"x must be \[B, 4, L\]"):
        layer(gp.from_numpy(rand((2, 3, 11))))
    with pytest.raises(TypeError, match="built for float32"):
        layer(gp.from_numpy(rand((2, 4, 11), np.float16)))


def test_conv_transpose1d_layer(rand: Rand) -> None:
    w, b = rand((4, 3, 4)), rand((3,))
    layer = layers.ConvTranspose1d(gp.from_numpy(w), gp.from_numpy(b), stride=2, padding=1)
    x = rand((1, 4, 9))
    out = gp.empty((1, 3, 18), gp.float32)
    y = layer(gp.from_numpy(x), out=out)
    assert y is out
    assert rel_err(out.to_numpy(), conv_transpose1d_ref(x, w, b, 2, 1)) < 1e-5


def test_lstm_layer_from_state_dict(rand: Rand) -> None:
    inputs, hidden = 5, 4
    names = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"]
    shapes = [(4 * hidden, inputs), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)]
    host = {}
    for suffix in ("", "_reverse"):
        for n, s in zip(names, shapes, strict=True):
            host[f"lstm.{n}{suffix}"] = rand(s) / 2
    layer = layers.LSTM.from_state_dict({k: gp.from_numpy(v) for k, v in host.items()}, "lstm.")
    assert layer.bidirectional and layer.hidden_size == hidden
    x = rand((2, 6, inputs))
    y, (h_n, _) = layer(gp.from_numpy(x))
    fw = [host[f"lstm.{n}"] for n in names]
    bw = [host[f"lstm.{n}_reverse"] for n in names]
    ref_f, ref_b = lstm_ref(x, *fw), lstm_ref(x, *bw, reverse=True)
    assert rel_err(y.to_numpy(), np.concatenate([ref_f[0], ref_b[0]], -1)) < 1e-5
    assert rel_err(h_n.to_numpy(), np.stack([ref_f[1], ref_b[1]])) < 1e-5
    with pytest.raises(KeyError, match="no LSTM weights"):
        layers.LSTM.from_state_dict({}, "missing.")


def test_signal_benchmark_suite_smoke() -> None:
    """The ops_signal suite's rows run and pass their float64 checks."""
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.harness import HarnessConfig, measure
    from pygpukit.benchmark.peers import PyGPUkitLibrary
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.ops.benchmarks import signal as suite

    rng = np.random.default_rng()
    ctx = SuiteContext(PyGPUkitLibrary.backend_name(gp), True, DataCache(rng), rng)
    lib = PyGPUkitLibrary()
    cfg = HarnessConfig(max_reps=2, min_reps=1, budget_s=0.05, warmup_s=0.0, target_rep_ms=0.1)
    cases = list(suite.SUITE.cases(ctx))
    assert {c.op for c in cases} == {
        "conv1d", "conv1d_depthwise", "conv_transpose1d", "lstm_bidirectional",
        "ada_in_leaky_relu",
    }  # fmt: skip
    results = [measure(case, lib, cfg) for case in cases]
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
