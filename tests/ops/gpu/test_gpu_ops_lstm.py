"""ops.lstm on the GPU against float64 NumPy and torch.nn.LSTM, through both kernels: the
sequence kernel (one launch per call, SM 9.0+, hidden 8..256) and the step kernel (one launch
per time step, the fallback). Kokoro's shapes (512/640 -> 2 x 256, bidirectional, batch first,
T = 150, batch 1 and 16 with per-row lengths as batched synthesis pads), batches split over
several clusters, odd sizes, initial states, time-first layout, rows of length 0."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from ops_references import rel_err
from signal_references import lstm_ref, torch_full_fp32

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config, recurrent

pytestmark = pytest.mark.gpu

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
#: Against cuDNN: in 16-bit types its own rounding (state kept in the dtype between steps) adds
#: to ours, so the two may sit on opposite sides of the float64 answer.
TORCH_TOL = {"float32": 1e-5, "float16": 6e-3, "bfloat16": 2e-2}
DTYPES = list(TOL)
Rand = Callable[..., np.ndarray]
NAMES = ("w_ih", "w_hh", "b_ih", "b_hh")
KERNELS = ("auto", "step")


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def has_clusters() -> bool:
    sm = gp.get_device_info(gp.get_device())["sm"]
    return sm is not None and tuple(sm) >= (9, 0)


@pytest.fixture(params=KERNELS)
def kernel(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test once per LSTM kernel choice (``auto`` is the sequence kernel where it fits)."""
    with config.override(lstm_kernel=request.param):
        yield request.param


def weights(rand: Rand, inputs: int, hidden: int, dt: object) -> list[np.ndarray]:
    scale = 1 / np.sqrt(hidden)
    shapes = [(4 * hidden, inputs), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)]
    return [(rand(s) * scale).astype(dt) for s in shapes]


def run_ours(
    x: np.ndarray,
    fw: list[np.ndarray],
    bw: list[np.ndarray] | None,
    h0: np.ndarray | None = None,
    c0: np.ndarray | None = None,
    lengths: list[int] | None = None,
    batch_first: bool = True,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ops.lstm on ``x`` [B, T, I] (given time first when ``batch_first`` is False)."""
    extra = {f"{n}_reverse": gp.from_numpy(a) for n, a in zip(NAMES, bw or [], strict=False)}
    xin = x if batch_first else x.transpose(1, 0, 2).copy()
    states = {k: gp.from_numpy(v) for k, v in (("h0", h0), ("c0", c0)) if v is not None}
    y, (h_n, c_n) = ops.lstm(
        gp.from_numpy(xin), *map(gp.from_numpy, fw), lengths=lengths, batch_first=batch_first,
        **states, **extra,
    )  # fmt: skip
    got = y.to_numpy() if batch_first else y.to_numpy().transpose(1, 0, 2)
    return got, h_n.to_numpy(), c_n.to_numpy()


def run_numpy(
    x: np.ndarray,
    fw: list[np.ndarray],
    bw: list[np.ndarray] | None,
    h0: np.ndarray | None = None,
    c0: np.ndarray | None = None,
    lengths: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    refs = []
    for d, w in enumerate([fw] if bw is None else [fw, bw]):
        states = (None if h0 is None else h0[d], None if c0 is None else c0[d])
        refs.append(lstm_ref(x, *w, *states, d == 1, lengths))
    return (
        np.concatenate([r[0] for r in refs], -1),
        np.stack([r[1] for r in refs]),
        np.stack([r[2] for r in refs]),
    )


def run_torch(
    torch: Any,
    x: np.ndarray,
    fw: list[np.ndarray],
    bw: list[np.ndarray] | None,
    dtype: str,
    h0: np.ndarray | None = None,
    c0: np.ndarray | None = None,
    lengths: list[int] | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch.nn.LSTM (cuDNN, TF32 off) on the same data; packed sequences for ``lengths``."""
    tdt = getattr(torch, dtype)
    inputs, hidden = fw[0].shape[1], fw[1].shape[1]
    model = torch.nn.LSTM(inputs, hidden, batch_first=True, bidirectional=bw is not None)
    model = model.cuda().to(tdt)

    def dev(a: np.ndarray) -> Any:
        return torch.from_numpy(a.astype(np.float32)).cuda().to(tdt)

    with torch.no_grad(), torch_full_fp32(torch):
        for suffix, ws in (("", fw), ("_reverse", bw)):
            for name, a in zip(("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"),
                               ws or [], strict=False):  # fmt: skip
                getattr(model, name + suffix).copy_(dev(a))
        state = None if h0 is None else (dev(h0), dev(c0 if c0 is not None else 0 * h0))
        tx = dev(x)
        if lengths is None:
            ty, (th, tc) = model(tx, state)
        else:
            pack = torch.nn.utils.rnn
            packed = pack.pack_padded_sequence(tx, torch.tensor(lengths), batch_first=True,
                                               enforce_sorted=False)  # fmt: skip
            out, (th, tc) = model(packed, state)
            ty, _ = pack.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
    return tuple(a.float().cpu().numpy() for a in (ty, th, tc))  # type: ignore[return-value]


def check(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...], tol: float, who: str) -> None:
    for name, g, w in zip(("y", "h_n", "c_n"), got, want, strict=True):
        err = rel_err(g, w)
        assert err < tol, f"{name} vs {who}: relative error {err:.2e} >= {tol:.0e}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(
    "batch,steps,inputs,hidden,bidirectional",
    [(1, 67, 512, 256, True), (2, 33, 640, 256, True), (37, 9, 64, 48, False), (3, 5, 7, 13, True)],
)
def test_lstm_gpu(
    rand: Rand,
    kernel: str,
    dtype: str,
    batch: int,
    steps: int,
    inputs: int,
    hidden: int,
    bidirectional: bool,
) -> None:
    dt = gp.dtypes.normalize(dtype)
    x = rand((batch, steps, inputs)).astype(dt)
    fw = weights(rand, inputs, hidden, dt)
    bw = weights(rand, inputs, hidden, dt) if bidirectional else None
    got = run_ours(x, fw, bw)
    check(got, run_numpy(x, fw, bw), TOL[dtype], "float64 NumPy")
    torch = torch_or_none()
    if torch is not None:
        check(got, run_torch(torch, x, fw, bw, dtype), TORCH_TOL[dtype], "torch.nn.LSTM")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("batch,inputs", [(1, 512), (16, 640)])
