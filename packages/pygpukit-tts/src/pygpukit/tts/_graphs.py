"""Kokoro synthesis as two replayed CUDA graphs: the per-token half and the per-frame half.

A synthesis is about 740 small kernels; launched one by one from Python, the host is the
bottleneck at batch 1. Each half is captured once per length bucket and replayed after:

- the **phoneme graph** of a batch of ``B`` utterances padded to ``T`` tokens runs ALBERT, the
  duration encoder and predictor and the text encoder
  (:meth:`~pygpukit.tts.kokoro.KokoroNetwork.phoneme_half`);
- the host then reads the predicted durations (the one round trip: the number of frames
  decides the second half's shape), rounds them and builds the hard alignment;
- the **frame graph** of ``B`` utterances padded to ``F`` frames runs the F0 and energy
  branches, the decoder and the generator
  (:meth:`~pygpukit.tts.kokoro.KokoroNetwork.frame_half`).

Each graph reads fixed input buffers that are rewritten before each replay: token ids, styles
and the valid lengths, from which the masks are computed on the device
(:class:`~pygpukit.tts._masking.Lengths` with ``device=``), so one graph serves every length in
its bucket. Buckets round up to a sixteenth of the length's power of two (at least
:data:`MIN_STEP`): at most about 6 % padding, a logarithmic number of graphs. A bucket's first
call runs eagerly on the same buffers (warming every kernel and plan cache and making the
conv weights' rearranged copies, none of which a capture can do: a copy made in a capture
would only be written at a replay) and then captures; later calls replay. Each graph keeps its
intermediate buffers in a private pool region (its peak working set), so at most
:data:`MAX_GRAPHS` graphs of each half are kept, least recently used dropped first.

Graphs pay where the host sets the pace: a batch past :data:`MAX_GRAPH_TOKENS` padded tokens
runs eagerly, and a frame half past :data:`MAX_GRAPH_FRAMES` padded frames too.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from ._masking import Lengths

if TYPE_CHECKING:
    from .kokoro import KokoroNetwork, PhonemeOutputs

__all__ = [
    "MAX_GRAPHS",
    "MAX_GRAPH_FRAMES",
    "MAX_GRAPH_TOKENS",
    "MIN_STEP",
    "SynthesisGraphs",
    "bucket",
    "token_bucket",
]

log = logging.getLogger(__name__)

#: The smallest bucket step (tokens or frames).
MIN_STEP = 16
#: Graphs kept per half (each holds its working set: about 0.1-0.2 GB at batch 1).
MAX_GRAPHS = 6
#: The largest padded batch (utterances x bucket) each half is captured for. Past it the GPU,
#: not the host, sets the pace, and replaying measured slower than launching (batch 16 x 464
#: frames: 151 vs 132 ms on an H200), so such a call runs eagerly, unpadded.
MAX_GRAPH_TOKENS = 1024
MAX_GRAPH_FRAMES = 2048


def bucket(length: int, limit: int | None = None) -> int:
    """``length`` rounded up to its bucket: a multiple of ``max(MIN_STEP, 2**floor(log2) / 16)``.

    ``limit`` caps the result (never below ``length``).
    """
    step = max(MIN_STEP, (1 << max(length, 1).bit_length() - 1) // 16)
    rounded = -(-length // step) * step
    return max(length, min(rounded, limit)) if limit is not None else rounded


Outputs = TypeVar("Outputs")


@dataclass
class _Entry(Generic[Outputs]):
    """One bucket's input buffers, and its graph and outputs once captured."""

    inputs: dict[str, GPUArray]
    graph: gp.Graph | None = None
    outputs: Outputs | None = None
    #: Capture failed: this bucket runs eagerly (same buffers, same results).
    eager_only: bool = False


@dataclass
class _Half(Generic[Outputs]):
    """The graphs of one half, by bucket key, least recently used first."""

    name: str
    capacity: int
    #: Whether to capture (the CPU backend has no graphs: every bucket runs eagerly there).
    capture: bool
    entries: OrderedDict[tuple[int, ...], _Entry[Outputs]] = field(default_factory=OrderedDict)
    #: Calls served by a replay, and calls run eagerly (a bucket's first, or capture failed).
    replays: int = 0
    eager: int = 0

    def entry(self, key: tuple[int, ...], make: Callable[[], dict[str, GPUArray]]) -> _Entry:
        """The bucket's entry (made with ``make``'s buffers on first use), now most recent."""
        found = self.entries.get(key)
        if found is None:
            found = self.entries[key] = _Entry(make())
            while len(self.entries) > self.capacity:
                self.entries.popitem(last=False)  # drops its graph and pool region
        self.entries.move_to_end(key)
        return found

    def run(self, key: tuple[int, ...], e: _Entry[Outputs], body: Callable[[], Outputs]) -> Outputs:
        """Replay ``e``'s graph, or run ``body`` eagerly and capture it for the next call."""
        if e.graph is not None and e.outputs is not None:
            e.graph.replay(gp.current_stream())
            self.replays += 1
            return e.outputs
        out = body()
        self.eager += 1
        if self.capture and not e.eager_only:
            try:
                with gp.graph_capture() as g:
                    captured = body()
            except Exception as exc:  # keep synthesizing eagerly: slower, same results
                e.eager_only = True
                log.warning(
                    "the Kokoro %s half at %s could not be captured as a CUDA graph (%s: %s); "
                    "it runs eagerly", self.name, key, type(exc).__name__, exc,
                )  # fmt: skip
            else:
                e.graph, e.outputs = g, captured
        return out


