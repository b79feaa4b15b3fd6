"""The Whisper network on ``pygpukit.ops``: the encoder, the decoder, and their device state.

The encoder's stem is two width-3 convolutions (``ops.layers.Conv1d``, the second with stride
2) with GELU over the channel-major log-mel; from there activations are time-major
(``[B, T, C]``), so every projection is a ``Linear`` over the last axis: sinusoidal positions,
then pre-LN blocks. The decoder adds learned positions; each block has self-attention over a
static KV cache, cross-attention over the window's encoder output (its K/V projected once per
window, :meth:`Decoder.set_audio`) and a GELU MLP. Residual sums and the following LayerNorm
are one kernel (``LayerNorm(x, residual)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray
from pygpukit.ops.layers import Attention, Conv1d, LayerNorm, Linear
from pygpukit.ops.linear import linear

from .config import WhisperConfig

__all__ = ["Decoder", "DecoderState", "Encoder"]


def _upload(a: np.ndarray, dtype: Any) -> GPUArray:
    x = gp.from_numpy(np.ascontiguousarray(np.asarray(a, np.float32).astype(dtype)))
    x.setflags(write=False)
    return x


def _heads(x: GPUArray, parts: int, heads: int) -> GPUArray:
    """``[B, T, parts * H * D]`` -> ``[parts, B, H, T, D]`` (one copy)."""
    b, t, c = x.shape
    d = c // (parts * heads)
    return x.reshape(b, t, parts, heads, d).transpose(2, 0, 3, 1, 4).copy()


def _merge(o: GPUArray) -> GPUArray:
    """``[B, H, T, D]`` -> ``[B, T, H * D]``."""
    b, h, t, d = o.shape
    return o.transpose(0, 2, 1, 3).copy().reshape(b, t, h * d)


class _Block:
    """One pre-LN transformer block's layers (decoder blocks add cross-attention)."""

    def __init__(self, w: Mapping[str, np.ndarray], p: str, dtype: object, cross: bool) -> None:
        def lin(name: str, act: str | None = None) -> Linear:
            return Linear(_upload(w[p + name + ".w"], dtype), _upload(w[p + name + ".b"], dtype),
                          activation=act)  # fmt: skip

        def norm(name: str) -> LayerNorm:
            return LayerNorm(_upload(w[p + name + ".w"], dtype), _upload(w[p + name + ".b"], dtype))

        self.attn_ln, self.qkv, self.out = norm("attn_ln"), lin("qkv"), lin("out")
        self.mlp_ln, self.fc1, self.fc2 = norm("mlp_ln"), lin("fc1", "gelu"), lin("fc2")
        if cross:
            self.cross_ln, self.cross_q = norm("cross_ln"), lin("cross_q")
            self.cross_kv, self.cross_out = lin("cross_kv"), lin("cross_out")


class Encoder:
    """Log-mel ``[B, n_mels, n_frames]`` -> audio features ``[B, n_frames/2, C]`` (time-major)."""

    def __init__(self, w: Mapping[str, np.ndarray], cfg: WhisperConfig, dtype: object) -> None:
        self.cfg, self.dtype = cfg, np.dtype(dtype)  # type: ignore[call-overload]

        def conv(name: str, stride: int) -> Conv1d:
            weight, bias = _upload(w[name + ".w"], dtype), _upload(w[name + ".b"], dtype)
            return Conv1d(weight, bias, stride=stride, padding=1)

        self.conv1, self.conv2 = conv("enc.conv1", 1), conv("enc.conv2", 2)
        self.pos = _upload(w["enc.pos"], dtype)
        self.blocks = [_Block(w, f"enc.{i}.", dtype, False) for i in range(cfg.encoder_layers)]
        self.ln_post = LayerNorm(_upload(w["enc.ln.w"], dtype), _upload(w["enc.ln.b"], dtype))
        self.attn = Attention(cfg.encoder_heads, cfg.encoder_heads, cfg.head_dim, causal=False)

    def __call__(self, mel: GPUArray) -> GPUArray:
        """Run the encoder; ``mel`` is ``[B, n_mels, 2 * max_source_positions]``."""
        cfg = self.cfg
        x = gp.gelu(self.conv2(gp.gelu(self.conv1(mel))))  # [B, C, T]
        x = x.transpose(0, 2, 1) + self.pos[: x.shape[2]]  # time-major from here on
        h = self.blocks[0].attn_ln(x)
        for i, blk in enumerate(self.blocks):
            q, k, v = _heads(blk.qkv(h), 3, cfg.encoder_heads)
            a = blk.out(_merge(self.attn.prefill(q, k, v)))
            x, h = blk.mlp_ln(a, x)
            m = blk.fc2(blk.fc1(h))
            nxt = self.blocks[i + 1].attn_ln if i + 1 < len(self.blocks) else self.ln_post
            x, h = nxt(m, x)
        return h


