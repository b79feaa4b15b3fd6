"""Kokoro on this backend against the float32 NumPy reference network, stage by stage.

Finds where a device network parts from the reference: for the tiny and small random configs,
one utterance, the same durations, it prints the relative L2 error of the duration features,
the text encoder, F0 and energy, the harmonic source, and the audio (also as the largest error
over the reference's peak, the measure of ``test_network_matches_the_numpy_reference``), for
each vocoder dtype asked (``--vocoder float32,auto``: ``auto`` is bfloat16 on the GPU); then the
audio again with one piece at a time swapped for its composed (pre-fusion) form: the LSTM step
kernel instead of the sequence kernel, the harmonic source from separate array ops, AdaIN from
separate reductions, channel LayerNorm by transpose + layernorm. ``--ops`` first prints every
op's float32 error against float64 NumPy (``tools/tts_op_precision.py``), which shows a TF32 or
16-bit path taken for float32. Needs the tests folder (``tests/tts/kokoro_numpy_reference.py``).
Run from the repository root::

    python tools/tts_stage_check.py --ops --real-shape 150

``--real-shape N`` adds the duration path at Kokoro-82M's shape, stage by stage (ALBERT,
``bert_encoder``, duration encoder, LSTM, logits, frame counts).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import pathlib
import sys
from collections.abc import Callable, Iterator

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "tts"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import tts_op_precision
from kokoro_numpy_reference import ReferenceNetwork, istft_polar, stft_polar

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config as ops_config
from pygpukit.ops.audio.stft import istft, stft
from pygpukit.tts import KokoroConfig, kokoro
from pygpukit.tts._masking import Lengths
from pygpukit.tts._source import harmonic_sines
from pygpukit.tts.config import SAMPLE_RATE
from pygpukit.tts.kokoro import KokoroNetwork, _upload_ids, _upload_styles, frame_counts
from pygpukit.tts.random_model import TINY_CONFIG, random_state, random_voice

SMALL = KokoroConfig(
    hidden_dim=64, style_dim=32, albert_hidden=64, albert_heads=4, albert_intermediate=128,
    albert_layers=2, albert_embedding=32, upsample_initial_channel=32,
)  # fmt: skip


def rel(a: np.ndarray, b: np.ndarray) -> float:
    """Relative L2 error of ``a`` against ``b``."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def composed_source(self: KokoroNetwork, f0: gp.GPUArray, rng: object) -> gp.GPUArray:
    """The merged harmonic source from separate array ops (the pre-fusion form)."""
    up = math.prod(self.config.upsample_rates) * self.config.hop_length
    sines = harmonic_sines(f0, up, SAMPLE_RATE, None)
    p = "decoder.generator.m_source.l_linear"
    w = self.weights
    merged = gp.matmul(w[p + ".weight"], sines) + w[p + ".bias"].reshape(1, 1, 1)
    return gp.tanh(merged).reshape(f0.shape[0], -1)


def composed_ada_in(x, gamma, beta, lengths, *, weight=None, bias=None, activation=None,
                    negative_slope=0.2, alpha=None, eps=1e-5):  # fmt: skip
    """AdaIN from separate reductions and elementwise ops (one utterance, no padding)."""
    xf = x if x.dtype == gp.float32 else x.astype(gp.float32)
    b, c, _ = xf.shape
    mean = gp.mean(xf, axis=2)
    centred = xf - mean.reshape(b, c, 1)
    rstd = gp.rsqrt(gp.mean(centred * centred, axis=2) + np.float32(eps))
    y = centred * rstd.reshape(b, c, 1)
    if weight is not None:
        y = y * weight.astype(gp.float32).reshape(1, c, 1)
    if bias is not None:
        y = y + bias.astype(gp.float32).reshape(1, c, 1)
    y = y * (gamma.astype(gp.float32) + np.float32(1)).reshape(b, c, 1)
    y = y + beta.astype(gp.float32).reshape(b, c, 1)
    if activation == "leaky_relu":
        y = ops.leaky_relu(y, negative_slope)
    elif activation == "snake":
        y = ops.snake(y, alpha.astype(gp.float32))
    return y.astype(x.dtype)


def composed_channel_layernorm(x, weight, bias=None, eps=1e-5):
    """LayerNorm over channels by transposing to channels-last and back."""
    t = x.transpose(0, 2, 1).contiguous()
    return ops.layernorm(t, weight, bias, eps).transpose(0, 2, 1).contiguous()


