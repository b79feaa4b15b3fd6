"""The Kokoro network (``KModel`` of the ``kokoro`` package), resident on the device.

Layers, in KModel's order: ALBERT (one shared layer group applied ``albert_layers`` times), the
``bert_encoder`` projection, the duration encoder (BiLSTMs with AdaLayerNorm conditioned on the
style), the duration projection and hard alignment (each phoneme's frame repeated its predicted
number of times), the F0 and energy branches (AdaIN residual blocks, one 2x transposed-conv
upsampling), the text encoder (embedding, conv1d + channel LayerNorm + LeakyReLU, BiLSTM), the
decoder (AdaIN residual blocks) and the iSTFTNet generator (harmonic sine source,
transposed-conv upsampling, AdaIN residual blocks with Snake, iSTFT).

The weights are uploaded once (:class:`~pygpukit.tts._weights.DeviceWeights`) and every layer
runs on GPUArrays through :mod:`pygpukit.ops` and the runtime's array operations; the CPU
backend runs the same code on its NumPy versions. Per call the host sees two things: the
integer durations (the hard alignment's shape depends on them) and the finished audio; so a
call is two halves (:meth:`KokoroNetwork.phoneme_half`, :meth:`KokoroNetwork.frame_half`).

Several utterances run as one padded batch: ALBERT masks the padded keys, the LSTMs stop at
each utterance's length, convolutions see zero padding and AdaIN's statistics cover the valid
frames only (:mod:`pygpukit.tts._masking`), and the source's STFT and the iSTFT end at each
utterance's own end (:mod:`pygpukit.tts._edges`), so each utterance's audio is the one it gets
alone, up to rounding. On the GPU a call replays two CUDA graphs, one per half, padded to a
length bucket the same way (:mod:`pygpukit.tts._graphs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray
from pygpukit.ops.linear import linear

from ._edges import padded_istft, padded_stft, ratio_table
from ._graphs import MAX_GRAPHS, SynthesisGraphs, token_bucket
from ._masking import Lengths, ada_in
from ._source import harmonic_sines, merged_source
from ._weights import ALBERT_LAYER, DeviceWeights
from .config import SAMPLE_RATE, KokoroConfig

__all__ = [
    "KokoroNetwork",
    "NetworkOutput",
    "PhonemeOutputs",
    "alignment_rows",
    "frame_counts",
    "gather_frames",
    "resolve_vocoder_dtype",
]

_SQRT_HALF = 1.0 / math.sqrt(2.0)  # a Python float: 16-bit signals stay 16-bit
_MASKED_SCORE = np.float32(-1e9)  # an additive attention mask for padded keys


_VOCODER_DTYPES = {"float32": gp.float32, "bfloat16": gp.bfloat16, "float16": gp.float16}


def resolve_vocoder_dtype(dtype: str | np.dtype) -> np.dtype:
    """The vocoder's dtype from its name.

    ``"auto"`` is bfloat16 on the GPU (tensor-core convolutions), float32 on the CPU backend;
    else ``"float32"``, ``"bfloat16"`` or ``"float16"`` (or the dtype itself).
    """
    if isinstance(dtype, str) and dtype == "auto":
        return gp.bfloat16 if gp.backend_name() == "cuda" else gp.float32
    for name, value in _VOCODER_DTYPES.items():
        if dtype == name or (not isinstance(dtype, str) and np.dtype(dtype) == value):
            return value
    raise ValueError(
        f"vocoder_dtype must be 'auto', 'float32', 'bfloat16' or 'float16', got {dtype!r}"
    )


@dataclass
class NetworkOutput:
    """One utterance: the waveform and each input token's frame count (padding included)."""

    audio: np.ndarray
    durations: np.ndarray


@dataclass
class _Styles:
    """One batch's style projections: every AdaIN's gamma and beta, as column views."""

    projected: dict[str, GPUArray]
    columns: dict[str, tuple[int, int]]

    def __call__(self, prefix: str) -> tuple[GPUArray, GPUArray]:
        section = prefix.split(".", 1)[0]
        offset, channels = self.columns[prefix]
        h = self.projected[section]
        return h[:, offset : offset + channels], h[:, offset + channels : offset + 2 * channels]


