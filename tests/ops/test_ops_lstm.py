"""ops.lstm (one layer, uni- and bidirectional) against a float64 step-by-step reference:
batch-first and time-first layouts, initial states, variable lengths, every float dtype; and
its typed errors."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err
from signal_references import lstm_ref

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import recurrent

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
DTYPES = list(TOL)
Rand = Callable[..., np.ndarray]


def weights(rand: Rand, inputs: int, hidden: int, dt: object) -> list[np.ndarray]:
    """w_ih, w_hh, b_ih, b_hh at PyTorch's init scale (1/sqrt(H)), so the gates do not saturate."""
    scale = 1 / np.sqrt(hidden)
    shapes = [(4 * hidden, inputs), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)]
    return [(rand(s) * scale).astype(dt) for s in shapes]


def expected(
    x: np.ndarray,
    fw: list[np.ndarray],
    bw: list[np.ndarray] | None,
    h0: np.ndarray | None,
    c0: np.ndarray | None,
    lengths: list[int] | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    ys, hs, cs = [], [], []
    for d, w in enumerate([fw] if bw is None else [fw, bw]):
        y, h, cell = lstm_ref(
            x, *w, None if h0 is None else h0[d], None if c0 is None else c0[d], d == 1, lengths
        )
        ys.append(y)
        hs.append(h)
        cs.append(cell)
    return np.concatenate(ys, -1), np.stack(hs), np.stack(cs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
def test_lstm(rand: Rand, dtype: str, bidirectional: bool, batch_first: bool) -> None:
    dt = gp.dtypes.normalize(dtype)
    batch, steps, inputs, hidden = 3, 7, 5, 6
    x = rand((batch, steps, inputs)).astype(dt)
    fw = weights(rand, inputs, hidden, dt)
    bw = weights(rand, inputs, hidden, dt) if bidirectional else None
    d = 2 if bidirectional else 1
    h0, c0 = rand((d, batch, hidden)).astype(dt), rand((d, batch, hidden)).astype(dt)
    reverse = {}
    if bw is not None:
        reverse = dict(zip(("w_ih_reverse", "w_hh_reverse", "b_ih_reverse", "b_hh_reverse"),
                           map(gp.from_numpy, bw), strict=True))  # fmt: skip
    xin = x if batch_first else x.transpose(1, 0, 2).copy()
    y, (h_n, c_n) = ops.lstm(
        gp.from_numpy(xin), *map(gp.from_numpy, fw), h0=gp.from_numpy(h0), c0=gp.from_numpy(c0),
        batch_first=batch_first, **reverse,
    )  # fmt: skip
    want_y, want_h, want_c = expected(x, fw, bw, h0, c0, None)
    got_y = y.to_numpy() if batch_first else y.to_numpy().transpose(1, 0, 2)
    assert y.dtype == dt and h_n.shape == (d, batch, hidden) and c_n.shape == (d, batch, hidden)
    assert rel_err(got_y, want_y) < TOL[dtype]
    assert rel_err(h_n.to_numpy(), want_h) < TOL[dtype]
    assert rel_err(c_n.to_numpy(), want_c) < TOL[dtype]


@pytest.mark.parametrize("on_device", [None, "int32", "int64"])
@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_lengths_and_zero_state(
    rand: Rand, bidirectional: bool, on_device: str | None
) -> None:
    """Host lengths, and device ones (as a CUDA graph's input buffer holds them)."""
    batch, steps, inputs, hidden = 4, 9, 3, 5
    x = rand((batch, steps, inputs))
    fw = weights(rand, inputs, hidden, np.float32)
    bw = weights(rand, inputs, hidden, np.float32) if bidirectional else None
    lengths = [9, 4, 1, 7]
    given = lengths if on_device is None else gp.from_numpy(np.array(lengths, on_device))
    reverse = {}
    if bw is not None:
        reverse = {"w_ih_reverse": gp.from_numpy(bw[0]), "w_hh_reverse": gp.from_numpy(bw[1]),
                   "b_hh_reverse": gp.from_numpy(bw[3])}  # fmt: skip
        bw = [bw[0], bw[1], None, bw[3]]  # type: ignore[list-item]
    fw_biasless = [fw[0], fw[1], fw[2], None]
    y, (h_n, c_n) = ops.lstm(
        gp.from_numpy(x), gp.from_numpy(fw[0]), gp.from_numpy(fw[1]), gp.from_numpy(fw[2]),
        lengths=given, **reverse,
    )  # fmt: skip
    want_y, want_h, want_c = expected(x, fw_biasless, bw, None, None, lengths)  # type: ignore[arg-type]
    assert rel_err(y.to_numpy(), want_y) < 1e-5
    assert rel_err(h_n.to_numpy(), want_h) < 1e-5
    assert rel_err(c_n.to_numpy(), want_c) < 1e-5
    assert not y.to_numpy()[2, 1:].any()  # past the end of row 2: zeros


def test_lstm_errors(rand: Rand) -> None:
    x = gp.from_numpy(rand((2, 5, 3)))
    w_ih, w_hh = gp.from_numpy(rand((16, 3))), gp.from_numpy(rand((16, 4)))
    with pytest.raises(ValueError, match=r"w_hh must be \[4\*H, H\]"):
        ops.lstm(x, w_ih, gp.from_numpy(rand((12, 4))))
    with pytest.raises(ValueError, match="w_ih must have shape"):
        ops.lstm(x, gp.from_numpy(rand((16, 2))), w_hh)
    with pytest.raises(ValueError, match="b_ih must have shape"):
        ops.lstm(x, w_ih, w_hh, gp.from_numpy(rand((15,))))
    with pytest.raises(ValueError, match="needs both"):
        ops.lstm(x, w_ih, w_hh, w_ih_reverse=w_ih)
    with pytest.raises(ValueError, match="h0 must have shape"):
        ops.lstm(x, w_ih, w_hh, h0=gp.from_numpy(rand((2, 2, 4))))
    with pytest.raises(ValueError, match="every length"):
        ops.lstm(x, w_ih, w_hh, lengths=[5, 6])
    with pytest.raises(ValueError, match="2 integers"):
        ops.lstm(x, w_ih, w_hh, lengths=[5])
    with pytest.raises(TypeError, match="integer GPUArray"):
        ops.lstm(x, w_ih, w_hh, lengths=gp.from_numpy(np.array([5.0, 1.0], np.float32)))
    with pytest.raises(TypeError, match="integer GPUArray"):
        ops.lstm(x, w_ih, w_hh, lengths=gp.from_numpy(np.array([5, 1, 2], np.int32)))
    with pytest.raises(TypeError, match="dtype"):
        ops.lstm(x, w_ih, gp.from_numpy(rand((16, 4), np.float16)))
    with pytest.raises(ValueError, match="no sequence"):
        ops.lstm(gp.from_numpy(rand((2, 0, 3))), w_ih, w_hh)
    with pytest.raises(ValueError, match="must be 3-D"):
        ops.lstm(gp.from_numpy(rand((5, 3))), w_ih, w_hh)


LIMITS = recurrent.SequenceLimits(
    cluster=8, min_hidden=8, max_hidden=256, max_rows=16, rows_per_pass=4, lanes=16
)


@pytest.mark.parametrize(
    "hidden,sm,choice,expected",
    [
        (256, (9, 0), "auto", True),  # Kokoro's LSTMs on Hopper
        (8, (10, 0), "auto", True),
        (256, (9, 0), "step", False),  # the knob pins the per-step kernel
        (256, (8, 9), "auto", False),  # no thread-block clusters before SM 9.0
        (257, (9, 0), "auto", False),  # w_hh no longer fits the cluster's registers
        (7, (9, 0), "auto", False),  # fewer hidden units than blocks in a cluster
        (64, None, "auto", False),
    ],
)
def test_lstm_sequence_kernel_choice(
    hidden: int, sm: tuple[int, int] | None, choice: str, expected: bool
) -> None:
    assert recurrent.uses_sequence_kernel(hidden, sm, choice, LIMITS) is expected


@pytest.mark.parametrize(
    "batch,dirs,sm_count,rows",
    [
        (1, 2, 132, 1),  # one row per cluster while clusters are free
        (7, 2, 132, 1),  # 132 SMs: 7 clusters of 8 per direction run at once
        (8, 2, 132, 4),  # two rows would cost a four-row pass anyway
        (16, 2, 132, 4),  # Kokoro's batch 16: 4 slices per direction
        (16, 1, 132, 4),
        (14, 1, 132, 1),
        (200, 2, 132, 16),  # capped: more slices than run at once
        (3, 2, 16, 4),  # a small GPU: one cluster per direction
    ],
)
def test_lstm_slice_rows(batch: int, dirs: int, sm_count: int, rows: int) -> None:
    assert recurrent.slice_rows(batch, dirs, sm_count, LIMITS) == rows


def test_lstm_sequence_limits_are_the_kernels() -> None:
    assert recurrent.SequenceLimits.from_kernels() == LIMITS