@contextlib.contextmanager
def swapped(owner: object, name: str, value: Callable) -> Iterator[None]:
    """``owner.name`` replaced by ``value`` inside the block."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def peak_error(a: np.ndarray, b: np.ndarray) -> float:
    """Largest absolute error of ``a`` over the peak of ``b``."""
    return float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-30))


def stages(cfg: KokoroConfig, label: str, seed: int, vocoder: str) -> None:
    """Print each stage's error against the reference, then the audio's with each swap."""
    rng = np.random.default_rng(seed)
    state = random_state(cfg, seed=seed)
    style = random_voice(cfg, seed=seed + 1)[30, 0]
    ids = np.array([0, *rng.integers(1, 170, 29), 0])
    ref_net = ReferenceNetwork(cfg, state)
    net = KokoroNetwork(cfg, state, vocoder_dtype=vocoder)
    ref = ref_net(ids, style, 1.0)
    durations = ref.durations
    print(f"== {label} (seed {seed}, {len(ids)} tokens, {int(durations.sum())} frames, "
          f"vocoder {vocoder} = {np.dtype(net.vocoder_dtype).name})")  # fmt: skip
    # Stage by stage, the device network on the reference's durations.
    width = len(ids)
    tokens = Lengths(np.array([width]), width)
    ids_gpu, refs = _upload_ids([ids], width), _upload_styles([style])
    ph = net.phoneme_half(ids_gpu, refs, tokens)
    d, styles = ph.features, ph.styles
    ours_dur = frame_counts(ph.duration.to_numpy(), tokens.lengths, 1.0)
    d_ref, dur_ref = ref_net.predict_durations(ids, style.reshape(1, -1), 1.0)
    print(
        f"  durations equal {np.mean(ours_dur[0] == dur_ref):.3f}; d {rel(d.to_numpy(), d_ref):.2e}"
    )
    frames = Lengths(np.array([durations.sum()]), int(durations.sum()))
    rows = gp.from_numpy(np.repeat(np.arange(width), durations).astype(np.int64))
    en = gp.take(d.reshape(width, d.shape[2]), rows, axis=0).reshape(1, -1, d.shape[2])
    f0, n, _ = net.f0_energy(en, styles, frames)
    s_pro = style.reshape(1, -1)[:, cfg.style_dim :]
    f0_ref, n_ref = ref_net.f0_energy(np.repeat(d_ref, durations, axis=1), s_pro)
    print(f"  F0 {rel(f0.to_numpy(), f0_ref):.2e}  energy {rel(n.to_numpy(), n_ref):.2e}")
    t_en = net.text_encoder(ids_gpu, tokens).to_numpy()  # [1, T, hidden]
    t_ref = ref_net.text_encoder(ids[None].astype(np.int64))  # [1, hidden, T]
    print(f"  text encoder {rel(t_en.transpose(0, 2, 1), t_ref):.2e}")
    src = net.harmonic_source(gp.from_numpy(f0_ref.astype(np.float32)), None).to_numpy()
    src_ref = ref_net.harmonic_source(f0_ref, None)
    print(f"  harmonic source (reference F0) {rel(src, src_ref):.2e}; "
          f"voiced share {np.mean(f0_ref > 10):.2f}")  # fmt: skip
    asr_ref = np.repeat(t_ref, durations, axis=2).astype(np.float32)
    s_dec = style.reshape(1, -1)[:, : cfg.style_dim]
    voc_ref = ref_net.decoder(asr_ref, f0_ref, n_ref, s_dec, None)
    voc = net.decoder(gp.from_numpy(asr_ref), gp.from_numpy(f0_ref.astype(np.float32)),
                      gp.from_numpy(n_ref.astype(np.float32)), styles, frames,
                      None).to_numpy()  # fmt: skip
    print(f"  decoder + generator on the reference's inputs {rel(voc, voc_ref):.2e} "
          f"(max/peak {peak_error(voc, voc_ref):.2e})")  # fmt: skip
    audio = net(ids, style, 1.0, durations=durations).audio
    print(f"  audio {rel(audio, ref.audio):.2e} (max/peak {peak_error(audio, ref.audio):.2e})")
    variants = {
        "lstm step kernel": lambda: ops_config.override(lstm_kernel="step"),
        "composed harmonic source": lambda: swapped(
            KokoroNetwork, "harmonic_source", composed_source
        ),
        "composed AdaIN": lambda: swapped(kokoro, "ada_in", composed_ada_in),
        "composed channel LayerNorm": lambda: swapped(
            ops, "channel_layernorm", composed_channel_layernorm
        ),
    }  # fmt: skip
    for name, make in variants.items():
        with make():
            alt = KokoroNetwork(cfg, state, vocoder_dtype=vocoder)(
                ids, style, 1.0, durations=durations
            ).audio
        print(f"  audio with {name}: {rel(alt, ref.audio):.2e}")


def audio_ops(seed: int) -> None:
    """The generator's STFT (polar out) and iSTFT (polar in), n_fft 20, hop 5, on noise."""
    x = np.random.default_rng(seed).standard_normal((2, 4001)).astype(np.float32)
    mag, phase = stft(gp.from_numpy(x), 20, 5, output="polar")
    mag_ref, phase_ref = stft_polar(x, 20, 5)
    print(f"stft magnitude {rel(mag.to_numpy(), mag_ref):.2e}")
    back = istft(mag, 20, 5, phase=phase).to_numpy()
    back_ref = istft_polar(mag_ref, phase_ref, 20, 5)
    print(f"istft {rel(back, back_ref):.2e}")


