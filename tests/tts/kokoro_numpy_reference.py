"""A float32 NumPy Kokoro network, written from KModel's definition: the reference the tests
compare :class:`pygpukit.tts.kokoro.KokoroNetwork` (device-resident, pygpukit.ops) against.

One utterance at a time, plain NumPy operators (layouts ``[B, C, L]``), float64 phase sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from pygpukit.tts.config import SAMPLE_RATE, KokoroConfig


def _hann(n_fft: int) -> np.ndarray:
    return (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)).astype(np.float64)


def stft_polar(x: np.ndarray, n_fft: int, hop_length: int) -> tuple[np.ndarray, np.ndarray]:
    """Magnitude and phase ``[B, n_fft // 2 + 1, frames]`` of ``torch.stft`` (centered, reflect,
    periodic Hann)."""
    pad = n_fft // 2
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad)), mode="reflect")
    frames = sliding_window_view(xp, n_fft, axis=1)[:, ::hop_length] * _hann(n_fft)
    spec = np.fft.rfft(frames, axis=-1).transpose(0, 2, 1)
    return np.abs(spec).astype(np.float32), np.angle(spec).astype(np.float32)


def istft_polar(
    magnitude: np.ndarray, phase: np.ndarray, n_fft: int, hop_length: int
) -> np.ndarray:
    """``torch.istft(magnitude * exp(1j * phase))`` (centered, periodic Hann): ``[B, samples]``."""
    spec = magnitude.astype(np.float64) * np.exp(1j * phase.astype(np.float64))
    frames = np.fft.irfft(spec.transpose(0, 2, 1), n=n_fft, axis=-1) * _hann(n_fft)
    b, count, _ = frames.shape
    total = n_fft + hop_length * (count - 1)
    out = np.zeros((b, total))
    env = np.zeros(total)
    for i in range(count):
        out[:, i * hop_length : i * hop_length + n_fft] += frames[:, i]
        env[i * hop_length : i * hop_length + n_fft] += _hann(n_fft) ** 2
    pad = n_fft // 2
    length = hop_length * (count - 1)
    return (out[:, pad : pad + length] / env[pad : pad + length]).astype(np.float32)


def conv1d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    dilation: int = 1,
    groups: int = 1,
) -> np.ndarray:
    """``torch.nn.functional.conv1d``: x ``[B, C_in, L]``, weight ``[C_out, C_in/groups, K]``."""
    b, _c_in, _ = x.shape
    c_out, c_per_group, k = weight.shape
    if padding:
        x = np.pad(x, ((0, 0), (0, 0), (padding, padding)))
    # Windows [B, C_in, L_out, K]: tap j of output t reads x[t * stride + j * dilation].
    windows = sliding_window_view(x, (k - 1) * dilation + 1, axis=2)[:, :, ::stride, ::dilation]
    l_out = windows.shape[2]
    cols = windows.reshape(b, groups, c_per_group, l_out, k).transpose(0, 1, 3, 2, 4)
    cols = cols.reshape(b, groups, l_out, c_per_group * k)
    w = weight.reshape(groups, c_out // groups, c_per_group * k)
    out = np.matmul(cols, w.transpose(0, 2, 1)[None])  # [B, G, L_out, C_out/G]
    out = out.transpose(0, 1, 3, 2).reshape(b, c_out, l_out)
    if bias is not None:
        out = out + bias[None, :, None]
    return np.ascontiguousarray(out, dtype=np.float32)


def conv_transpose1d(
    x: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int = 1,
    padding: int = 0,
    output_padding: int = 0,
    groups: int = 1,
) -> np.ndarray:
    """``torch.nn.functional.conv_transpose1d``: weight ``[C_in, C_out/groups, K]``."""
    b, c_in, length = x.shape
    _, out_per_group, k = weight.shape
    in_per_group = c_in // groups
    c_out = out_per_group * groups
    full = (length - 1) * stride + k
    xg = x.reshape(b, groups, in_per_group, length)
    wg = weight.reshape(groups, in_per_group, out_per_group * k)
    # Every input step's contribution [B, G, L, C_out/G * K], then scattered tap by tap.
    contrib = np.matmul(xg.transpose(0, 1, 3, 2), wg[None]).reshape(
        b, groups, length, out_per_group, k
    )
    out = np.zeros((b, groups, out_per_group, full + output_padding), dtype=np.float32)
    last = (length - 1) * stride + 1
    for j in range(k):
        out[:, :, :, j : j + last : stride] += contrib[:, :, :, :, j].transpose(0, 1, 3, 2)
    out = out.reshape(b, c_out, -1)[:, :, padding : full + output_padding - padding]
    if bias is not None:
        out = out + bias[None, :, None]
    return np.ascontiguousarray(out, dtype=np.float32)


def leaky_relu(x: np.ndarray, negative_slope: float = 0.01) -> np.ndarray:
    """``max(x, 0) + negative_slope * min(x, 0)``."""
    return np.where(x >= 0, x, x * np.float32(negative_slope)).astype(np.float32)


def snake(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Snake activation ``x + sin(alpha x)^2 / alpha``, alpha ``[1, C, 1]``."""
    return (x + np.sin(alpha * x) ** 2 / alpha).astype(np.float32)


