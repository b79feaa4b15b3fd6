"""ops_signal: conv1d, conv_transpose1d, LSTM and AdaIN over [B, C, L] signals vs PyTorch.

Shapes are Kokoro-82M's (decoder convolutions at 512 channels, the iSTFTNet x10 upsampling,
the prosody predictor's bidirectional LSTM 640 -> 2 x 256, AdaIN + LeakyReLU) and Whisper's
stem convolution over 30 s of mel frames; ``--sizes`` sets the signal length L (the LSTM's T is
L / 10). dtype bfloat16 on the GPU unless ``--dtypes`` says otherwise (PyTorch's float32
convolutions run on TF32 tensor cores by default, ours in full float32: compare 16-bit types).
Two more LSTM rows have Kokoro's shape as it runs it, whatever ``--sizes`` says: float32 (cuDNN
with TF32 off), T = 150 phonemes, 640 -> 2 x 256, batch 1 and 16.
PyTorch runs ``torch.nn.functional.conv1d`` / ``conv_transpose1d``, ``torch.nn.LSTM`` (cuDNN)
and ``instance_norm`` + the affine + ``leaky_relu`` on the same data. Every output is checked
against the float64 NumPy path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pygpukit.benchmark.case import Case, Skip, Timed
from pygpukit.benchmark.checks import check_close
from pygpukit.benchmark.data import storage_dtype
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

NAME = "ops_signal"
SUPPORTED = ("float32", "float16", "bfloat16")
#: Longer accumulation chains than an elementwise op (K * C_in terms, T recurrent steps).
ACCUMULATION_FACTOR = 4.0


def _ops() -> Any:
    try:
        from pygpukit import ops
    except ImportError as exc:  # pragma: no cover - pygpukit-ops is this module's package
        raise Skip(f"pygpukit.ops is not importable: {exc}") from exc
    return ops


def _reference() -> Any:
    from pygpukit.ops.reference import channels, conv, recurrent

    return conv, recurrent, channels


@dataclass(frozen=True)
class SignalOp:
    """One op at one shape: input shapes, the two spellings, the float64 reference, flops."""

    name: str
    params: dict[str, int | float | str]
    shapes: tuple[tuple[int, ...], ...]  # the inputs, uploaded in order
    pygpukit: Callable[..., Any]  # (*arrays) -> output
    torch: Callable[..., Any]  # (torch, *arrays) -> output
    reference: Callable[..., np.ndarray]  # (*float64 arrays) -> output
    flops: int


def _conv(
    b: int,
    cin: int,
    cout: int,
    k: int,
    length: int,
    groups: int = 1,
    pad: int = 1,
    dilation: int = 1,
    stride: int = 1,
) -> SignalOp:
    def ref(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return _reference()[0].conv1d(x, w, bias, stride, pad, pad, dilation, groups)

    options = {"padding": pad, "groups": groups, "dilation": dilation, "stride": stride}
    out_length = (length + 2 * pad - dilation * (k - 1) - 1) // stride + 1
    params: dict[str, int | float | str] = {
        "shape": f"{b}x{cin}x{length}", "c_out": cout, "k": k, "groups": groups,
    }  # fmt: skip
    if dilation != 1:
        params["dilation"] = dilation
    if stride != 1:
        params["stride"] = stride
    return SignalOp(
        "conv1d" if groups == 1 else "conv1d_depthwise",
        params,
        ((b, cin, length), (cout, cin // groups, k), (cout,)),
        lambda x, w, bias: _ops().conv1d(x, w, bias, **options),
        lambda t, x, w, bias: t.nn.functional.conv1d(x, w, bias, **options),
        ref,
        2 * b * cout * out_length * (cin // groups) * k,
    )


def _upsample(b: int, cin: int, cout: int, length: int, stride: int) -> SignalOp:
    k, pad = 2 * stride, stride // 2

    def ref(x: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return _reference()[0].conv_transpose1d(x, w, bias, stride, pad, 0, 1, 1)

    return SignalOp(
        "conv_transpose1d",
        {"shape": f"{b}x{cin}x{length}", "c_out": cout, "k": k, "stride": stride},
        ((b, cin, length), (cin, cout, k), (cout,)),
        lambda x, w, bias: _ops().conv_transpose1d(x, w, bias, stride=stride, padding=pad),
        lambda t, x, w, bias: t.nn.functional.conv_transpose1d(
            x, w, bias, stride=stride, padding=pad
        ),
        ref,
        2 * b * cin * cout * k * length,
    )


def _lstm(b: int, steps: int, inputs: int, hidden: int) -> SignalOp:
    shapes = ((b, steps, inputs),) + 2 * ((4 * hidden, inputs), (4 * hidden, hidden), (4 * hidden,))

    def ours(x: Any, *w: Any) -> Any:
        return _ops().lstm(x, *w[:3], w_ih_reverse=w[3], w_hh_reverse=w[4], b_ih_reverse=w[5])[0]

    def theirs(t: Any, x: Any, *w: Any) -> Any:
        model = _torch_lstm(t, x, w, inputs, hidden)
        if x.dtype == t.float32:  # cuDNN's default TF32 would miss float32's accuracy
            with t.backends.cudnn.flags(enabled=True, allow_tf32=False):
                return model(x)[0]
        return model(x)[0]

    def ref(x: np.ndarray, *w: np.ndarray) -> np.ndarray:
        rec = _reference()[1]
        zeros = np.zeros((b, hidden))
        fw = rec.lstm_direction(x, w[0], w[1], w[2], None, zeros, zeros, None, False)[0]
        bw = rec.lstm_direction(x, w[3], w[4], w[5], None, zeros, zeros, None, True)[0]
        return np.concatenate([fw, bw], axis=-1)

    return SignalOp(
        "lstm_bidirectional",
        {"shape": f"{b}x{steps}x{inputs}", "hidden": hidden},
        shapes,
        ours,
        theirs,
        ref,
        2 * 2 * b * steps * 4 * hidden * (inputs + hidden),
    )


#: id of a weight set's first tensor -> (that tensor, its cuDNN LSTM). The tensor is kept so its
#: id cannot be reused by a later case's weights (of another dtype) while the entry lives.
_TORCH_LSTMS: dict[int, tuple[Any, Any]] = {}


def _torch_lstm(t: Any, x: Any, w: tuple[Any, ...], inputs: int, hidden: int) -> Any:
    """A cuDNN LSTM holding ``w`` (made once per weight set, outside the timed loop's cost)."""
    entry = _TORCH_LSTMS.get(id(w[0]))
    model = entry[1] if entry is not None and entry[0] is w[0] else None
    if model is None:
        model = t.nn.LSTM(inputs, hidden, batch_first=True, bidirectional=True)
        model = model.to(device=x.device, dtype=x.dtype)
        with t.no_grad():
            names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0")
            for i, suffix in enumerate(("", "_reverse")):
                for j, n in enumerate(names):
                    getattr(model, n + suffix).copy_(w[3 * i + j])
                getattr(model, "bias_hh_l0" + suffix).zero_()
        model.flatten_parameters()
        _TORCH_LSTMS[id(w[0])] = (w[0], model)
    return model


def _ada_in(b: int, channels: int, length: int) -> SignalOp:
    def ours(x: Any, h: Any, w: Any, bias: Any) -> Any:
        return _ops().ada_in(
            x, h[:, :channels], h[:, channels:], weight=w, bias=bias, activation="leaky_relu"
        )

    def theirs(t: Any, x: Any, h: Any, w: Any, bias: Any) -> Any:
        n = t.nn.functional.instance_norm(x, weight=w, bias=bias, eps=1e-5)
        gamma, beta = h[:, :channels, None], h[:, channels:, None]
        return t.nn.functional.leaky_relu((1 + gamma) * n + beta, 0.2)

    def ref(x: np.ndarray, h: np.ndarray, w: np.ndarray, bias: np.ndarray) -> np.ndarray:
        ch = _reference()[2]
        return ch.instance_norm(
            x, w, bias, h[:, :channels], h[:, channels:], 1e-5, "leaky_relu", 0.2, None
        )

    return SignalOp(
        "ada_in_leaky_relu",
        {"shape": f"{b}x{channels}x{length}"},
        ((b, channels, length), (b, 2 * channels), (channels,), (channels,)),
        ours,
        theirs,
        ref,
        0,
    )


def signal_case(ctx: SuiteContext, op: SignalOp, dtype: str) -> Case:
    """``op`` in ``dtype`` on PyGPUkit and PyTorch, checked against float64 NumPy."""
    params = {**op.params, "dtype": dtype}
    if dtype not in SUPPORTED:
        return Case(NAME, op.name, params, {}, skip=f"{dtype} is not a float dtype of {op.name}")

    def setup(lib: Library, copies: int) -> Timed:
        scale = [1.0] + [1 / np.sqrt(max(s[-1], 1)) for s in op.shapes[1:]]
        hosts = [
            (ctx.data.get(s, "float32", 200 + i) * f).astype(storage_dtype(dtype))
            for i, (s, f) in enumerate(zip(op.shapes, scale, strict=True))
        ]
        arrays = [lib.upload(h, dtype) for h in hosts]
        stored = [lib.download(a).astype(np.float64) for a in arrays]
        ref = op.reference(*stored)
        if lib.name == "torch":
            torch = lib.module

            def run(i: int) -> Any:
                return op.torch(torch, *arrays)

        else:

            def run(i: int) -> Any:
                return op.pygpukit(*arrays)

        def check(out: Any) -> float:
            got = lib.download(out).astype(np.float64)
            return check_close(got, ref, dtype, f"{op.name} ({lib.name})", ACCUMULATION_FACTOR)

        return Timed(run=run, check=check)

    return Case(
        NAME,
        op.name,
        params,
        dict.fromkeys(("pygpukit", "torch"), setup),
        flops=op.flops,
        requires=("from_numpy",),
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """Kokoro's and Whisper's convolutions, the x10 upsampling, the BiLSTM and AdaIN."""
    for length in ctx.pick_sizes(gpu=[2000], gpu_quick=[600], cpu=[64], cpu_quick=[32]):
        wide = 512 if ctx.on_gpu else 32
        ops = (
            _conv(1, wide, wide, 3, length),
            _conv(1, 80 if ctx.on_gpu else 8, 384 if ctx.on_gpu else 16, 3, length),
            _conv(1, wide, wide, 7, length, groups=wide, pad=3),
            _upsample(1, wide, wide // 2, max(1, length // 10), 10),
            _lstm(1, max(2, length // 10), 640 if ctx.on_gpu else 24, 256 if ctx.on_gpu else 8),
            _ada_in(1, wide, length),
        )
        for dtype in ctx.pick_dtypes(gpu=["bfloat16"], cpu=["float32"]):
            for op in ops:
                yield signal_case(ctx, op, dtype)
    # Kokoro's BiLSTMs as it runs them (float32, 150 phonemes, 640 -> 2 x 256), one utterance
    # and a batch of 16; T is fixed, not derived from --sizes.
    steps, inputs, hidden = (150, 640, 256) if ctx.on_gpu else (15, 24, 8)
    for dtype in ctx.pick_dtypes(gpu=["float32"], cpu=["float32"]):
        for batch in (1, 16):
            yield signal_case(ctx, _lstm(batch, steps, inputs, hidden), dtype)
    yield from _generator_cases(ctx)


def _generator_cases(ctx: SuiteContext) -> Iterator[Case]:
    """The iSTFTNet generator's convolutions at batch 1 (the largest items of a Kokoro profile).

    ``length`` is the first stage's (x10 upsampled frames: 9120 for an 11 s utterance); the
    second runs at 6x that length with half the channels.
    """
    for length in ctx.pick_sizes(gpu=[9120], gpu_quick=[1824], cpu=[60], cpu_quick=[30]):
        wide = 256 if ctx.on_gpu else 16
        half = wide // 2
        ops = (
            _conv(1, wide, wide, 11, length, pad=25, dilation=5),  # resblock k11, dilation 5
            _conv(1, wide, wide, 3, length),  # resblock k3
            _conv(1, half, half, 7, 6 * length, pad=9, dilation=3),  # stage 2, k7 dilation 3
            _conv(1, 22, wide, 12, 6 * length, pad=3, stride=6),  # the source's noise conv
            _upsample(1, wide, half, length, 6),  # the x6 upsampling
        )
        for dtype in ctx.pick_dtypes(gpu=["bfloat16"], cpu=["float32"]):
            for op in ops:
                yield signal_case(ctx, op, dtype)


SUITE = Suite(
    NAME, "conv1d, conv_transpose1d, BiLSTM and AdaIN (Kokoro, Whisper) vs PyTorch", cases
)
