"""Each op Kokoro runs, float32 on this backend against float64 NumPy, at Kokoro-like shapes.

A float32 op should land near float32 rounding (relative L2 about 1e-7 to 1e-6 here); one that
computes in TF32 shows about 1e-4 to 1e-3, and one that takes a 16-bit path 1e-3 to 1e-2. Each
line prints the relative L2 error and the largest error over the largest reference value, and
flags anything above ``--limit`` (default 1e-5). Fresh random inputs per run (``--seed``).
Used by ``tools/tts_stage_check.py --ops``; run alone from the repository root::

    python tools/tts_op_precision.py
"""

from __future__ import annotations

import argparse
import math
import pathlib
import sys
from collections.abc import Callable

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "tts"))

import kokoro_numpy_reference as ref

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config as ops_config
from pygpukit.ops.audio.stft import istft, stft
from pygpukit.ops.linear import linear
from pygpukit.tts._source import HARMONICS, merged_source

Check = tuple[str, Callable[[], np.ndarray], Callable[[], np.ndarray]]
#: Checks whose float32 algorithm itself loses more than ``--limit`` (a running phase sum).
LIMITS = {"harmonic source (merged, up 300)": 1e-4}


def _up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(np.ascontiguousarray(a, np.float32))


def errors(got: np.ndarray, want: np.ndarray) -> tuple[float, float]:
    """Relative L2 error and largest absolute error over the largest ``|want|``."""
    g, w = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if g.shape != w.shape:
        raise ValueError(f"shape {g.shape} vs reference {w.shape}")
    scale = max(float(np.abs(w).max()), 1e-30)
    rel = float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30))
    return rel, float(np.abs(g - w).max() / scale)


Pair = tuple[Callable[[], np.ndarray], Callable[[], np.ndarray]]


def _conv_pair(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int, dil: int, groups: int
) -> Pair:
    """conv1d on the device and in float64 NumPy."""

    def device() -> np.ndarray:
        return ops.conv1d(_up(x), _up(w), _up(b), stride=stride, padding=pad, dilation=dil,
                          groups=groups).to_numpy()  # fmt: skip

    def reference() -> np.ndarray:
        return ref.conv1d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                          stride=stride, padding=pad, dilation=dil, groups=groups)  # fmt: skip

    return device, reference


def _transpose_pair(
    x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int, opad: int, groups: int
) -> Pair:
    """conv_transpose1d on the device and in float64 NumPy."""

    def device() -> np.ndarray:
        return ops.conv_transpose1d(_up(x), _up(w), _up(b), stride=stride, padding=pad,
                                    output_padding=opad, groups=groups).to_numpy()  # fmt: skip

    def reference() -> np.ndarray:
        return ref.conv_transpose1d(x.astype(np.float64), w.astype(np.float64),
                                    b.astype(np.float64), stride=stride, padding=pad,
                                    output_padding=opad, groups=groups)  # fmt: skip

    return device, reference