def test_lstm_gpu_kokoro_shapes(
    rand: Rand, kernel: str, dtype: str, batch: int, inputs: int
) -> None:
    """Kokoro's BiLSTMs at 150 phonemes; batch 16 padded to the longest with per-row lengths."""
    dt = gp.dtypes.normalize(dtype)
    steps, hidden = 150, 256
    x = rand((batch, steps, inputs)).astype(dt)
    fw, bw = weights(rand, inputs, hidden, dt), weights(rand, inputs, hidden, dt)
    lengths = None if batch == 1 else [150, *np.random.default_rng().integers(1, 151, batch - 1)]
    lengths = None if lengths is None else [int(n) for n in lengths]
    got = run_ours(x, fw, bw, lengths=lengths)
    check(got, run_numpy(x, fw, bw, lengths=lengths), TOL[dtype], "float64 NumPy")
    torch = torch_or_none()
    if torch is not None:
        want = run_torch(torch, x, fw, bw, dtype, lengths=lengths)
        check(got, want, TORCH_TOL[dtype], "torch.nn.LSTM")
    if lengths is not None:
        for b, n in enumerate(lengths):
            assert not got[0][b, n:].any()  # past each row's end: zeros


def test_lstm_gpu_lengths_and_time_first(rand: Rand, kernel: str) -> None:
    batch, steps, inputs, hidden = 5, 21, 32, 24
    x = rand((batch, steps, inputs))
    fw, bw = weights(rand, inputs, hidden, np.float32), weights(rand, inputs, hidden, np.float32)
    h0, c0 = rand((2, batch, hidden)), rand((2, batch, hidden))
    lengths = [21, 3, 17, 1, 10]
    got = run_ours(x, fw, bw, h0, c0, lengths, batch_first=False)
    check(got, run_numpy(x, fw, bw, h0, c0, lengths), 1e-5, "float64 NumPy")
    torch = torch_or_none()
    if torch is not None:
        check(got, run_torch(torch, x, fw, bw, "float32", h0, c0, lengths), 1e-5, "torch")


def test_lstm_gpu_device_lengths_equal_host_lengths(rand: Rand, kernel: str) -> None:
    """Lengths given as a device array (a CUDA graph's input) give the host lengths' result."""
    batch, steps, inputs, hidden = 3, 19, 40, 64
    x = rand((batch, steps, inputs))
    fw, bw = weights(rand, inputs, hidden, np.float32), weights(rand, inputs, hidden, np.float32)
    lengths = [19, 7, 12]
    want = run_ours(x, fw, bw, lengths=lengths)
    for dtype in (np.int32, np.int64):
        device = gp.from_numpy(np.array(lengths, dtype))
        got = run_ours(x, fw, bw, lengths=device)  # type: ignore[arg-type]
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    check(want, run_numpy(x, fw, bw, None, None, lengths), 1e-5, "float64 NumPy")


