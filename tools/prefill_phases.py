"""Where ``generate``'s host time goes around the GPU's, with no profiler attached.

    python tools/prefill_phases.py [--shape llama-3.1-8b] [--layers 0] [--prompt 1024]

A profiler (CUPTI) slows the host's first launches of each kernel and shifts the start of a
call, so the host time before a prefill's first kernel cannot be read from its trace. This tool
stamps a plain ``generate(max_new_tokens=1)`` instead: at each phase (request checked, prefill
entered, prompt uploaded, embedding, a few layers' attention, the head, the state's advance,
the return) it notes the host clock and records a CUDA event. The events say when the GPU
reached the same point. Where the GPU arrives a few microseconds after the host, it had run
dry and waited for that launch; where it arrives much later, the host was ahead.

Also the host cost of the prompt's upload in a few ways (pageable blocking, pinned source,
asynchronous on the stream), since that copy is the prefill's first GPU work. Imported by
``prefill_profile.py``; needs a CUDA GPU (torch only to build the weights).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.llm import CausalLM
from pygpukit.llm import generate as generate_module
from pygpukit.llm.models import llama

#: Layers whose attention entry is stamped (negative: from the end).
STAMPED_LAYERS = (0, 1, 2, 4, -1)


class Stamps:
    """Host times and CUDA events of named points in one call, in the order they happened."""

    def __init__(self) -> None:
        self.points: list[tuple[str, float, gp.Event]] = []

    def __call__(self, name: str) -> None:
        """Note the host time and record an event on the current stream."""
        self.points.append((name, time.perf_counter(), gp.Event(timing=True).record()))

    def rows(self) -> list[tuple[str, float, float]]:
        """``(name, host ms, GPU ms)`` from the first point (call after the work has finished)."""
        _, h0, e0 = self.points[0]
        return [(n, (h - h0) * 1e3, float(e0.elapsed_time(e))) for n, h, e in self.points]


@contextmanager
def stamped(model: CausalLM, stamps: Stamps) -> Iterator[None]:
    """Within the block, ``model``'s generate path calls ``stamps`` at its phases."""
    m, dec = model._model, model._decoder
    layers = {i % len(m.layers) for i in STAMPED_LAYERS}
    saved: list[tuple[Any, str, Any]] = []

    def wrap(owner: Any, attr: str, before: str | None, after: str | None = None) -> None:
        inner = getattr(owner, attr)
        saved.append((owner, attr, vars(owner).get(attr)))

        def call(*args: Any, **kwargs: Any) -> Any:
            if before:
                stamps(before)
            out = inner(*args, **kwargs)
            if after:
                stamps(after)
            return out

        setattr(owner, attr, call)

    wrap(model, "_request", None, "request checked")
    wrap(dec, "prefill", "prefill entered", "prefill enqueued")
    wrap(m, "embed", "embedding")
    wrap(m, "logits", "head")
    wrap(dec, "_advance", None, "advance enqueued")
    upload = generate_module.gp.from_numpy

    def from_numpy(*args: Any, **kwargs: Any) -> Any:
        out = upload(*args, **kwargs)
        stamps("prompt uploaded")
        return out

    projection = llama._UncachedAttend.from_projection

    def from_projection(self: Any, i: int, *args: Any, **kwargs: Any) -> Any:
        if i in layers:
            stamps(f"layer {i} attention")
        return projection(self, i, *args, **kwargs)

    generate_module.gp.from_numpy = from_numpy
    llama._UncachedAttend.from_projection = from_projection  # type: ignore[method-assign]
    try:
        yield
    finally:
        generate_module.gp.from_numpy = upload
        llama._UncachedAttend.from_projection = projection  # type: ignore[method-assign]
        for owner, attr, own in reversed(saved):
            if own is None:
                delattr(owner, attr)
            else:
                setattr(owner, attr, own)


def phase_report(model: CausalLM, prompt: list[int], rounds: int = 5) -> None:
    """Print each phase's host and GPU time (medians over ``rounds`` stamped generates)."""
    table: dict[str, list[tuple[float, float]]] = {}
    for r in range(rounds + 1):
        stamps = Stamps()
        gp.synchronize()
        with stamped(model, stamps):
            stamps("call")
            model.generate(prompt, max_new_tokens=1)
            stamps("returned")
        gp.synchronize()
        if r:  # the first round warms the wrappers' own paths
            for name, host, dev in stamps.rows():
                table.setdefault(name, []).append((host, dev))
    print(f"-- phases of generate(max_new_tokens=1), median of {rounds} (ms from the call; "
          "gpu - host near 0: the GPU waited for that launch)")  # fmt: skip
    print(f"  {'phase':24s} {'host':>8s} {'gpu':>8s} {'gpu-host':>9s}")
    for name, pairs in table.items():
        host = statistics.median(p[0] for p in pairs)
        dev = statistics.median(p[1] for p in pairs)
        print(f"  {name:24s} {host:8.3f} {dev:8.3f} {dev - host:9.3f}")


def upload_report(size: int, reps: int = 20) -> None:
    """Host microseconds of uploading ``size`` int32 values in the ways a prefill could."""
    host = np.arange(size, dtype=np.int32)
    pinned = gp.memory.pinned_empty((size,), np.int32)
    pinned[...] = host
    stream = gp.Stream()
    ways: dict[str, Callable[[], object]] = {
        "pageable, blocking": lambda: gp.from_numpy(host),
        "pinned, blocking": lambda: gp.from_numpy(pinned),
        "pageable, on a stream": lambda: gp.from_numpy(host, stream=stream),
        "pinned, on a stream": lambda: gp.from_numpy(pinned, stream=stream),
        "allocation alone": lambda: gp.empty((size,), gp.int32),
    }
    print(f"-- host time of a {size}-value int32 upload (median of {reps}, us)")
    for name, fn in ways.items():
        times = []
        for _ in range(reps):
            gp.synchronize()
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e6)
        print(f"  {name:26s} {statistics.median(times):8.1f}")
    gp.synchronize()


def main() -> None:
    """Build the model (random weights), print the phase and upload reports."""
    from llm_torch_common import prefill_arguments, prefill_pair

    parser = prefill_arguments(__doc__.splitlines()[0])
    args = parser.parse_args()
    cfg, _weights, model, _anchor = prefill_pair(args.shape, args.layers, args.prompt)
    prompt = np.random.default_rng(0).integers(3, cfg.vocab_size, args.prompt).tolist()
    for _ in range(2):
        model.generate(prompt, max_new_tokens=1)
    phase_report(model, prompt, args.rounds)
    upload_report(2 * args.prompt + model.max_seq_len + 1)


if __name__ == "__main__":
    main()