def _lstm_reference(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
    return ref.lstm_bidirectional(
        x.astype(np.float64), {n + s: p[n + s].astype(np.float64)
                               for n in names for s in ("", "_reverse")}
    )  # fmt: skip


def _lstm_device(x: np.ndarray, p: dict[str, np.ndarray]) -> np.ndarray:
    fw = [_up(p[n]) for n in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")]
    bw = [_up(p[n + "_reverse"]) for n in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0",
                                           "bias_hh_l0")]  # fmt: skip
    y, _ = ops.lstm(_up(x), *fw, w_ih_reverse=bw[0], w_hh_reverse=bw[1], b_ih_reverse=bw[2],
                    b_hh_reverse=bw[3])  # fmt: skip
    return y.to_numpy()


def checks(rng: np.random.Generator) -> list[Check]:
    """(name, device result, float64 reference) for every op, inputs drawn from ``rng``."""

    def n(*shape: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    out: list[Check] = []
    a, b = n(150, 768), n(768, 768, scale=0.04)
    out.append(("matmul [150,768]x[768,768]", lambda: gp.matmul(_up(a), _up(b)).to_numpy(),
                lambda: a.astype(np.float64) @ b))  # fmt: skip
    q, k = n(12, 150, 64), n(12, 64, 150)
    out.append(("matmul batched [12,150,64]x[12,64,150]",
                lambda: gp.matmul(_up(q), _up(k)).to_numpy(),
                lambda: q.astype(np.float64) @ k))  # fmt: skip
    x, w, bias = n(1, 150, 768), n(2048, 768, scale=0.04), n(2048, scale=0.1)
    c = math.sqrt(2 / math.pi)

    def gelu(v: np.ndarray) -> np.ndarray:
        return 0.5 * v * (1 + np.tanh(c * (v + 0.044715 * v**3)))

    out.append(("linear 768->2048 gelu_tanh",
                lambda: linear(_up(x), _up(w), _up(bias), activation="gelu_tanh").to_numpy(),
                lambda: gelu(x.astype(np.float64) @ w.T + bias)))  # fmt: skip
    s, ws, bs = n(1, 128), n(3000, 128, scale=0.1), n(3000, scale=0.1)
    out.append(("linear 1 row 128->3000 (style fc)",
                lambda: linear(_up(s), _up(ws), _up(bs)).to_numpy(),
                lambda: s.astype(np.float64) @ ws.T + bs))  # fmt: skip
    convs = [  # (label, B, C_in, C_out, L, K, stride, padding, dilation, groups)
        ("conv1d 512->512 k5 (text encoder)", 1, 512, 512, 150, 5, 1, 2, 1, 1),
        ("conv1d 256->256 k3", 1, 256, 256, 300, 3, 1, 1, 1, 1),
        ("conv1d 128->128 k7 dil3", 1, 128, 128, 1200, 7, 1, 9, 3, 1),
        ("conv1d 64->64 k11 dil5", 1, 64, 64, 2000, 11, 1, 25, 5, 1),
        ("conv1d 1->1 k3 stride2 (F0_conv)", 1, 1, 1, 600, 3, 2, 1, 1, 1),
        ("conv1d 22->128 k12 stride6 (noise_convs)", 1, 22, 128, 1201, 12, 6, 3, 1, 1),
        ("conv1d 512->256 k1", 1, 512, 256, 300, 1, 1, 0, 1, 1),
        ("conv1d 512->22 k7 (conv_post)", 1, 512, 22, 600, 7, 1, 3, 1, 1),
    ]
    for label, bb, ci, co, length, kk, st, pad, dil, g in convs:
        cx, cw, cb = n(bb, ci, length), n(co, ci // g, kk, scale=1 / math.sqrt(ci * kk)), n(co)
        out.append((label, *_conv_pair(cx, cw, cb, st, pad, dil, g)))
    transposed = [  # (label, C_in, C_out, L, K, stride, padding, output_padding, groups)
        ("conv_transpose1d 512->256 k20 s10", 512, 256, 100, 20, 10, 5, 0, 1),
        ("conv_transpose1d 256->128 k12 s6", 256, 128, 300, 12, 6, 3, 0, 1),
        ("conv_transpose1d depthwise 1090 k3 s2", 1090, 1090, 150, 3, 2, 1, 1, 1090),
    ]
    for label, ci, co, length, kk, st, pad, opad, g in transposed:
        tx, tw, tb = n(1, ci, length), n(ci, co // g, kk, scale=1 / math.sqrt(ci)), n(co)
        out.append((label, *_transpose_pair(tx, tw, tb, st, pad, opad, g)))
    lx = n(1, 60, 640)
    lp = {f"{nm}{sfx}": n(*shape, scale=0.06) for sfx in ("", "_reverse")
          for nm, shape in (("weight_ih_l0", (1024, 640)), ("weight_hh_l0", (1024, 256)),
                            ("bias_ih_l0", (1024,)), ("bias_hh_l0", (1024,)))}  # fmt: skip
    out.append(("lstm 640->2x256 T60 (sequence kernel)", lambda: _lstm_device(lx, lp),
                lambda: _lstm_reference(lx, lp)))  # fmt: skip

    def lstm_step() -> np.ndarray:
        with ops_config.override(lstm_kernel="step"):
            return _lstm_device(lx, lp)

    out.append(("lstm 640->2x256 T60 (step kernel)", lstm_step,
                lambda: _lstm_reference(lx, lp)))  # fmt: skip
    hx, hr, g1, b1 = n(1, 150, 768, scale=3), n(1, 150, 768), n(768), n(768)
    out.append(("layernorm 768",
                lambda: ops.layernorm(_up(hx), _up(g1), _up(b1), 1e-12).to_numpy(),
                lambda: ref.layer_norm(hx.astype(np.float64), g1, b1, 1e-12)))  # fmt: skip
    out.append(("add_layernorm 768",
                lambda: ops.add_layernorm(_up(hx), _up(hr), _up(g1), _up(b1), 1e-12)[1]
                .to_numpy(),
                lambda: ref.layer_norm(hx.astype(np.float64) + hr, g1, b1, 1e-12)))  # fmt: skip
    cx5, cg, cb5 = n(1, 512, 150, scale=2), n(512), n(512)
    out.append(("channel_layernorm 512",
                lambda: ops.channel_layernorm(_up(cx5), _up(cg), _up(cb5), 1e-5).to_numpy(),
                lambda: ref.channel_layer_norm(cx5.astype(np.float64), cg, cb5)))  # fmt: skip
    ax, gam, bet, alpha = n(1, 256, 900, scale=2), n(1, 256), n(1, 256), np.abs(n(256)) + 0.3
    for act in (None, "leaky_relu", "snake"):

        def device(act: str | None = act) -> np.ndarray:
            return ops.ada_in(_up(ax), _up(gam), _up(bet), activation=act,
                              alpha=_up(alpha) if act == "snake" else None).to_numpy()  # fmt: skip

        def reference(act: str | None = act) -> np.ndarray:
            y = ref.adain(ax.astype(np.float64), gam.astype(np.float64), bet.astype(np.float64))
            y = y.astype(np.float64)
            if act == "leaky_relu":
                return np.where(y >= 0, y, 0.2 * y)
            if act == "snake":
                al = alpha.astype(np.float64)[None, :, None]
                return y + np.sin(al * y) ** 2 / al
            return y

        out.append((f"ada_in ({act})", device, reference))
    out.append(("snake", lambda: ops.snake(_up(ax), _up(alpha)).to_numpy(),
                lambda: ax + np.sin(alpha[None, :, None].astype(np.float64) * ax) ** 2
                / alpha[None, :, None]))  # fmt: skip
    out.append(("leaky_relu 0.2", lambda: ops.leaky_relu(_up(ax), 0.2).to_numpy(),
                lambda: np.where(ax >= 0, ax, 0.2 * ax.astype(np.float64))))  # fmt: skip
    sc = n(12, 150, 150, scale=3)
    out.append(("softmax", lambda: gp.softmax(_up(sc), axis=-1).to_numpy(),
                lambda: ref._softmax(sc.astype(np.float64))))  # fmt: skip
    ew = n(1, 11, 3000, scale=2)
    out.append(("exp", lambda: gp.exp(_up(ew)).to_numpy(), lambda: np.exp(ew.astype(np.float64))))
    out.append(("sin", lambda: gp.sin(_up(ew)).to_numpy(), lambda: np.sin(ew.astype(np.float64))))
    out.append(("tanh", lambda: gp.tanh(_up(ew)).to_numpy(),
                lambda: np.tanh(ew.astype(np.float64))))  # fmt: skip
    out.append(("sigmoid", lambda: gp.sigmoid(_up(ew)).to_numpy(),
                lambda: 1 / (1 + np.exp(-ew.astype(np.float64)))))  # fmt: skip
    sig = n(1, 36001, scale=0.3)
    out.append(("stft n_fft 20 hop 5 (magnitude)",
                lambda: stft(_up(sig), 20, 5, output="polar")[0].to_numpy(),
                lambda: ref.stft_polar(sig.astype(np.float64), 20, 5)[0]))  # fmt: skip
    mag, ph = np.abs(n(1, 11, 7201)), n(1, 11, 7201)
    out.append(("istft n_fft 20 hop 5 (polar in)",
                lambda: istft(_up(mag), 20, 5, phase=_up(ph)).to_numpy(),
                lambda: ref.istft_polar(mag, ph, 20, 5)))  # fmt: skip
    f0 = rng.uniform(60, 400, (1, 120)).astype(np.float32)
    wsrc, bsrc = n(1, HARMONICS, scale=0.3), n(1, scale=0.1)

    def source_reference() -> np.ndarray:
        net = ref.ReferenceNetwork.__new__(ref.ReferenceNetwork)
        net.state = {"decoder.generator.m_source.l_linear.weight": wsrc,
                     "decoder.generator.m_source.l_linear.bias": bsrc}  # fmt: skip
        net.config = type("C", (), {"upsample_rates": (10, 6), "hop_length": 5})()
        return net.harmonic_source(f0, None)

    out.append(("harmonic source (merged, up 300)",
                lambda: merged_source(_up(f0), 300, 24000, _up(wsrc), _up(bsrc)).to_numpy(),
                source_reference))  # fmt: skip
    return out


def run(seed: int, limit: float) -> int:
    """Print every check; return how many exceed ``limit`` (relative L2)."""
    rng = np.random.default_rng(seed)
    loose = 0
    print(f"op precision, float32 on {gp.backend_name()} vs float64 NumPy (seed {seed})")
    for name, device, reference in checks(rng):
        try:
            rel, peak = errors(device(), reference())
        except Exception as exc:  # one broken op must not hide the others
            print(f"  {name:45s} ERROR {type(exc).__name__}: {exc}")
            loose += 1
            continue
        bound = LIMITS.get(name, limit)
        flag = f"  <-- above {bound:g}" if rel > bound else ""
        loose += rel > bound
        print(f"  {name:45s} rel {rel:.2e}  max/peak {peak:.2e}{flag}")
    return loose


def main() -> None:
    """Parse the options and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=int(np.random.default_rng().integers(1 << 20)))
    parser.add_argument("--limit", type=float, default=1e-5)
    args = parser.parse_args()
    loose = run(args.seed, args.limit)
    print(f"{loose} op(s) above {args.limit:g}")


if __name__ == "__main__":
    main()