def prosody_stages(cfg: KokoroConfig, label: str, seed: int, tokens: int) -> None:
    """The duration path alone, stage by stage against the float32 NumPy network.

    ALBERT's output, ``bert_encoder``, the duration encoder, the duration LSTM, the projection's
    logits and the frame counts, at the real shape (``--real-shape``): random float weights
    are smooth, so a float32 device path lands near 1e-6 at every stage, and a product rounded
    to TF32 or 16 bits shows as 1e-4 or more from its stage on.
    """
    rng = np.random.default_rng(seed)
    state = random_state(cfg, seed=seed)
    style = random_voice(cfg, seed=seed + 1)[tokens, 0].reshape(1, -1)
    ids = np.array([0, *rng.integers(1, 170, tokens), 0])
    ref_net, net = ReferenceNetwork(cfg, state), KokoroNetwork(cfg, state)
    width = len(ids)
    lengths = Lengths(np.array([width]), width)
    ids_gpu, refs = _upload_ids([ids], width), _upload_styles([style[0]])
    s_pro = style[:, cfg.style_dim :]
    h_ref = ref_net.albert(ids[None].astype(np.int64))
    d_en_ref = ref_net._linear(h_ref, "bert_encoder")
    d_ref = ref_net.duration_encoder(d_en_ref, s_pro)
    x_ref = ref_net._lstm(d_ref, "predictor.lstm")
    logits_ref = ref_net._linear(x_ref, "predictor.duration_proj.linear_layer")
    styles = net.styles(refs)
    h = net.albert(ids_gpu, lengths)
    d_en = net._linear(h, "bert_encoder")
    d = net.duration_encoder(d_en, refs[:, cfg.style_dim :].contiguous(), styles, lengths)
    x = net._lstm(d, "predictor.lstm", lengths)
    logits = net._linear(x, "predictor.duration_proj.linear_layer")
    _, durations = net.predict_durations(ids, style[0], 1.0)
    _, durations_ref = ref_net.predict_durations(ids, style, 1.0)
    print(f"== prosody {label} (seed {seed}, {width} tokens): ALBERT "
          f"{rel(h.to_numpy(), h_ref):.2e}  bert_encoder {rel(d_en.to_numpy(), d_en_ref):.2e}  "
          f"duration encoder {rel(d.to_numpy(), d_ref):.2e}  lstm {rel(x.to_numpy(), x_ref):.2e}  "
          f"logits {rel(logits.to_numpy(), logits_ref):.2e}  "
          f"frames equal {np.mean(durations == durations_ref):.3f}")  # fmt: skip


def main() -> None:
    """The op table (``--ops``), the audio ops, then both random configs per vocoder dtype."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--ops", action="store_true", help="print the op table first")
    parser.add_argument("--vocoder", default="float32,auto", help="vocoder dtypes, comma-separated")
    parser.add_argument("--configs", default="tiny,small", help="random configs: tiny, small")
    parser.add_argument(
        "--real-shape", type=int, default=0, metavar="TOKENS",
        help="first the duration path at Kokoro-82M's shape for this many tokens (random weights)",
    )  # fmt: skip
    args = parser.parse_args()
    print("backend", gp.backend_name())
    if args.ops:
        tts_op_precision.run(args.seed, 1e-5)
    if args.real_shape:
        prosody_stages(KokoroConfig(), "real shape", args.seed, args.real_shape)
    audio_ops(args.seed)
    configs = {"tiny": TINY_CONFIG, "small": SMALL}
    for vocoder in args.vocoder.split(","):
        for label in args.configs.split(","):
            stages(configs[label], label, args.seed, vocoder)


if __name__ == "__main__":
    main()
