"""A Llama-family decoder written directly in PyTorch: the ``llm`` benchmark's anchor.

It is what a careful PyTorch user writes for fast greedy decoding without a serving engine:
q/k/v and gate/up fused into one weight each, a static KV cache allocated once, and the whole
decode step (embedding, every layer, the head, argmax, the cache write and the position advance)
captured in one CUDA graph per batch size and replayed, so the sampled token never visits the
host. Prefill is eager PyTorch: one ``F.linear`` per fused weight and SDPA (flash attention) over
the prompt. Decode attention reads the static cache through two grouped batched matmuls (GQA
without copying the cache), masked to the positions written so far.

The math is transformers' (and :mod:`pygpukit.llm`'s): RMSNorm in float32, rounded to the model
dtype before its weight; rotate-half RoPE from the same ``inv_freq`` (the RoPE scaling types
and per-frequency factors included); q/k RMSNorm per head (Qwen3); q/k/v bias (Qwen2); sliding
windows (Mistral, as a mask over the full cache). The benchmark loads it with the same random
weights as PyGPUkit's model.

PyTorch is imported only when a :class:`TorchAnchor` is built: neither PyGPUkit nor its CI
depends on it. ``device`` is a parameter, so the decoder also runs (eagerly, without graphs) on
CPU tensors.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from pygpukit.ops.rope_scaling import rope_inv_freq

from .config import ModelConfig
from .loading import open_checkpoint
from .models.llama import EMBED, FINAL_NORM, FUSED, LM_HEAD, PLAIN, check_shapes

__all__ = ["TorchAnchor"]


def _torch() -> Any:
    import torch

    return torch


class _Layer:
    """One layer's fused weights as torch tensors (``None`` where the family has none)."""

    def __init__(self, get: Any, i: int, cfg: ModelConfig) -> None:
        torch = _torch()
        p = f"model.layers.{i}."

        def fuse(key: str) -> Any:
            return torch.cat([get(p + n) for n in FUSED[key]], dim=0).contiguous()

        def plain(key: str, present: bool = True) -> Any:
            return get(p + PLAIN[key]) if present else None

        self.input_norm = plain("input_norm")
        self.qkv = fuse("qkv")
        self.qkv_bias = fuse("qkv_bias") if cfg.qkv_bias else None
        self.o_proj = plain("o_proj")
        self.o_bias = plain("o_bias", cfg.o_bias)
        self.q_norm = plain("q_norm", cfg.qk_norm)
        self.k_norm = plain("k_norm", cfg.qk_norm)
        self.post_norm = plain("post_norm")
        self.gate_up = fuse("gate_up")
        self.down = plain("down")