def layer_norm(
    x: np.ndarray, weight: np.ndarray | None, bias: np.ndarray | None, eps: float
) -> np.ndarray:
    """LayerNorm over the last axis (no affine where ``weight``/``bias`` are None)."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y.astype(np.float32)


def channel_layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5
) -> np.ndarray:
    """LayerNorm over the channel axis of ``[B, C, L]``."""
    return np.swapaxes(layer_norm(np.swapaxes(x, 1, 2), gamma, beta, eps), 1, 2)


def adain(
    x: np.ndarray,
    gamma: np.ndarray,
    beta: np.ndarray,
    eps: float = 1e-5,
    norm_weight: np.ndarray | None = None,
    norm_bias: np.ndarray | None = None,
) -> np.ndarray:
    """Adaptive instance norm ``(1 + gamma) * instance_norm(x) + beta``; gamma/beta ``[B, C]``."""
    mean = x.mean(axis=2, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=2, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if norm_weight is not None:
        y = y * norm_weight[None, :, None]
    if norm_bias is not None:
        y = y + norm_bias[None, :, None]
    return ((1.0 + gamma[:, :, None]) * y + beta[:, :, None]).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _lstm_direction(
    x: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray, bias: np.ndarray, reverse: bool
) -> np.ndarray:
    """One direction of a PyTorch LSTM (gates i, f, g, o) over ``x [B, T, I]``."""
    b, t, _ = x.shape
    hidden = w_hh.shape[1]
    pre = x @ w_ih.T + bias  # [B, T, 4H]: the input projection of every step at once
    h = np.zeros((b, hidden), dtype=np.float32)
    c = np.zeros((b, hidden), dtype=np.float32)
    out = np.empty((b, t, hidden), dtype=np.float32)
    steps = range(t - 1, -1, -1) if reverse else range(t)
    for step in steps:
        gates = pre[:, step] + h @ w_hh.T
        i = _sigmoid(gates[:, :hidden])
        f = _sigmoid(gates[:, hidden : 2 * hidden])
        g = np.tanh(gates[:, 2 * hidden : 3 * hidden])
        o = _sigmoid(gates[:, 3 * hidden :])
        c = f * c + i * g
        h = o * np.tanh(c)
        out[:, step] = h
    return out


def lstm_bidirectional(x: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """A one-layer bidirectional ``torch.nn.LSTM`` (batch_first): ``[B, T, I] -> [B, T, 2H]``.

    ``params`` holds PyTorch's names without prefix (``weight_ih_l0``, ``bias_hh_l0_reverse``...).
    """
    fwd = _lstm_direction(
        x,
        params["weight_ih_l0"],
        params["weight_hh_l0"],
        params["bias_ih_l0"] + params["bias_hh_l0"],
        reverse=False,
    )
    bwd = _lstm_direction(
        x,
        params["weight_ih_l0_reverse"],
        params["weight_hh_l0_reverse"],
        params["bias_ih_l0_reverse"] + params["bias_hh_l0_reverse"],
        reverse=True,
    )
    return np.concatenate([fwd, bwd], axis=-1)


_SQRT_HALF = np.float32(1.0 / math.sqrt(2.0))
_HARMONICS = 9  # the fundamental and 8 overtones of the sine source
_VOICED_F0_HZ = 10.0
_SINE_AMP = 0.1
_NOISE_STD = 0.003


@dataclass
class NetworkOutput:
    """One utterance: the waveform and each input token's frame count (padding included)."""

    audio: np.ndarray
    durations: np.ndarray


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    """ALBERT's ``gelu_new`` (tanh approximation)."""
    c = np.float32(math.sqrt(2.0 / math.pi))
    return (0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3)))).astype(np.float32)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _interpolate_linear(x: np.ndarray, scale: float) -> np.ndarray:
    """``interpolate(x, scale_factor=scale, mode="linear")`` on ``[B, C, L]``.

    align_corners False, as KModel's sine source calls it.
    """
    length = x.shape[-1]
    out_len = math.floor(length * scale)
    src = (np.arange(out_len, dtype=np.float64) + 0.5) / scale - 0.5
    src = np.maximum(src, 0.0)
    i0 = np.minimum(np.floor(src).astype(np.int64), length - 1)
    i1 = np.minimum(i0 + 1, length - 1)
    w = (src - i0).astype(np.float64)
    return (x[..., i0] * (1.0 - w) + x[..., i1] * w).astype(x.dtype)