@pytest.mark.parametrize("dtype", DTYPES)
def test_lstm_gpu_zero_lengths_keep_the_initial_state(rand: Rand, kernel: str, dtype: str) -> None:
    """A row of length 0 outputs zeros and returns h0, c0 (PyTorch refuses such rows)."""
    dt = gp.dtypes.normalize(dtype)
    batch, steps, inputs, hidden = 4, 12, 20, 40
    x = rand((batch, steps, inputs)).astype(dt)
    fw, bw = weights(rand, inputs, hidden, dt), weights(rand, inputs, hidden, dt)
    h0, c0 = rand((2, batch, hidden)).astype(dt), rand((2, batch, hidden)).astype(dt)
    lengths = [0, 12, 0, 5]
    got = run_ours(x, fw, bw, h0, c0, lengths)
    check(got, run_numpy(x, fw, bw, h0, c0, lengths), TOL[dtype], "float64 NumPy")
    assert not got[0][0].any() and not got[0][2].any()
    assert np.array_equal(got[1][:, 0].astype(np.float32), h0[:, 0].astype(np.float32))


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 16])
@pytest.mark.parametrize("hidden", [8, 37, 200, 256])
def test_lstm_gpu_sequence_kernel_slices(rand: Rand, rows: int, hidden: int) -> None:
    """The sequence kernel with every batch slicing its passes meet: one row, part of a
    four-row pass, a pass and a single row, a full cluster of 16 rows; hidden sizes that
    split unevenly over the cluster's 8 blocks."""
    if not has_clusters():
        pytest.skip("the sequence kernel needs SM 9.0 (thread-block clusters)")
    batch, steps, inputs = 19, 23, 29
    x = rand((batch, steps, inputs))
    fw, bw = weights(rand, inputs, hidden, np.float32), weights(rand, inputs, hidden, np.float32)
    h0, c0 = rand((2, batch, hidden)), rand((2, batch, hidden))
    lengths = [int(n) for n in np.random.default_rng().integers(1, steps + 1, batch)]
    s = recurrent.LstmShape(batch, steps, inputs, hidden, 2, True)
    plan = recurrent.sequence_plan(
        s, np.dtype(np.float32), rows, recurrent.SequenceLimits.from_kernels()
    )
    dirs = [tuple(map(gp.from_numpy, w)) for w in (fw, bw)]
    y, h_n, c_n = plan(
        gp.from_numpy(x), dirs, gp.from_numpy(h0), gp.from_numpy(c0), np.asarray(lengths, np.int32)
    )
    got = (y.to_numpy(), h_n.to_numpy(), c_n.to_numpy())
    check(got, run_numpy(x, fw, bw, h0, c0, lengths), 1e-5, "float64 NumPy")


@pytest.mark.parametrize(
    "hidden,sequence", [(256, True), (8, True), (7, False), (257, False), (300, False)]
)
def test_lstm_gpu_kernel_choice(rand: Rand, hidden: int, sequence: bool) -> None:
    """auto takes the sequence kernel on SM 9.0+ for hidden 8..256 and the step kernel
    otherwise; both give the float64 answer (hidden above 256 runs the per-step fallback)."""
    batch, steps, inputs = 3, 11, 17
    x = rand((batch, steps, inputs))
    fw, bw = weights(rand, inputs, hidden, np.float32), weights(rand, inputs, hidden, np.float32)
    got = run_ours(x, fw, bw)
    check(got, run_numpy(x, fw, bw), 1e-5, "float64 NumPy")
    s = recurrent.LstmShape(batch, steps, inputs, hidden, 2, True)
    plan = recurrent.PLANS.get(s, np.dtype(np.float32), gp.get_device())
    expect = recurrent.SequenceLstmPlan if sequence and has_clusters() else recurrent.LstmPlan
    assert type(plan) is expect


def test_lstm_gpu_kernels_agree(rand: Rand) -> None:
    """The two kernels differ only in the order of float32 sums: Kokoro's shape agrees to a few
    float32 roundings over 150 steps."""
    batch, steps, inputs, hidden = 4, 150, 640, 256
    x = rand((batch, steps, inputs))
    fw, bw = weights(rand, inputs, hidden, np.float32), weights(rand, inputs, hidden, np.float32)
    lengths = [150, 97, 150, 3]
    with config.override(lstm_kernel="step"):
        step = run_ours(x, fw, bw, lengths=lengths)
    with config.override(lstm_kernel="auto"):
        auto = run_ours(x, fw, bw, lengths=lengths)
    check(auto, step, 5e-6, "the step kernel")
