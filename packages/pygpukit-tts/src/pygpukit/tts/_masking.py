"""Padded batches of utterances: each one's valid length at one time resolution, and its mask.

A batch of utterances of different lengths is padded to the longest. Two things would let the
padding change an utterance's result, and both are handled here:

- a convolution reads its neighbours: the padding must be zeros, as the zero padding one
  utterance alone would see (:meth:`Lengths.zero_padding` before each convolution);
- an instance norm (AdaIN) averages over time: its statistics must cover the valid frames
  only (:func:`ada_in`: the fused :func:`pygpukit.ops.ada_in` with each utterance's valid
  length, which also writes the padding as zeros).

A batch whose utterances have equal lengths (batch 1 included) skips all of it, unless its
lengths live on the device (a CUDA graph's inputs, :mod:`pygpukit.tts._graphs`): a graph runs
the same work whatever lengths it is replayed with.
"""

from __future__ import annotations

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray

__all__ = ["Lengths", "ada_in"]


class Lengths:
    """Valid lengths ``[B]`` of a batch padded to ``width`` steps, with its mask (made lazily).

    ``device``: the same lengths as an int64 GPUArray ``[B]`` that the caller rewrites before
    each run (a CUDA graph's input). Then every mask is computed from it on the device, no
    host copy is made, and nothing counts as full: the same work runs whatever the lengths.
    """

    def __init__(self, lengths: np.ndarray, width: int, *, device: GPUArray | None = None) -> None:
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.width = int(width)
        #: Whether the masks come from device lengths (a graph input) rather than the host.
        self.on_device = device is not None
        #: True when no utterance is padded: nothing to mask.
        self.full = not self.on_device and bool((self.lengths == self.width).all())
        self._mask: GPUArray | None = None
        self._typed: dict[np.dtype, GPUArray] = {}
        self._device = device

    def scaled(self, factor: int, extra: int = 0) -> Lengths:
        """The lengths after an ``factor``-times upsampling (plus ``extra`` steps each)."""
        device = self.device * factor + extra if self.on_device else None
        return Lengths(self.lengths * factor + extra, self.width * factor + extra, device=device)

    @property
    def mask(self) -> GPUArray:
        """``[B, 1, width]`` float32: 1 on valid steps, 0 on padding."""
        if self._mask is None:
            if self.on_device:
                valid = gp.arange(self.width) < self.device.reshape(-1, 1)
                self._mask = valid.astype(gp.float32).reshape(-1, 1, self.width)
            else:
                valid = np.arange(self.width)[None, :] < self.lengths[:, None]
                self._mask = gp.from_numpy(valid.astype(np.float32).reshape(-1, 1, self.width))
        return self._mask

    def key_mask(self, score: np.float32) -> GPUArray | None:
        """Attention's additive key mask ``[B, 1, 1, width]``: ``score`` on padded keys.

        None when nothing is padded.
        """
        b = len(self.lengths)
        if self.full:
            return None
        if self.on_device:
            padded = (gp.arange(self.width) >= self.device.reshape(-1, 1)).astype(gp.float32)
            return (padded * score).reshape(b, 1, 1, self.width)
        padded = np.arange(self.width)[None, :] >= self.lengths[:, None]
        return gp.from_numpy(np.where(padded, score, np.float32(0)).reshape(b, 1, 1, self.width))

    def mask_like(self, x: GPUArray) -> GPUArray:
        """:attr:`mask` in ``x``'s dtype (a 16-bit signal stays 16-bit when masked)."""
        if x.dtype not in self._typed:
            self._typed[x.dtype] = self.mask.astype(x.dtype)
        return self._typed[x.dtype]

    @property
    def device(self) -> GPUArray:
        """``[B]`` int64 valid lengths on the device (uploaded once)."""
        if self._device is None:
            self._device = gp.from_numpy(self.lengths)
        return self._device

    def for_lstm(self) -> np.ndarray | GPUArray | None:
        """The lengths :func:`pygpukit.ops.lstm` takes, or None where nothing is padded."""
        if self.on_device:
            return self.device
        return None if self.full else self.lengths

    def zero_padding(self, x: GPUArray) -> GPUArray:
        """``x`` ``[B, C, width]`` with its padded steps set to zero."""
        return x if self.full else x * self.mask_like(x)


def ada_in(
    x: GPUArray,
    gamma: GPUArray,
    beta: GPUArray,
    lengths: Lengths,
    *,
    weight: GPUArray | None = None,
    bias: GPUArray | None = None,
    activation: str | None = None,
    negative_slope: float = 0.2,
    alpha: GPUArray | None = None,
    eps: float = 1e-5,
) -> GPUArray:
    """:func:`pygpukit.ops.ada_in` over the valid steps of each utterance of a padded batch.

    Where the batch is padded, the statistics come from the valid steps only and the result's
    padding is zero (ready for a convolution): one fused pass either way.
    """
    return ops.ada_in(
        x, gamma, beta, weight=weight, bias=bias, eps=eps, activation=activation,
        negative_slope=negative_slope, alpha=alpha,
        lengths=None if lengths.full else lengths.device,
    )  # fmt: skip