class DecoderState:
    """The device buffers of decoding ``batch`` sequences: caches, cross K/V, step inputs.

    Fixed addresses (a captured decode step reads them): per layer a self-attention cache
    ``[B, H, max_target_positions, D]`` and the window's cross-attention K/V
    ``[B, H, max_source_positions, D]``; int32 ``tokens``, ``positions`` and ``lengths``
    (``positions + 1``) of the step, written from the host before each step.
    """

    def __init__(self, cfg: WhisperConfig, batch: int, dtype: object) -> None:
        h, d = cfg.decoder_heads, cfg.head_dim
        self.batch = batch
        cache = (batch, h, cfg.max_target_positions, d)
        cross = (batch, h, cfg.max_source_positions, d)
        n = cfg.decoder_layers
        self.k = [gp.zeros(cache, dtype) for _ in range(n)]
        self.v = [gp.zeros(cache, dtype) for _ in range(n)]
        self.cross_k = [gp.zeros(cross, dtype) for _ in range(n)]
        self.cross_v = [gp.zeros(cross, dtype) for _ in range(n)]
        self.cross_lens = gp.full((batch,), cfg.max_source_positions, gp.int32)
        #: One upload per step: rows tokens, positions, lengths (positions + 1).
        self.inputs = gp.zeros((3, batch), gp.int32)
        self.tokens, self.positions, self.lengths = self.inputs[0], self.inputs[1], self.inputs[2]
        self.warm = False  # a step ran eagerly: its launch plans exist
        self.graph: object | None = None  # the captured step (decode)
        self.logits: GPUArray | None = None  # its output
        self.greedy: dict[str, Any] = {}  # the captured step + argmax + advance (greedy)