class ReferenceNetwork:
    """Kokoro's forward pass over a KModel state dict (weight norm folded), in NumPy."""

    def __init__(self, config: KokoroConfig, state: dict[str, np.ndarray]) -> None:
        self.config = config
        self.state = state

    # -- parameter access -------------------------------------------------------------------
    def _w(self, name: str) -> np.ndarray:
        return self.state[name]

    def _opt(self, name: str) -> np.ndarray | None:
        return self.state.get(name)

    def _linear(self, x: np.ndarray, prefix: str) -> np.ndarray:
        y = x @ self._w(prefix + ".weight").T
        bias = self._opt(prefix + ".bias")
        return (y + bias if bias is not None else y).astype(np.float32)

    def _conv(self, x: np.ndarray, prefix: str, **kw: int) -> np.ndarray:
        return conv1d(x, self._w(prefix + ".weight"), self._opt(prefix + ".bias"), **kw)

    def _lstm(self, x: np.ndarray, prefix: str) -> np.ndarray:
        names = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")
        params = {
            n + suffix: self._w(f"{prefix}.{n}{suffix}")
            for n in names
            for suffix in ("", "_reverse")
        }
        return lstm_bidirectional(x, params)

    # -- ALBERT -----------------------------------------------------------------------------
    def albert(self, ids: np.ndarray) -> np.ndarray:
        """``[B, T]`` token ids -> ``[B, T, hidden]`` (no padding inside a batch)."""
        cfg = self.config
        p = "bert.embeddings."
        t = ids.shape[1]
        x = (
            self._w(p + "word_embeddings.weight")[ids]
            + self._w(p + "position_embeddings.weight")[:t][None]
            + self._w(p + "token_type_embeddings.weight")[0][None, None]
        )
        x = layer_norm(x, self._w(p + "LayerNorm.weight"), self._w(p + "LayerNorm.bias"), 1e-12)
        h = self._linear(x, "bert.encoder.embedding_hidden_mapping_in")
        layer = "bert.encoder.albert_layer_groups.0.albert_layers.0."
        heads = cfg.albert_heads
        head_dim = cfg.albert_hidden // heads
        b = ids.shape[0]
        for _ in range(cfg.albert_layers):

            def split(z: np.ndarray) -> np.ndarray:
                return z.reshape(b, t, heads, head_dim).transpose(0, 2, 1, 3)

            q = split(self._linear(h, layer + "attention.query"))
            k = split(self._linear(h, layer + "attention.key"))
            v = split(self._linear(h, layer + "attention.value"))
            probs = _softmax(q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(head_dim)))
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, t, cfg.albert_hidden)
            attn = self._linear(ctx, layer + "attention.dense")
            h = layer_norm(
                h + attn,
                self._w(layer + "attention.LayerNorm.weight"),
                self._w(layer + "attention.LayerNorm.bias"),
                1e-12,
            )
            ffn = self._linear(_gelu_tanh(self._linear(h, layer + "ffn")), layer + "ffn_output")
            h = layer_norm(
                h + ffn,
                self._w(layer + "full_layer_layer_norm.weight"),
                self._w(layer + "full_layer_layer_norm.bias"),
                1e-12,
            )
        return h

    # -- prosody ----------------------------------------------------------------------------
    def _ada_layer_norm(self, x: np.ndarray, s: np.ndarray, prefix: str) -> np.ndarray:
        """AdaLayerNorm over the last axis of ``[B, T, C]``."""
        h = self._linear(s, prefix + ".fc")
        c = h.shape[-1] // 2
        gamma, beta = h[:, None, :c], h[:, None, c:]
        return ((1.0 + gamma) * layer_norm(x, None, None, 1e-5) + beta).astype(np.float32)

    def duration_encoder(self, d_en: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``[B, T, hidden]`` and style ``[B, style]`` -> ``[B, T, hidden + style]``."""
        t = d_en.shape[1]
        style = np.broadcast_to(s[:, None, :], (s.shape[0], t, s.shape[1]))
        x = np.concatenate([d_en, style], axis=-1)
        for i in range(self.config.n_layer):
            x = self._lstm(x, f"predictor.text_encoder.lstms.{2 * i}")
            x = self._ada_layer_norm(x, s, f"predictor.text_encoder.lstms.{2 * i + 1}")
            x = np.concatenate([x, style], axis=-1)
        return x

    def _adain(self, x: np.ndarray, s: np.ndarray, prefix: str) -> np.ndarray:
        h = self._linear(s, prefix + ".fc")
        c = h.shape[-1] // 2
        return adain(
            x,
            h[:, :c],
            h[:, c:],
            1e-5,
            self._opt(prefix + ".norm.weight"),
            self._opt(prefix + ".norm.bias"),
        )

    def _adain_res_block(self, x: np.ndarray, s: np.ndarray, prefix: str) -> np.ndarray:
        """StyleTTS2's ``AdainResBlk1d`` (upsampling when the block has a ``pool``)."""
        upsample = (prefix + ".pool.weight") in self.state
        r = leaky_relu(self._adain(x, s, prefix + ".norm1"), 0.2)
        if upsample:
            r = conv_transpose1d(
                r,
                self._w(prefix + ".pool.weight"),
                self._opt(prefix + ".pool.bias"),
                stride=2,
                padding=1,
                output_padding=1,
                groups=r.shape[1],
            )
        r = self._conv(r, prefix + ".conv1", padding=1)
        r = leaky_relu(self._adain(r, s, prefix + ".norm2"), 0.2)
        r = self._conv(r, prefix + ".conv2", padding=1)
        sc = np.repeat(x, 2, axis=-1) if upsample else x
        if (prefix + ".conv1x1.weight") in self.state:
            sc = self._conv(sc, prefix + ".conv1x1")
        return ((r + sc) * _SQRT_HALF).astype(np.float32)

    def f0_energy(self, en: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Aligned features ``[B, frames, hidden + style]`` -> F0, energy ``[B, 2 * frames]``."""
        x = self._lstm(en, "predictor.shared").transpose(0, 2, 1)
        curves = []
        for branch in ("F0", "N"):
            y = x
            for i in range(3):
                y = self._adain_res_block(y, s, f"predictor.{branch}.{i}")
            curves.append(self._conv(y, f"predictor.{branch}_proj")[:, 0])
        return curves[0], curves[1]

    # -- text encoder -----------------------------------------------------------------------
    def text_encoder(self, ids: np.ndarray) -> np.ndarray:
        """``[B, T]`` -> ``[B, hidden, T]``."""
        x = self._w("text_encoder.embedding.weight")[ids].transpose(0, 2, 1)
        pad = (self.config.text_encoder_kernel_size - 1) // 2
        for i in range(self.config.n_layer):
            p = f"text_encoder.cnn.{i}"
            x = self._conv(x, p + ".0", padding=pad)
            x = channel_layer_norm(x, self._w(p + ".1.gamma"), self._w(p + ".1.beta"))
            x = leaky_relu(x, 0.2)
        return self._lstm(x.transpose(0, 2, 1), "text_encoder.lstm").transpose(0, 2, 1)

    # -- decoder ----------------------------------------------------------------------------
    def decoder(
        self,
        asr: np.ndarray,
        f0: np.ndarray,
        n: np.ndarray,
        s: np.ndarray,
        rng: np.random.Generator | None,
    ) -> np.ndarray:
        """Aligned text features, F0 and energy -> waveform ``[B, samples]``."""
        f0_down = self._conv(f0[:, None], "decoder.F0_conv", stride=2, padding=1)
        n_down = self._conv(n[:, None], "decoder.N_conv", stride=2, padding=1)
        x = self._adain_res_block(
            np.concatenate([asr, f0_down, n_down], axis=1), s, "decoder.encode"
        )
        asr_res = self._conv(asr, "decoder.asr_res.0")
        residual = True
        for i in range(4):
            prefix = f"decoder.decode.{i}"
            if residual:
                x = np.concatenate([x, asr_res, f0_down, n_down], axis=1)
            x = self._adain_res_block(x, s, prefix)
            if (prefix + ".pool.weight") in self.state:
                residual = False
        return self.generator(x, s, f0, rng)

    def harmonic_source(self, f0: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        """The sine source at the output rate: F0 ``[B, frames]`` -> ``[B, samples]``.

        Without ``rng`` the source is deterministic, as kokoro-onnx exported it; with one, the
        Gaussian noise of KModel's source (0.003 in voiced samples, 0.033 elsewhere) is added.
        """
        cfg = self.config
        up = math.prod(cfg.upsample_rates) * cfg.hop_length
        f0_up = np.repeat(f0, up, axis=-1)[:, :, None]  # [B, L, 1]
        fn = f0_up * np.arange(1, _HARMONICS + 1, dtype=np.float32)  # [B, L, 9]
        rad = (fn / SAMPLE_RATE) % 1.0
        rad_frames = _interpolate_linear(rad.transpose(0, 2, 1), 1.0 / up)
        phase = np.cumsum(rad_frames.astype(np.float64), axis=-1) * 2.0 * np.pi
        phase = _interpolate_linear(phase * up, float(up)).transpose(0, 2, 1)
        uv = (f0_up > _VOICED_F0_HZ).astype(np.float32)
        sines = (np.sin(phase) * _SINE_AMP).astype(np.float32) * uv
        if rng is not None:
            noise_amp = uv * _NOISE_STD + (1.0 - uv) * _SINE_AMP / 3.0
            sines = sines + noise_amp * rng.standard_normal(sines.shape).astype(np.float32)
        merged = np.tanh(self._linear(sines, "decoder.generator.m_source.l_linear"))
        return merged[:, :, 0]

    def _adain_res_block1(
        self, x: np.ndarray, s: np.ndarray, prefix: str, kernel: int, dilations: tuple[int, ...]
    ) -> np.ndarray:
        """HiFi-GAN's ResBlock1 with AdaIN and Snake (iSTFTNet's ``AdaINResBlock1``)."""
        for j, d in enumerate(dilations):
            xt = snake(self._adain(x, s, f"{prefix}.adain1.{j}"), self._w(f"{prefix}.alpha1.{j}"))
            xt = self._conv(xt, f"{prefix}.convs1.{j}", dilation=d, padding=(kernel * d - d) // 2)
            xt = snake(self._adain(xt, s, f"{prefix}.adain2.{j}"), self._w(f"{prefix}.alpha2.{j}"))
            xt = self._conv(xt, f"{prefix}.convs2.{j}", padding=(kernel - 1) // 2)
            x = (xt + x).astype(np.float32)
        return x

    def generator(
        self, x: np.ndarray, s: np.ndarray, f0: np.ndarray, rng: np.random.Generator | None
    ) -> np.ndarray:
        """iSTFTNet: features ``[B, C, 2 frames]`` -> waveform ``[B, samples]``."""
        cfg = self.config
        g = "decoder.generator"
        source = self.harmonic_source(f0, rng)
        magnitude, phase = stft_polar(source, cfg.n_fft, cfg.hop_length)
        har = np.concatenate([magnitude, phase], axis=1)
        kernels = cfg.resblock_kernel_sizes
        n_up = len(cfg.upsample_rates)
        stages = zip(cfg.upsample_rates, cfg.upsample_kernel_sizes, strict=True)
        for i, (u, k) in enumerate(stages):
            x = leaky_relu(x, 0.1)
            if i + 1 < n_up:
                stride = math.prod(cfg.upsample_rates[i + 1 :])
                x_source = self._conv(
                    har, f"{g}.noise_convs.{i}", stride=stride, padding=(stride + 1) // 2
                )
                x_source = self._adain_res_block1(x_source, s, f"{g}.noise_res.{i}", 7, (1, 3, 5))
            else:
                x_source = self._conv(har, f"{g}.noise_convs.{i}")
                x_source = self._adain_res_block1(x_source, s, f"{g}.noise_res.{i}", 11, (1, 3, 5))
            x = conv_transpose1d(
                x,
                self._w(f"{g}.ups.{i}.weight"),
                self._opt(f"{g}.ups.{i}.bias"),
                stride=u,
                padding=(k - u) // 2,
            )
            if i == n_up - 1:
                x = np.pad(x, ((0, 0), (0, 0), (1, 0)), mode="reflect")
            x = x + x_source
            acc = None
            for j, (kk, dil) in enumerate(zip(kernels, cfg.resblock_dilation_sizes, strict=False)):
                y = self._adain_res_block1(
                    x, s, f"{g}.resblocks.{i * len(kernels) + j}", kk, tuple(dil)
                )
                acc = y if acc is None else acc + y
            assert acc is not None
            x = (acc / np.float32(len(kernels))).astype(np.float32)
        x = leaky_relu(x, 0.01)
        x = self._conv(x, f"{g}.conv_post", padding=3)
        bins = cfg.n_fft // 2 + 1
        magnitude = np.exp(x[:, :bins]).astype(np.float32)
        phase = np.sin(x[:, bins:]).astype(np.float32)
        return istft_polar(magnitude, phase, cfg.n_fft, cfg.hop_length)

    # -- whole model ------------------------------------------------------------------------
    def predict_durations(
        self, ids: np.ndarray, ref_s: np.ndarray, speed: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """The prosody front half: ids ``[T]`` and style ``[256]`` to two arrays.

        The duration features ``[1, T, hidden + style]`` and the frames per token ``[T]``.
        """
        ids2 = ids[None].astype(np.int64)
        s_pro = ref_s.reshape(1, -1).astype(np.float32)[:, self.config.style_dim :]
        d_en = self._linear(self.albert(ids2), "bert_encoder")
        d = self.duration_encoder(d_en, s_pro)
        x = self._lstm(d, "predictor.lstm")
        logits = self._linear(x, "predictor.duration_proj.linear_layer")
        duration = _sigmoid(logits).sum(axis=-1) / np.float32(speed)
        durations = np.maximum(np.round(duration), 1).astype(np.int64)[0]
        return d, durations

    def __call__(
        self,
        ids: np.ndarray,
        ref_s: np.ndarray,
        speed: float,
        rng: np.random.Generator | None = None,
        durations: np.ndarray | None = None,
    ) -> NetworkOutput:
        """One utterance: ids ``[T]`` (0 at both ends), style ``[256]`` -> audio and durations.

        ``durations`` (frames per token, padding included) replaces the predicted alignment:
        used to compare the vocoder path against another implementation's timing.
        """
        ref = ref_s.reshape(1, -1).astype(np.float32)
        s_pro, s_dec = ref[:, self.config.style_dim :], ref[:, : self.config.style_dim]
        d, predicted = self.predict_durations(ids, ref, speed)
        if durations is None:
            durations = predicted
        elif durations.shape != predicted.shape or (durations < 1).any():
            raise ValueError(f"durations must be {predicted.shape} frame counts >= 1")
        en = np.repeat(d, durations, axis=1)
        f0, n = self.f0_energy(en, s_pro)
        asr = np.repeat(self.text_encoder(ids[None].astype(np.int64)), durations, axis=2)
        audio = self.decoder(asr, f0, n, s_dec, rng)
        return NetworkOutput(audio=audio[0], durations=durations)