class TorchAnchor:
    """Greedy batched decoding of a Llama-family model in plain PyTorch (see the module doc).

    ``weights`` maps Hugging Face tensor names to tensors or NumPy arrays (converted to
    ``dtype`` on ``device``). The KV cache holds ``max_batch`` sequences of ``max_seq_len``
    tokens. ``use_graphs`` (default: on CUDA devices) captures one CUDA graph per batch size.
    """

    def __init__(
        self,
        cfg: ModelConfig,
        weights: Mapping[str, Any],
        *,
        max_batch: int = 1,
        max_seq_len: int = 2048,
        device: str = "cuda",
        dtype: str = "bfloat16",
        use_graphs: bool | None = None,
    ) -> None:
        torch = _torch()
        check_shapes(cfg, {k: tuple(v.shape) for k, v in weights.items()}, "weights")
        if max_batch < 1 or max_seq_len < 2:
            raise ValueError(
                f"max_batch must be >= 1 and max_seq_len >= 2, got {max_batch}, {max_seq_len}"
            )
        self.config, self.device = cfg, torch.device(device)
        self.dtype = getattr(torch, dtype)
        self.max_batch, self.max_seq_len = max_batch, max_seq_len
        self.use_graphs = self.device.type == "cuda" if use_graphs is None else use_graphs

        def get(name: str) -> Any:
            value = weights[name]
            if isinstance(value, np.ndarray):
                value = _from_numpy(value, copy=self.device.type == "cpu")
            return value.to(device=self.device, dtype=self.dtype)

        with torch.no_grad():
            self.embed = get(EMBED)
            self.layers = [_Layer(get, i, cfg) for i in range(cfg.num_layers)]
            self.norm = get(FINAL_NORM)
            self.lm_head = self.embed if cfg.tie_word_embeddings else get(LM_HEAD)
        inv_freq, factor = rope_inv_freq(
            cfg.head_dim,
            cfg.rope_theta,
            cfg.rope_scaling,
            max_position_embeddings=cfg.max_position_embeddings,
        )
        if cfg.rope_freq_factors is not None:  # Llama 3.1 GGUF files store them per frequency
            inv_freq = inv_freq / np.asarray(cfg.rope_freq_factors, np.float64)
        freqs = np.outer(np.arange(max_seq_len, dtype=np.float64), inv_freq)
        angles = np.concatenate([freqs, freqs], axis=-1)
        # The tables in float32, rounded to the model dtype where they are used (as transformers).
        self.cos = torch.from_numpy((np.cos(angles) * factor).astype(np.float32)).to(self.device)
        self.sin = torch.from_numpy((np.sin(angles) * factor).astype(np.float32)).to(self.device)
        self.cos, self.sin = self.cos.to(self.dtype), self.sin.to(self.dtype)
        self.scale = 1.0 / math.sqrt(cfg.head_dim)
        shape = (cfg.num_layers, max_batch, cfg.num_kv_heads, max_seq_len, cfg.head_dim)
        self.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        # Decode state, updated by the step itself: the current token of each sequence, its
        # position (one for the batch: sequences of a batch share their prompt length) and the
        # token at every position.
        self.token = torch.zeros(max_batch, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(1, dtype=torch.long, device=self.device)
        self.history = torch.zeros(max_batch, max_seq_len, dtype=torch.long, device=self.device)
        self._arange = torch.arange(max_seq_len, device=self.device)
        self._graphs: dict[int, Any] = {}

    @classmethod
    def from_checkpoint(
        cls, folder: str | os.PathLike[str], cfg: ModelConfig, **kwargs: Any
    ) -> TorchAnchor:
        """The anchor with the weights of a SafeTensors checkpoint ``folder``.

        Tensors are read through PyGPUkit's memory map (no ``safetensors`` package needed) and
        uploaded by PyTorch; ``kwargs`` go to the constructor.
        """
        with open_checkpoint(folder) as ckpt:
            names = ckpt.tensor_names()
            weights = {n: ckpt.host_view(n) for n in names}  # type: ignore[attr-defined]
            return cls(cfg, weights, **kwargs)

    # --- the math --------------------------------------------------------------------------

    def _rmsnorm(self, x: Any, weight: Any) -> Any:
        torch = _torch()
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.config.rms_norm_eps)
        return weight * xf.to(x.dtype)

    @staticmethod
    def _rope(x: Any, cos: Any, sin: Any) -> Any:
        """Rotate-half RoPE of ``x`` ``[B, H, S, D]`` with ``cos``/``sin`` ``[S, D]``."""
        torch = _torch()
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def _qkv(self, lw: _Layer, x: Any, cos: Any, sin: Any) -> tuple[Any, Any, Any]:
        """Queries ``[B, Hq, S, D]``, keys and values ``[B, Hkv, S, D]`` of normed ``x``."""
        F = _torch().nn.functional
        cfg = self.config
        b, s = x.shape[0], x.shape[1]
        qkv = F.linear(x, lw.qkv, lw.qkv_bias)
        q, k, v = qkv.split([cfg.q_size, cfg.kv_size, cfg.kv_size], dim=-1)
        q = q.view(b, s, cfg.num_heads, cfg.head_dim).transpose(1, 2)
        k = k.view(b, s, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        v = v.view(b, s, cfg.num_kv_heads, cfg.head_dim).transpose(1, 2)
        if lw.q_norm is not None:
            q, k = self._rmsnorm(q, lw.q_norm), self._rmsnorm(k, lw.k_norm)
        return self._rope(q, cos, sin), self._rope(k, cos, sin), v

    def _mlp_block(self, lw: _Layer, x: Any, attn: Any) -> Any:
        """The residual stream after attention output ``attn`` and the MLP."""
        F = _torch().nn.functional
        x = x + F.linear(attn, lw.o_proj, lw.o_bias)
        gate, up = F.linear(self._rmsnorm(x, lw.post_norm), lw.gate_up).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, lw.down)

    def _next_token(self, x: Any) -> Any:
        """Greedy next token ``[B]`` of the last hidden states ``x`` ``[B, hidden]``."""
        F = _torch().nn.functional
        return F.linear(self._rmsnorm(x, self.norm), self.lm_head).argmax(dim=-1)

    def _window_mask(self, s: int) -> Any:
        """The boolean ``[S, S]`` mask of a sliding window shorter than ``s``, else ``None``."""
        w = self.config.sliding_window
        if w is None or s <= w:
            return None
        i, j = self._arange[:s, None], self._arange[None, :s]
        return (j <= i) & (j > i - w)

    def _prefill(self, ids: Any) -> None:
        """Fill the cache with ``ids`` ``[B, S]`` and take the first greedy token (eager)."""
        F = _torch().nn.functional
        b, s = ids.shape
        cos, sin = self.cos[:s], self.sin[:s]
        mask = self._window_mask(s)
        gqa = self.config.num_heads != self.config.num_kv_heads
        x = F.embedding(ids, self.embed)
        for i, lw in enumerate(self.layers):
            q, k, v = self._qkv(lw, self._rmsnorm(x, lw.input_norm), cos, sin)
            self.k_cache[i, :b, :, :s] = k
            self.v_cache[i, :b, :, :s] = v
            o = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, is_causal=mask is None, scale=self.scale, enable_gqa=gqa
            )
            x = self._mlp_block(lw, x, o.transpose(1, 2).reshape(b, s, self.config.q_size))
        first = self._next_token(x[:, -1])
        self.token[:b] = first
        self.pos.fill_(s)
        self.history[:b, :s] = ids
        self.history[:b, s] = first

    def _decode_step(self, b: int) -> None:
        """One greedy step of the first ``b`` sequences; reads and advances the device state."""
        torch = _torch()
        F = torch.nn.functional
        cfg = self.config
        groups = cfg.num_heads // cfg.num_kv_heads
        pos = self.pos
        cos, sin = self.cos.index_select(0, pos), self.sin.index_select(0, pos)
        visible = self._arange <= pos
        if cfg.sliding_window is not None:
            visible = visible & (self._arange > pos - cfg.sliding_window)
        x = F.embedding(self.token[:b, None], self.embed)  # [b, 1, hidden]
        for i, lw in enumerate(self.layers):
            q, k, v = self._qkv(lw, self._rmsnorm(x, lw.input_norm), cos, sin)
            kc, vc = self.k_cache[i, :b], self.v_cache[i, :b]
            kc.index_copy_(2, pos, k)
            vc.index_copy_(2, pos, v)
            # Query heads h * groups .. h * groups + groups - 1 share kv head h.
            qg = q.reshape(b, cfg.num_kv_heads, groups, cfg.head_dim)
            scores = torch.matmul(qg, kc.transpose(-1, -2)) * self.scale
            scores = scores.masked_fill(~visible, float("-inf"))
            probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(self.dtype)
            o = torch.matmul(probs, vc).reshape(b, 1, cfg.q_size)
            x = self._mlp_block(lw, x, o)
        nxt = self._next_token(x[:, 0])
        self.token[:b].copy_(nxt)
        pos.add_(1)
        self.history[:b].index_copy_(1, pos, nxt[:, None])

    # --- the host-side API -----------------------------------------------------------------

    def _graph(self, b: int) -> Any:
        """The CUDA graph of one decode step at batch ``b``, captured on first use.

        Capture needs warm-up steps (cuBLAS picks its kernels on a side stream), which write
        garbage into the cache and the state: it runs before a prefill, which overwrites both.
        """
        torch = _torch()
        if b not in self._graphs:
            self.pos.zero_()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.no_grad():
                for _ in range(3):
                    self._decode_step(b)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph), torch.no_grad():
                self._decode_step(b)
            self._graphs[b] = graph
        return self._graphs[b]

    def prefill(self, ids: np.ndarray) -> None:
        """Queue the prefill of ``ids`` ``[B, S]`` (equal-length prompts); no host wait."""
        torch = _torch()
        ids = np.asarray(ids)
        if ids.ndim != 2 or not 1 <= ids.shape[0] <= self.max_batch:
            raise ValueError(f"ids must be [B, S] with 1 <= B <= {self.max_batch}, got {ids.shape}")
        b, s = ids.shape
        if s + 1 >= self.max_seq_len:
            raise ValueError(f"a {s}-token prompt leaves no room in a {self.max_seq_len} cache")
        if self.use_graphs:
            self._graph(b)  # before the prefill: capturing overwrites the state
        with torch.no_grad():
            self._prefill(torch.from_numpy(ids.astype(np.int64)).to(self.device))

    def decode(self, b: int, steps: int) -> None:
        """Queue ``steps`` greedy steps of the ``b`` sequences prefilled last; no host wait."""
        torch = _torch()
        graph = self._graph(b) if self.use_graphs else None
        with torch.no_grad():
            for _ in range(steps):
                if graph is not None:
                    graph.replay()
                else:
                    self._decode_step(b)

    def tokens(self, b: int, start: int, n: int) -> np.ndarray:
        """The ``[b, n]`` token ids at positions ``start ..`` (waits for the queued steps)."""
        return self.history[:b, start : start + n].cpu().numpy()

    def generate(self, ids: np.ndarray, max_new_tokens: int) -> np.ndarray:
        """Greedy continuations ``[B, max_new_tokens]`` of equal-length prompts ``ids``."""
        ids = np.asarray(ids)
        b, s = ids.shape
        if max_new_tokens < 1 or s + max_new_tokens > self.max_seq_len:
            raise ValueError(
                f"max_new_tokens must be in [1, {self.max_seq_len - s}] for a {s}-token prompt, "
                f"got {max_new_tokens}"
            )
        self.prefill(ids)
        self.decode(b, max_new_tokens - 1)
        return self.tokens(b, s, max_new_tokens)


def _from_numpy(a: np.ndarray, copy: bool) -> Any:
    """A torch tensor of ``a``; bfloat16 (ml_dtypes, which torch cannot take) by its bits.

    ``copy``: of a copy, for tensors that stay on the CPU (``a`` may be a read-only memory map,
    closed after loading); else a view that only lives until it is uploaded.
    """
    torch = _torch()
    a = np.array(a, copy=True, order="C") if copy else np.ascontiguousarray(a)
    bf16 = a.dtype.name == "bfloat16"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only: the upload only reads it
        t = torch.from_numpy(a.view(np.int16) if bf16 else a)
    return t.view(torch.bfloat16) if bf16 else t
