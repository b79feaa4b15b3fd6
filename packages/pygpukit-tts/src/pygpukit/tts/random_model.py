"""Random Kokoro weights of any shape, with KModel's state-dict names (weight norm folded).

For tests (a tiny shape that runs in a second on the CPU) and for the benchmark suite (the
real shape, :class:`KokoroConfig` defaults), with no download.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .config import STYLE_TABLE_ROWS, KokoroConfig

__all__ = ["TINY_CONFIG", "random_state", "random_voice", "write_random_checkpoint"]

TINY_CONFIG = KokoroConfig(
    hidden_dim=32,
    style_dim=16,
    albert_hidden=32,
    albert_heads=2,
    albert_intermediate=64,
    albert_layers=2,
    albert_embedding=16,
    upsample_rates=(2, 2),
    upsample_kernel_sizes=(4, 4),
    upsample_initial_channel=16,
)


class _Builder:
    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.state: dict[str, np.ndarray] = {}

    def tensor(self, name: str, shape: tuple[int, ...], scale: float | None = None) -> None:
        fan_in = math.prod(shape[1:]) if len(shape) > 1 else shape[0]
        std = scale if scale is not None else 1.0 / math.sqrt(max(fan_in, 1))
        self.state[name] = (self.rng.standard_normal(shape) * std).astype(np.float32)

    def near(self, name: str, shape: tuple[int, ...], center: float) -> None:
        self.state[name] = (center + 0.05 * self.rng.standard_normal(shape)).astype(np.float32)

    def linear(self, prefix: str, out: int, inp: int, bias: bool = True) -> None:
        self.tensor(prefix + ".weight", (out, inp))
        if bias:
            self.tensor(prefix + ".bias", (out,), 0.02)

    def conv(self, prefix: str, out: int, inp: int, k: int, bias: bool = True) -> None:
        self.tensor(prefix + ".weight", (out, inp, k))
        if bias:
            self.tensor(prefix + ".bias", (out,), 0.02)

    def layer_norm(self, prefix: str, n: int, weight: str = "weight", bias: str = "bias") -> None:
        self.near(f"{prefix}.{weight}", (n,), 1.0)
        self.near(f"{prefix}.{bias}", (n,), 0.0)

    def lstm(self, prefix: str, inp: int, hidden: int) -> None:
        for suffix in ("", "_reverse"):
            self.tensor(f"{prefix}.weight_ih_l0{suffix}", (4 * hidden, inp))
            self.tensor(f"{prefix}.weight_hh_l0{suffix}", (4 * hidden, hidden))
            self.tensor(f"{prefix}.bias_ih_l0{suffix}", (4 * hidden,), 0.02)
            self.tensor(f"{prefix}.bias_hh_l0{suffix}", (4 * hidden,), 0.02)

    def adain(self, prefix: str, style: int, channels: int) -> None:
        self.linear(prefix + ".fc", 2 * channels, style)
        self.layer_norm(prefix + ".norm", channels)

    def adain_res_block(
        self, prefix: str, style: int, dim_in: int, dim_out: int, upsample: bool = False
    ) -> None:
        self.conv(prefix + ".conv1", dim_out, dim_in, 3)
        self.conv(prefix + ".conv2", dim_out, dim_out, 3)
        self.adain(prefix + ".norm1", style, dim_in)
        self.adain(prefix + ".norm2", style, dim_out)
        if dim_in != dim_out:
            self.conv(prefix + ".conv1x1", dim_out, dim_in, 1, bias=False)
        if upsample:
            self.conv(prefix + ".pool", dim_in, 1, 3)

    def snake_res_block(self, prefix: str, style: int, channels: int, kernel: int) -> None:
        for j in range(3):
            self.conv(f"{prefix}.convs1.{j}", channels, channels, kernel)
            self.conv(f"{prefix}.convs2.{j}", channels, channels, kernel)
            self.adain(f"{prefix}.adain1.{j}", style, channels)
            self.adain(f"{prefix}.adain2.{j}", style, channels)
            self.near(f"{prefix}.alpha1.{j}", (1, channels, 1), 1.0)
            self.near(f"{prefix}.alpha2.{j}", (1, channels, 1), 1.0)


def random_state(config: KokoroConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """A complete random state dict for ``config``.

    Decoder widths follow Kokoro-82M's: twice ``upsample_initial_channel`` inside the decoder,
    an eighth of it for the ASR residual.
    """
    b = _Builder(np.random.default_rng(seed))
    h, s, a = config.hidden_dim, config.style_dim, config.albert_hidden
    e = config.albert_embedding
    b.tensor("bert.embeddings.word_embeddings.weight", (config.n_token, e), 0.5)
    b.tensor("bert.embeddings.position_embeddings.weight", (config.max_position, e), 0.1)
    b.tensor("bert.embeddings.token_type_embeddings.weight", (2, e), 0.1)
    b.layer_norm("bert.embeddings.LayerNorm", e)
    b.linear("bert.encoder.embedding_hidden_mapping_in", a, e)
    layer = "bert.encoder.albert_layer_groups.0.albert_layers.0."
    for name in ("query", "key", "value", "dense"):
        b.linear(layer + "attention." + name, a, a)
    b.layer_norm(layer + "attention.LayerNorm", a)
    b.linear(layer + "ffn", config.albert_intermediate, a)
    b.linear(layer + "ffn_output", a, config.albert_intermediate)
    b.layer_norm(layer + "full_layer_layer_norm", a)
    b.linear("bert_encoder", h, a)
    for i in range(config.n_layer):
        b.lstm(f"predictor.text_encoder.lstms.{2 * i}", h + s, h // 2)
        b.linear(f"predictor.text_encoder.lstms.{2 * i + 1}.fc", 2 * h, s)
    b.lstm("predictor.lstm", h + s, h // 2)
    b.linear("predictor.duration_proj.linear_layer", config.max_dur, h)
    # Speech-like durations (about 2.7 frames per phoneme, as trained Kokoro speaks: 150
    # phonemes ~ 10 s): the sigmoid of each of the max_dur logits near 0.05, not the 0.5 of
    # zero-mean weights.
    proj = "predictor.duration_proj.linear_layer"
    b.state[proj + ".weight"] *= 0.5
    b.state[proj + ".bias"] += np.float32(-2.8)
    b.lstm("predictor.shared", h + s, h // 2)
    for branch in ("F0", "N"):
        b.adain_res_block(f"predictor.{branch}.0", s, h, h)
        b.adain_res_block(f"predictor.{branch}.1", s, h, h // 2, upsample=True)
        b.adain_res_block(f"predictor.{branch}.2", s, h // 2, h // 2)
        b.conv(f"predictor.{branch}_proj", 1, h // 2, 1)
    b.tensor("text_encoder.embedding.weight", (config.n_token, h), 0.5)
    for i in range(config.n_layer):
        b.conv(f"text_encoder.cnn.{i}.0", h, h, config.text_encoder_kernel_size)
        b.layer_norm(f"text_encoder.cnn.{i}.1", h, "gamma", "beta")
    b.lstm("text_encoder.lstm", h, h // 2)
    up = config.upsample_initial_channel
    dec, asr = 2 * up, max(up // 8, 1)
    b.adain_res_block("decoder.encode", s, h + 2, dec)
    for i in range(3):
        b.adain_res_block(f"decoder.decode.{i}", s, dec + 2 + asr, dec)
    b.adain_res_block("decoder.decode.3", s, dec + 2 + asr, up, upsample=True)
    b.conv("decoder.F0_conv", 1, 1, 3)
    b.conv("decoder.N_conv", 1, 1, 3)
    b.conv("decoder.asr_res.0", asr, h, 1)
    g = "decoder.generator"
    b.linear(f"{g}.m_source.l_linear", 1, 9)
    rates, kernels = config.upsample_rates, config.upsample_kernel_sizes
    for i, k in enumerate(kernels):
        c_in, c_out = up // 2**i, up // 2 ** (i + 1)
        b.conv(f"{g}.ups.{i}", c_in, c_out, k)  # ConvTranspose1d: [C_in, C_out, K]
        b.state[f"{g}.ups.{i}.bias"] = b.state[f"{g}.ups.{i}.bias"][:c_out]
        for j, rk in enumerate(config.resblock_kernel_sizes):
            b.snake_res_block(
                f"{g}.resblocks.{i * len(config.resblock_kernel_sizes) + j}", s, c_out, rk
            )
        if i + 1 < len(rates):
            stride = math.prod(rates[i + 1 :])
            b.conv(f"{g}.noise_convs.{i}", c_out, config.n_fft + 2, 2 * stride)
            b.snake_res_block(f"{g}.noise_res.{i}", s, c_out, 7)
        else:
            b.conv(f"{g}.noise_convs.{i}", c_out, config.n_fft + 2, 1)
            b.snake_res_block(f"{g}.noise_res.{i}", s, c_out, 11)
    # The source's STFT phase is read by no random weight: with random weights F0 stays below
    # the voicing threshold, the source is one constant, and the phase of its zero-magnitude
    # bins is rounding noise (one ulp more on the constant moves the audio by tens of percent),
    # so two correct implementations would not agree. Trained weights see the phase of a real
    # excitation; the real-model tests check it.
    for i in range(len(rates)):
        b.state[f"{g}.noise_convs.{i}.weight"][:, config.n_fft // 2 + 1 :] = 0.0
    b.conv(f"{g}.conv_post", config.n_fft + 2, up // 2 ** len(kernels), 7)
    b.state[f"{g}.conv_post.weight"] *= 0.1  # exp() of its magnitude half: keep it tame
    return b.state


def random_voice(config: KokoroConfig, seed: int = 0) -> np.ndarray:
    """A random ``[510, 1, 2 * style_dim]`` voice pack."""
    rng = np.random.default_rng(seed)
    return (0.3 * rng.standard_normal((STYLE_TABLE_ROWS, 1, 2 * config.style_dim))).astype(
        np.float32
    )


def write_random_checkpoint(
    folder: str | Path, config: KokoroConfig = TINY_CONFIG, seed: int = 0
) -> Path:
    """Write a random model as an HF-style folder and return it.

    ``config.json``, ``model.safetensors`` (KModel names, weight norm folded) and
    ``voices/random.npy``: something :func:`pygpukit.tts.load` reads, with no download.
    """
    from pygpukit.safetensors import write_safetensors

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    write_safetensors(out / "model.safetensors", random_state(config, seed))
    (out / "config.json").write_text(json.dumps(config.to_dict()), encoding="utf-8")
    (out / "voices").mkdir(exist_ok=True)
    np.save(out / "voices" / "random.npy", random_voice(config, seed + 1))
    return out
