"""Layers: weights plus launch plans made once, for model code (gpt-fast / vLLM style).

Each layer holds its weights (GPUArrays it never writes) and, per shape bucket, the launch
plan of the function it wraps (:mod:`pygpukit.ops._plan`): made at the first call with that
bucket, then only looked up in the layer's own dict. A call validates its inputs, allocates its
output (none with ``out=``) and enqueues the planned kernels; it reads no environment variable
and makes no plan. Results equal the function API's (:func:`pygpukit.ops.linear`, ...), which
builds the same plans. Guide: docs/ops-layers.md.

- :class:`Linear` (``Linear.fused`` for QKV / gate-up), :class:`GatedMLP`;
- :class:`RMSNorm`, :class:`LayerNorm` (with the fused residual add);
- :class:`Rotary`;
- :class:`Attention` (prefill, and decode over a contiguous or paged KV cache);
- :class:`Embedding`;
- :class:`Conv1d`, :class:`ConvTranspose1d`, :class:`LSTM` (PyTorch's layouts).

A layer's workspaces (the split-decode partials, the MLP's intermediate) are reused from call
to call. The MLP keeps one per calling thread, so threads may share a model's layers; use an
attention layer's decode from one thread and one stream at a time, as a forward pass does.
"""

from __future__ import annotations

from .attention import Attention
from .conv import LSTM, Conv1d, ConvTranspose1d
from .embedding import Embedding
from .linear import GatedMLP, Linear
from .norm import LayerNorm, RMSNorm
from .rotary import Rotary

__all__ = [
    "LSTM",
    "Attention",
    "Conv1d",
    "ConvTranspose1d",
    "Embedding",
    "GatedMLP",
    "LayerNorm",
    "Linear",
    "RMSNorm",
    "Rotary",
]