def token_bucket(ids: Sequence[np.ndarray], limit: int) -> int | None:
    """The token bucket of a batch's phoneme graph, or None where the batch is too big for one.

    ``limit``: the longest bucket (ALBERT's positions).
    """
    width = bucket(max(len(i) for i in ids), limit)
    return width if len(ids) * width <= MAX_GRAPH_TOKENS else None


class SynthesisGraphs:
    """Replays :class:`~pygpukit.tts.kokoro.KokoroNetwork`'s two halves as CUDA graphs.

    ``max_graphs``: graphs kept per half. Calls from several threads take turns (the input
    buffers are shared). On the CPU backend nothing is captured: each bucket runs eagerly on
    the same padded inputs (what the tests check there).
    """

    def __init__(self, network: KokoroNetwork, max_graphs: int = MAX_GRAPHS) -> None:
        self.network = network
        capture = gp.backend_name() == "cuda"
        self.phonemes: _Half[PhonemeOutputs] = _Half("phoneme", max_graphs, capture)
        self.frames: _Half[GPUArray] = _Half("frame", max_graphs, capture)
        self._lock = threading.Lock()

    def run(
        self,
        ids: Sequence[np.ndarray],
        refs: Sequence[np.ndarray],
        speed: float,
        forced: Sequence[np.ndarray] | None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Audio ``[B, samples]``, frames ``[B]`` and frames per token ``[B, T]`` of a batch.

        The batch must fit a phoneme graph (:func:`token_bucket`); a frame half past
        :data:`MAX_GRAPH_FRAMES` runs eagerly, unpadded.
        """
        from .kokoro import alignment_rows, frame_counts, gather_frames

        with self._lock:
            b = len(ids)
            width = token_bucket(ids, self.network.weights.positions.shape[0])
            if width is None:
                raise ValueError(f"a batch of {b} this long does not fit a phoneme graph")
            token_lengths = np.array([len(i) for i in ids], np.int64)
            styles = np.stack([np.asarray(r, np.float32).reshape(-1) for r in refs])
            ph = self._phoneme_half(b, width, ids, token_lengths, styles)
            durations = frame_counts(ph.duration.to_numpy(), token_lengths, speed, forced)
            lengths = durations.sum(axis=1)
            frames = bucket(int(lengths.max()))
            if b * frames > MAX_GRAPH_FRAMES:
                valid = Lengths(lengths, int(lengths.max()))
                rows = gp.from_numpy(alignment_rows(durations, valid.width))
                en, asr = gather_frames(ph, rows)
                audio = self.network.frame_half(en, asr, ph.styles, valid, None)
                return audio.to_numpy(), lengths, durations
            e = self.frames.entry((b, frames), lambda: self._frame_inputs(ph, styles, frames))
            rows = gp.from_numpy(alignment_rows(durations, frames))
            gather_frames(ph, rows, out=(e.inputs["en"], e.inputs["asr"]))
            e.inputs["lengths"][...] = lengths
            e.inputs["ref"][...] = styles
            audio = self.frames.run((b, frames), e, lambda: self._frame_body(e, lengths, frames))
            return audio.to_numpy(), lengths, durations

    def _phoneme_half(
        self,
        b: int,
        width: int,
        ids: Sequence[np.ndarray],
        lengths: np.ndarray,
        styles: np.ndarray,
    ) -> PhonemeOutputs:
        def make() -> dict[str, GPUArray]:
            return {
                "ids": gp.empty((b, width), gp.int64),
                "lengths": gp.empty((b,), gp.int64),
                "ref": gp.empty(styles.shape, gp.float32),
            }

        e = self.phonemes.entry((b, width), make)
        padded = np.zeros((b, width), np.int64)
        for i, row in enumerate(ids):
            padded[i, : len(row)] = row
        e.inputs["ids"][...] = padded
        e.inputs["lengths"][...] = lengths
        e.inputs["ref"][...] = styles

        def body() -> PhonemeOutputs:
            tokens = Lengths(lengths, width, device=e.inputs["lengths"])
            return self.network.phoneme_half(e.inputs["ids"], e.inputs["ref"], tokens)

        return self.phonemes.run((b, width), e, body)

    @staticmethod
    def _frame_inputs(ph: PhonemeOutputs, styles: np.ndarray, frames: int) -> dict[str, GPUArray]:
        b = styles.shape[0]
        return {
            "en": gp.empty((b, frames, ph.features.shape[2]), ph.features.dtype),
            "asr": gp.empty((b, frames, ph.text.shape[2]), ph.text.dtype),
            "lengths": gp.empty((b,), gp.int64),
            "ref": gp.empty(styles.shape, gp.float32),
        }

    def _frame_body(self, e: _Entry[GPUArray], lengths: np.ndarray, frames: int) -> GPUArray:
        net, x = self.network, e.inputs
        valid = Lengths(lengths, frames, device=x["lengths"])
        return net.frame_half(x["en"], x["asr"], net.styles(x["ref"]), valid, None)