class Decoder:
    """Tokens + audio features -> next-token logits (float32), with a KV cache."""

    def __init__(self, w: Mapping[str, np.ndarray], cfg: WhisperConfig, dtype: object) -> None:
        self.cfg, self.dtype = cfg, np.dtype(dtype)  # type: ignore[call-overload]
        self.embed = _upload(w["dec.embed"], dtype)
        self.pos = _upload(w["dec.pos"], dtype)
        self.blocks = [_Block(w, f"dec.{i}.", dtype, True) for i in range(cfg.decoder_layers)]
        self.ln_post = LayerNorm(_upload(w["dec.ln.w"], dtype), _upload(w["dec.ln.b"], dtype))
        h, d = cfg.decoder_heads, cfg.head_dim
        self.causal = Attention(h, h, d, causal=True)
        self.full = Attention(h, h, d, causal=False)

    def set_audio(self, state: DecoderState, features: GPUArray) -> None:
        """Project the window's encoder output ``[B, T, C]`` into each layer's cross K/V."""
        h = self.cfg.decoder_heads
        for i, blk in enumerate(self.blocks):
            k, v = _heads(blk.cross_kv(features), 2, h)
            state.cross_k[i][...] = k
            state.cross_v[i][...] = v

    def _logits(self, h: GPUArray) -> GPUArray:
        """``h @ embed.T`` in float32 (tied output projection): ``[rows, vocab]``.

        16-bit models run the GEMV kernel with a float32 output, eight rows at a time: logits
        rounded to 16 bits would tie close tokens and flip argmaxes.
        """
        if self.dtype == np.float32:
            return linear(h, self.embed)
        step = ops.GEMV_MAX_ROWS
        parts = [ops.gemv(h[i : i + step], self.embed, out_dtype=np.float32)
                 for i in range(0, h.shape[0], step)]  # fmt: skip
        return parts[0] if len(parts) == 1 else gp.concatenate(parts, axis=0)

    def prefill(
        self, state: DecoderState, tokens: np.ndarray, rows: tuple[int, ...],
        record: dict[int, list[int]] | None = None, recorded: list[GPUArray] | None = None,
    ) -> GPUArray:  # fmt: skip
        """Run a prompt ``[B, S]`` (same length per row) and fill the caches.

        Returns the float32 logits ``[len(rows), B, vocab]`` after the prompt positions
        ``rows`` (the last one predicts the first new token; the one of ``<|startoftranscript|>``
        gives the no-speech probability). ``record`` (layer -> heads) appends to ``recorded``
        those heads' cross-attention weights ``[B, S, source positions]`` (float32), in
        layer order then head order: what word timestamps read.
        """
        b, s = tokens.shape
        cfg, heads = self.cfg, self.cfg.decoder_heads
        ids = gp.from_numpy(np.ascontiguousarray(tokens, np.int32))
        x = ops.embedding(ids, self.embed) + self.pos[:s]
        start = gp.zeros((b,), gp.int32)
        h = self.blocks[0].attn_ln(x)
        for i, blk in enumerate(self.blocks):
            q, k, v = _heads(blk.qkv(h), 3, heads)
            ops.kv_cache_append(k, v, state.k[i], state.v[i], start)
            a = blk.out(_merge(self.causal.prefill(q, k, v)))
            x, h = blk.cross_ln(a, x)
            (cq,) = _heads(blk.cross_q(h), 1, heads)
            if record and i in record and recorded is not None:
                recorded.extend(self._cross_weights(cq, state.cross_k[i], record[i]))
            c = blk.cross_out(_merge(self.full.prefill(cq, state.cross_k[i], state.cross_v[i])))
            x, h = blk.mlp_ln(c, x)
            m = blk.fc2(blk.fc1(h))
            nxt = self.blocks[i + 1].attn_ln if i + 1 < len(self.blocks) else self.ln_post
            x, h = nxt(m, x)
        picked = gp.concatenate([h[:, r] for r in rows], axis=0)  # [len(rows) * B, C]
        return self._logits(picked).reshape(len(rows), b, cfg.vocab_size)

    def _cross_weights(self, q: GPUArray, k: GPUArray, heads: list[int]) -> list[GPUArray]:
        """``softmax(q k^T / sqrt(D))`` of the given heads: ``[B, S, T]`` float32 each."""
        scale = 1.0 / float(np.sqrt(self.cfg.head_dim))
        out = []
        for h in heads:
            qh = q[:, h].astype(np.float32)
            kt = k[:, h].transpose(0, 2, 1).astype(np.float32)
            out.append(ops.softmax(gp.matmul(qh, kt) * scale))
        return out

    def step(self, state: DecoderState) -> GPUArray:
        """One token per row at ``state.positions`` over the caches: logits ``[B, vocab]``.

        Reads its inputs from ``state``'s device buffers only, so a CUDA graph of it replays
        for every position.
        """
        b, cfg = state.batch, self.cfg
        heads, d = cfg.decoder_heads, cfg.head_dim
        x = ops.embedding(state.tokens, self.embed) + ops.embedding(state.positions, self.pos)
        h = self.blocks[0].attn_ln(x)
        for i, blk in enumerate(self.blocks):
            qkv = blk.qkv(h).reshape(b, 3, heads, d).transpose(1, 0, 2, 3).copy()
            q, k, v = qkv[0], qkv[1], qkv[2]
            ops.kv_cache_append(
                k.reshape(b, heads, 1, d), v.reshape(b, heads, 1, d), state.k[i], state.v[i],
                state.positions,
            )  # fmt: skip
            o = self.causal.decode(q, state.k[i], state.v[i], state.lengths)
            x, h = blk.cross_ln(blk.out(o.reshape(b, cfg.d_model)), x)
            cq = blk.cross_q(h).reshape(b, heads, d)
            o = self.full.decode(cq, state.cross_k[i], state.cross_v[i], state.cross_lens)
            x, h = blk.mlp_ln(blk.cross_out(o.reshape(b, cfg.d_model)), x)
            m = blk.fc2(blk.fc1(h))
            nxt = self.blocks[i + 1].attn_ln if i + 1 < len(self.blocks) else self.ln_post
            x, h = nxt(m, x)
        return self._logits(h)