class KokoroNetwork:
    """Kokoro's forward pass over a KModel state dict (weight norm folded), on ``device``.

    ``cuda_graphs``: replay each half of a synthesis as a CUDA graph per length bucket
    (:mod:`pygpukit.tts._graphs`; default: on the CUDA backend), keeping at most
    ``max_graphs`` graphs per half. The padding to a bucket changes no valid sample beyond
    rounding.
    """

    def __init__(
        self,
        config: KokoroConfig,
        state: dict[str, np.ndarray],
        *,
        device: int = 0,
        vocoder_dtype: str | np.dtype = "auto",
        cuda_graphs: bool | None = None,
        max_graphs: int = MAX_GRAPHS,
    ) -> None:
        self.config = config
        #: The host state dict it was built from (float32, KModel names).
        self.state = state
        self.device = device
        #: The dtype of the decoder and generator (the prosody half is always float32).
        self.vocoder_dtype = resolve_vocoder_dtype(vocoder_dtype)
        with gp.Device(device):
            head_dim = config.albert_hidden // config.albert_heads
            self.weights = DeviceWeights(state, self.vocoder_dtype, 1.0 / math.sqrt(head_dim))
            # The iSTFT's end correction, uploaded once here: a captured synthesis cannot upload.
            self._istft_ratios = ratio_table(config.n_fft, config.hop_length)
        self._conv_copies: dict[str, dict] = {}
        if cuda_graphs is None:
            cuda_graphs = gp.backend_name() == "cuda"
        #: The CUDA graphs that :meth:`batch` replays (:mod:`pygpukit.tts._graphs`), or None
        #: where every call runs eagerly (``cuda_graphs=False``, the CPU backend).
        self.graphs = SynthesisGraphs(self, max_graphs) if cuda_graphs else None

    # -- building blocks --------------------------------------------------------------------
    def _linear(self, x: GPUArray, prefix: str, activation: str | None = None) -> GPUArray:
        w = self.weights
        return linear(x, w[prefix + ".weight"], w.get(prefix + ".bias"), activation=activation)

    def _conv(
        self, x: GPUArray, prefix: str, *, stride: int = 1, padding: int = 0, dilation: int = 1
    ) -> GPUArray:
        w = self.weights
        return ops.conv1d(
            x, w[prefix + ".weight"], w.get(prefix + ".bias"), stride=stride, padding=padding,
            dilation=dilation, weight_cache=self._weight_cache(prefix),
        )  # fmt: skip

    def _weight_cache(self, prefix: str) -> dict:
        """The conv weight ``prefix``'s copy rearranged for the tensor-core kernel (kept)."""
        return self._conv_copies.setdefault(prefix, {})

    def _lstm(self, x: GPUArray, prefix: str, lengths: Lengths) -> GPUArray:
        fw, bw = self.weights.lstm(prefix)
        y, _ = ops.lstm(
            x, *fw, w_ih_reverse=bw[0], w_hh_reverse=bw[1], b_ih_reverse=bw[2],
            b_hh_reverse=bw[3], lengths=lengths.for_lstm(),
        )  # fmt: skip
        return y

    def styles(self, ref: GPUArray) -> _Styles:
        """Every block's gamma/beta for styles ``ref`` ``[B, 2 * style]`` in two matmuls."""
        s = self.config.style_dim
        halves = {"decoder": ref[:, :s].contiguous(), "predictor": ref[:, s:].contiguous()}
        projected, columns = {}, {}
        for section, pack in self.weights.styles.items():
            projected[section] = linear(halves[section], pack.weight, pack.bias)
            columns.update(pack.columns)
        if self.vocoder_dtype != gp.float32:
            projected["decoder"] = projected["decoder"].astype(self.vocoder_dtype)
        return _Styles(projected, columns)

    def _adain(
        self,
        x: GPUArray,
        styles: _Styles,
        prefix: str,
        lengths: Lengths,
        activation: str | None = None,
        alpha: GPUArray | None = None,
        slope: float = 0.2,
    ) -> GPUArray:
        gamma, beta = styles(prefix)
        w = self.weights
        return ada_in(
            x, gamma, beta, lengths, weight=w.get(prefix + ".norm.weight"),
            bias=w.get(prefix + ".norm.bias"), activation=activation, negative_slope=slope,
            alpha=alpha,
        )  # fmt: skip

    # -- ALBERT -----------------------------------------------------------------------------
    def albert(self, ids: GPUArray, tokens: Lengths) -> GPUArray:
        """``[B, T]`` token ids -> ``[B, T, hidden]`` (padded keys masked out)."""
        cfg, w = self.config, self.weights
        b, t = ids.shape
        p = "bert.embeddings."
        x = ops.embedding(ids, w[p + "word_embeddings.weight"]) + w.positions[:t]
        x = ops.layernorm(x, w[p + "LayerNorm.weight"], w[p + "LayerNorm.bias"], 1e-12)
        h = self._linear(x, "bert.encoder.embedding_hidden_mapping_in")
        heads, hidden = cfg.albert_heads, cfg.albert_hidden
        head_dim = hidden // heads
        mask = tokens.key_mask(_MASKED_SCORE)
        layer = ALBERT_LAYER
        for _ in range(cfg.albert_layers):
            qkv = linear(h, w.qkv_weight, w.qkv_bias)
            qkv = qkv.reshape(b, t, 3, heads, head_dim).transpose(2, 0, 3, 1, 4).contiguous()
            # [B, heads, T, T]; the queries come scaled by 1/sqrt(head_dim) (DeviceWeights).
            scores = gp.matmul(qkv[0], qkv[1].swapaxes(-1, -2))
            if mask is not None:
                scores = scores + mask
            ctx = gp.matmul(gp.softmax(scores, axis=-1), qkv[2])
            ctx = ctx.transpose(0, 2, 1, 3).contiguous().reshape(b, t, hidden)
            attn = self._linear(ctx, layer + "attention.dense")
            _, h = ops.add_layernorm(
                attn, h, w[layer + "attention.LayerNorm.weight"],
                w[layer + "attention.LayerNorm.bias"], 1e-12,
            )  # fmt: skip
            ffn = self._linear(self._linear(h, layer + "ffn", "gelu_tanh"), layer + "ffn_output")
            _, h = ops.add_layernorm(
                ffn, h, w[layer + "full_layer_layer_norm.weight"],
                w[layer + "full_layer_layer_norm.bias"], 1e-12,
            )  # fmt: skip
        return h

    # -- prosody ----------------------------------------------------------------------------
    def _ada_layer_norm(self, x: GPUArray, styles: _Styles, prefix: str) -> GPUArray:
        """AdaLayerNorm over the last axis of ``[B, T, C]``: ``(1 + gamma) * LN(x) + beta``."""
        gamma, beta = styles(prefix)
        b, _, c = x.shape
        gain = gamma + np.float32(1.0)
        if b == 1:  # one style: the gain and shift are LayerNorm's own affine parameters
            return ops.layernorm(x, gain.reshape(c), beta.contiguous().reshape(c), 1e-5)
        y = ops.layernorm(x, self.weights.ones(c), None, 1e-5)
        return y * gain.reshape(b, 1, c) + beta.contiguous().reshape(b, 1, c)

    def duration_encoder(
        self, d_en: GPUArray, s_pro: GPUArray, styles: _Styles, tokens: Lengths
    ) -> GPUArray:
        """``[B, T, hidden]`` and style ``[B, style]`` -> ``[B, T, hidden + style]``."""
        b, t, _ = d_en.shape
        style = gp.broadcast_to(s_pro.reshape(b, 1, -1), (b, t, s_pro.shape[1]))
        x = gp.concatenate([d_en, style], axis=-1)
        for i in range(self.config.n_layer):
            x = self._lstm(x, f"predictor.text_encoder.lstms.{2 * i}", tokens)
            x = self._ada_layer_norm(x, styles, f"predictor.text_encoder.lstms.{2 * i + 1}")
            x = gp.concatenate([x, style], axis=-1)
        return x

    def _res_block(
        self, x: GPUArray, styles: _Styles, prefix: str, lengths: Lengths
    ) -> tuple[GPUArray, Lengths]:
        """StyleTTS2's ``AdainResBlk1d`` (a 2x upsampling one when it has a ``pool``).

        Returns the output and its lengths (doubled by an upsampling block).
        """
        w = self.weights
        upsample = (prefix + ".pool.weight") in w
        r = self._adain(x, styles, prefix + ".norm1", lengths, "leaky_relu")
        out_lengths = lengths.scaled(2) if upsample else lengths
        if upsample:
            r = ops.conv_transpose1d(
                r, w[prefix + ".pool.weight"], w.get(prefix + ".pool.bias"), stride=2,
                padding=1, output_padding=1, groups=r.shape[1],
            )  # fmt: skip
            r = out_lengths.zero_padding(r)
        r = self._conv(r, prefix + ".conv1", padding=1)
        r = self._adain(r, styles, prefix + ".norm2", out_lengths, "leaky_relu")
        r = self._conv(r, prefix + ".conv2", padding=1)
        sc = gp.repeat(x, 2, axis=-1) if upsample else x
        if (prefix + ".conv1x1.weight") in w:
            sc = self._conv(sc, prefix + ".conv1x1")
        return (r + sc) * _SQRT_HALF, out_lengths

    def f0_energy(
        self, en: GPUArray, styles: _Styles, frames: Lengths
    ) -> tuple[GPUArray, GPUArray, Lengths]:
        """Aligned features ``[B, frames, hidden + style]`` -> F0, energy ``[B, 2 * frames]``.

        Each curve's padding is zero; the third result is their lengths.
        """
        x = self._lstm(en, "predictor.shared", frames).transpose(0, 2, 1).contiguous()
        curves = []
        lengths = frames
        for branch in ("F0", "N"):
            y, lengths = x, frames
            for i in range(3):
                y, lengths = self._res_block(y, styles, f"predictor.{branch}.{i}", lengths)
            y = lengths.zero_padding(self._conv(y, f"predictor.{branch}_proj"))
            curves.append(y.reshape(y.shape[0], y.shape[2]))
        return curves[0], curves[1], lengths

    # -- text encoder -----------------------------------------------------------------------
    def text_encoder(self, ids: GPUArray, tokens: Lengths) -> GPUArray:
        """``[B, T]`` -> ``[B, T, hidden]``."""
        w = self.weights
        x = ops.embedding(ids, w["text_encoder.embedding.weight"]).transpose(0, 2, 1).contiguous()
        x = tokens.zero_padding(x)
        pad = (self.config.text_encoder_kernel_size - 1) // 2
        for i in range(self.config.n_layer):
            p = f"text_encoder.cnn.{i}"
            x = self._conv(x, p + ".0", padding=pad)
            x = ops.channel_layernorm(x, w[p + ".1.gamma"], w[p + ".1.beta"], 1e-5)
            x = tokens.zero_padding(ops.leaky_relu(x, 0.2))
        return self._lstm(x.transpose(0, 2, 1).contiguous(), "text_encoder.lstm", tokens)

    # -- decoder ----------------------------------------------------------------------------
    def decoder(
        self,
        asr: GPUArray,
        f0: GPUArray,
        n: GPUArray,
        styles: _Styles,
        frames: Lengths,
        rng: np.random.Generator | None,
    ) -> GPUArray:
        """Aligned text features, F0 and energy -> waveform ``[B, samples]``."""
        b, dtype = f0.shape[0], self.vocoder_dtype
        asr = asr.astype(dtype)
        f0_down = self._conv(
            f0.reshape(b, 1, -1).astype(dtype), "decoder.F0_conv", stride=2, padding=1
        )
        n_down = self._conv(
            n.reshape(b, 1, -1).astype(dtype), "decoder.N_conv", stride=2, padding=1
        )
        x, lengths = self._res_block(
            gp.concatenate([asr, f0_down, n_down], axis=1), styles, "decoder.encode", frames
        )
        asr_res = self._conv(asr, "decoder.asr_res.0")
        residual = True
        for i in range(4):
            prefix = f"decoder.decode.{i}"
            if residual:
                x = gp.concatenate([x, asr_res, f0_down, n_down], axis=1)
            x, lengths = self._res_block(x, styles, prefix, lengths)
            if (prefix + ".pool.weight") in self.weights:
                residual = False
        return self.generator(x, styles, f0, lengths, rng)

    def harmonic_source(self, f0: GPUArray, rng: np.random.Generator | None) -> GPUArray:
        """The merged sine source at the output rate: F0 ``[B, frames]`` -> ``[B, samples]``."""
        cfg = self.config
        up = math.prod(cfg.upsample_rates) * cfg.hop_length
        w = self.weights
        prefix = "decoder.generator.m_source.l_linear"
        if rng is None:  # deterministic: the sines are expanded, merged and squashed in one pass
            return merged_source(f0, up, SAMPLE_RATE, w[prefix + ".weight"], w[prefix + ".bias"])
        sines = harmonic_sines(f0, up, SAMPLE_RATE, rng)  # [B, 9, L]
        merged = gp.matmul(w[prefix + ".weight"], sines) + w[prefix + ".bias"].reshape(1, 1, 1)
        return gp.tanh(merged).reshape(f0.shape[0], -1)

    def _snake_res_block(
        self,
        x: GPUArray,
        styles: _Styles,
        prefix: str,
        kernel: int,
        dilations: tuple[int, ...],
        lengths: Lengths,
    ) -> GPUArray:
        """HiFi-GAN's ResBlock1 with AdaIN and Snake (iSTFTNet's ``AdaINResBlock1``)."""
        w = self.weights
        for j, d in enumerate(dilations):
            xt = self._adain(x, styles, f"{prefix}.adain1.{j}", lengths, "snake",
                             w[f"{prefix}.alpha1.{j}"])  # fmt: skip
            xt = self._conv(xt, f"{prefix}.convs1.{j}", dilation=d, padding=(kernel * d - d) // 2)
            xt = self._adain(xt, styles, f"{prefix}.adain2.{j}", lengths, "snake",
                             w[f"{prefix}.alpha2.{j}"])  # fmt: skip
            xt = self._conv(xt, f"{prefix}.convs2.{j}", padding=(kernel - 1) // 2)
            x = xt + x
        return x

    def generator(
        self,
        x: GPUArray,
        styles: _Styles,
        f0: GPUArray,
        lengths: Lengths,
        rng: np.random.Generator | None,
    ) -> GPUArray:
        """iSTFTNet: features ``[B, C, 2 frames]`` -> waveform ``[B, samples]``."""
        cfg, w = self.config, self.weights
        g = "decoder.generator"
        up = math.prod(cfg.upsample_rates)
        samples = lengths.scaled(up * cfg.hop_length)  # the source's and the audio's samples
        source = self.harmonic_source(f0, rng)
        magnitude, phase = padded_stft(source, samples, cfg.n_fft, cfg.hop_length)
        spectrum = lengths.scaled(up, 1)  # the source's STFT frames
        har = gp.concatenate([magnitude, phase], axis=1).astype(self.vocoder_dtype)
        har = spectrum.zero_padding(har)
        kernels = cfg.resblock_kernel_sizes
        n_up = len(cfg.upsample_rates)
        stages = zip(cfg.upsample_rates, cfg.upsample_kernel_sizes, strict=True)
        for i, (u, k) in enumerate(stages):
            x = lengths.zero_padding(ops.leaky_relu(x, 0.1))
            last = i + 1 == n_up
            lengths = lengths.scaled(u, 1 if last else 0)
            if not last:
                stride = math.prod(cfg.upsample_rates[i + 1 :])
                x_source = self._conv(
                    har, f"{g}.noise_convs.{i}", stride=stride, padding=(stride + 1) // 2
                )
                x_source = self._snake_res_block(
                    x_source, styles, f"{g}.noise_res.{i}", 7, (1, 3, 5), lengths
                )
            else:
                x_source = self._conv(har, f"{g}.noise_convs.{i}")
                x_source = self._snake_res_block(
                    x_source, styles, f"{g}.noise_res.{i}", 11, (1, 3, 5), lengths
                )
            x = ops.conv_transpose1d(
                x, w[f"{g}.ups.{i}.weight"], w.get(f"{g}.ups.{i}.bias"), stride=u,
                padding=(k - u) // 2, weight_cache=self._weight_cache(f"{g}.ups.{i}"),
            )  # fmt: skip
            if last:  # ReflectionPad1d((1, 0))
                x = gp.concatenate([x[:, :, 1:2], x], axis=-1)
            x = x + x_source
            acc = None
            for j, (kk, dil) in enumerate(zip(kernels, cfg.resblock_dilation_sizes, strict=False)):
                y = self._snake_res_block(
                    x, styles, f"{g}.resblocks.{i * len(kernels) + j}", kk, tuple(dil), lengths
                )
                acc = y if acc is None else acc + y
            assert acc is not None
            x = acc * (1.0 / len(kernels))
        x = lengths.zero_padding(ops.leaky_relu(x, 0.01))
        x = self._conv(x, f"{g}.conv_post", padding=3).astype(gp.float32)
        bins = cfg.n_fft // 2 + 1
        magnitude = lengths.zero_padding(gp.exp(x[:, :bins]))
        phase = gp.sin(x[:, bins:])
        return padded_istft(
            magnitude, phase, samples, cfg.n_fft, cfg.hop_length, self._istft_ratios
        )

    # -- whole model ------------------------------------------------------------------------
    def phoneme_half(
        self, ids: GPUArray, ref: GPUArray, tokens: Lengths, d_en: GPUArray | None = None
    ) -> PhonemeOutputs:
        """Everything that runs per token, on the device (no host copy, no wait).

        ``ids`` ``[B, T]``, styles ``ref`` ``[B, 2 * style]``: ALBERT, the duration encoder and
        predictor, and the text encoder. ``d_en`` ``[B, T, hidden]`` (``bert_encoder``'s output
        from elsewhere) replaces ALBERT and its projection.
        """
        styles = self.styles(ref)
        s_pro = ref[:, self.config.style_dim :].contiguous()
        if d_en is None:
            d_en = self._linear(self.albert(ids, tokens), "bert_encoder")
        d = self.duration_encoder(d_en, s_pro, styles, tokens)
        x = self._lstm(d, "predictor.lstm", tokens)
        logits = self._linear(x, "predictor.duration_proj.linear_layer")
        duration = gp.sum(gp.sigmoid(logits), axis=-1)
        return PhonemeOutputs(d, self.text_encoder(ids, tokens), duration, styles)

    def frame_half(
        self,
        en: GPUArray,
        asr: GPUArray,
        styles: _Styles,
        frames: Lengths,
        rng: np.random.Generator | None,
    ) -> GPUArray:
        """Everything that runs per frame: aligned features -> waveform ``[B, samples]``.

        ``en`` ``[B, F, hidden + style]`` and ``asr`` ``[B, F, hidden]``: the duration and
        text features of each frame's token (:func:`gather_frames`). With ``rng`` None, no host
        copy and no wait.
        """
        f0, n, _ = self.f0_energy(en, styles, frames)
        asr = frames.zero_padding(asr.transpose(0, 2, 1).contiguous())
        return self.decoder(asr, f0, n, styles, frames, rng)

    def predict_durations(
        self,
        ids: np.ndarray,
        ref_s: np.ndarray,
        speed: float,
        *,
        bert_features: np.ndarray | None = None,
    ) -> tuple[GPUArray, np.ndarray]:
        """The prosody front half of one utterance: ids ``[T]`` and style ``[256]``.

        Returns the duration features ``[1, T, hidden + style]`` and the frames per token
        ``[T]``. ``bert_features`` ``[T, hidden]`` float32 (``bert_encoder``'s output of another
        implementation, e.g. onnxruntime's) replaces ALBERT and its projection: it compares the
        duration path alone, apart from ALBERT's differences.
        """
        t = len(ids)
        if bert_features is not None and np.shape(bert_features) != (t, self.config.hidden_dim):
            raise ValueError(
                f"bert_features must be [{t}, {self.config.hidden_dim}] (one row per token), "
                f"got {np.shape(bert_features)}"
            )
        with gp.Device(self.device):
            tokens = Lengths(np.array([t]), t)
            d_en = None
            if bert_features is not None:
                d_en = gp.from_numpy(np.ascontiguousarray(bert_features, np.float32)[None])
            d, durations, _ = self._prosody(
                _upload_ids([ids], t), _upload_styles([ref_s]), tokens, speed, d_en
            )
        return d, durations[0]

    def _prosody(
        self,
        ids: GPUArray,
        ref: GPUArray,
        tokens: Lengths,
        speed: float,
        d_en: GPUArray | None = None,
    ) -> tuple[GPUArray, np.ndarray, _Styles]:
        """The per-token half of a padded batch, with its durations read back.

        Duration features ``[B, T, hidden + style]``, frames per token ``[B, T]`` (on the host;
        0 on padding) and the batch's style projections.
        """
        out = self.phoneme_half(ids, ref, tokens, d_en)
        durations = frame_counts(out.duration.to_numpy(), tokens.lengths, speed)
        return out.features, durations, out.styles

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
        forced = None if durations is None else [durations]
        return self.batch([ids], [ref_s], speed, rng, forced)[0]

    def batch(
        self,
        ids: Sequence[np.ndarray],
        refs: Sequence[np.ndarray],
        speed: float,
        rng: np.random.Generator | None = None,
        durations: Sequence[np.ndarray] | None = None,
    ) -> list[NetworkOutput]:
        """Several utterances in one padded batch: token ids ``[T_i]``, styles ``[256]`` each.

        ``durations`` (one array of frames per token each) replaces the predicted alignment.
        Replays CUDA graphs where :attr:`graphs` is on, ``rng`` is None and the batch is small
        enough for the host to set the pace (:mod:`pygpukit.tts._graphs`; the first call of
        each length bucket runs eagerly and captures them).
        """
        if len(ids) != len(refs) or not ids:
            raise ValueError(f"{len(ids)} token arrays for {len(refs)} styles")
        if durations is not None:
            for i, want in enumerate(durations):
                if want.shape != (len(ids[i]),) or (want < 1).any():
                    raise ValueError(f"durations must be {(len(ids[i]),)} frame counts >= 1")
        with gp.Device(self.device):
            limit = self.weights.positions.shape[0]
            if self.graphs is not None and rng is None and token_bucket(ids, limit) is not None:
                audio, frames, counts = self.graphs.run(ids, refs, speed, durations)
            else:
                audio, frames, counts = self._eager(ids, refs, speed, rng, durations)
        step = self.config.frame_samples
        return [
            NetworkOutput(
                audio=np.ascontiguousarray(audio[i, : frames[i] * step]),
                durations=counts[i, : len(ids[i])].copy(),
            )
            for i in range(len(ids))
        ]

    def _eager(
        self,
        ids: Sequence[np.ndarray],
        refs: Sequence[np.ndarray],
        speed: float,
        rng: np.random.Generator | None,
        forced: Sequence[np.ndarray] | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Audio ``[B, samples]``, frames ``[B]`` and frames per token ``[B, T]``, eagerly."""
        width = max(len(i) for i in ids)
        tokens = Lengths(np.array([len(i) for i in ids]), width)
        ph = self.phoneme_half(_upload_ids(ids, width), _upload_styles(refs), tokens)
        # The one download before the audio: the alignment's shape depends on the durations.
        durations = frame_counts(ph.duration.to_numpy(), tokens.lengths, speed, forced)
        lengths = durations.sum(axis=1)
        frames = Lengths(lengths, int(lengths.max()))
        rows = gp.from_numpy(alignment_rows(durations, frames.width))
        en, asr = gather_frames(ph, rows)
        audio = self.frame_half(en, asr, ph.styles, frames, rng)
        return audio.to_numpy(), lengths, durations


@dataclass
class PhonemeOutputs:
    """What the per-token half hands the per-frame half, all on the device."""

    #: ``[B, T, hidden + style]``: the duration encoder's features.
    features: GPUArray
    #: ``[B, T, hidden]``: the text encoder's features.
    text: GPUArray
    #: ``[B, T]`` float32: each token's predicted frames at speed 1, before rounding.
    duration: GPUArray
    #: The batch's style projections.
    styles: _Styles


def frame_counts(
    duration: np.ndarray,
    lengths: np.ndarray,
    speed: float,
    forced: Sequence[np.ndarray] | None = None,
) -> np.ndarray:
    """Integer frames per token ``[B, T]`` from the predicted ``duration`` (0 on padding).

    KModel's rounding: ``round(duration / speed)``, at least 1. ``forced`` (frames per token
    of each utterance) replaces the prediction.
    """
    counts = np.maximum(np.round(duration / np.float32(speed)), 1).astype(np.int64)
    counts[np.arange(counts.shape[1])[None, :] >= np.asarray(lengths)[:, None]] = 0
    if forced is not None:
        for i, want in enumerate(forced):
            counts[i, : len(want)] = want
    return counts


def alignment_rows(durations: np.ndarray, width: int) -> np.ndarray:
    """The hard alignment as gather indices ``[B * width]`` int64.

    Frame ``f`` of utterance ``i`` reads token row ``i * T + token`` of the ``[B * T, C]``
    features; padded frames read the utterance's first token (masked later).
    """
    b, t = durations.shape
    rows = np.repeat(np.arange(b, dtype=np.int64) * t, width).reshape(b, width)
    for i in range(b):
        picked = np.repeat(np.arange(t), durations[i])
        rows[i, : len(picked)] += picked
    return rows.reshape(-1)


def gather_frames(
    ph: PhonemeOutputs,
    rows: GPUArray,
    out: tuple[GPUArray, GPUArray] | None = None,
) -> tuple[GPUArray, GPUArray]:
    """Each frame's duration and text features ``[B, F, C]`` (``rows``: :func:`alignment_rows`).

    ``out``: two ``[B, F, C]`` arrays to write instead (a CUDA graph's inputs).
    """
    results = []
    for i, src in enumerate((ph.features, ph.text)):
        b, t, c = src.shape
        frames = rows.shape[0] // b
        # "clip": the indices are made on the host, in range; "raise" would read them back.
        target = None if out is None else out[i].reshape(b * frames, c)
        got = gp.take(src.reshape(b * t, c), rows, axis=0, mode="clip", out=target)
        results.append(got.reshape(b, frames, c))
    return results[0], results[1]


def _upload_ids(ids: Sequence[np.ndarray], width: int) -> GPUArray:
    padded = np.zeros((len(ids), width), np.int64)
    for i, row in enumerate(ids):
        padded[i, : len(row)] = row
    return gp.from_numpy(padded)


def _upload_styles(refs: Sequence[np.ndarray]) -> GPUArray:
    return gp.from_numpy(
        np.ascontiguousarray(np.stack([np.asarray(r, np.float32).reshape(-1) for r in refs]))
    )
