"""Where one prefill's time goes: TTFT against the matmuls alone, kernels, GPU idle gaps, host.

    python tools/prefill_profile.py [--shape llama-3.1-8b] [--layers 0] [--prompt 1024]

Random bfloat16 weights are made on the GPU by PyTorch once and shared (DLPack, no copy) by
``pygpukit.llm.CausalLM`` and the PyTorch anchor (eager prefill). Prints:

- the median time to first token (``generate(max_new_tokens=1)``, prompt to the token on the
  host) of PyGPUkit (eager; the prefill replayed from a graph, ``PYGPUKIT_LLM_PREFILL_GRAPHS``;
  with Python's garbage collector paused) and of the anchor, in interleaved rounds, and each
  as a multiple of the llm suite's ``matmul_ms`` (its ``ttft_over_matmul``);
- the host and GPU times of the phases of a prefill, eager and replayed (``prefill_phases.py``:
  where the GPU waits for the host);
- the prefill's weight GEMMs alone at the prompt's own shapes (each timed with CUDA events,
  summed over the layers, the head's one row added), in PyTorch and in PyGPUkit
  (``ops.linear``), and PyTorch's bfloat16 8192^3 rate: TTFT as a multiple of each (the
  acceptance asks for at most 1.3x of the FLOP time at the measured GEMM rate);
- how long the host takes to enqueue the prefill (call to return, no wait) against the total;
- one prefill under ``torch.profiler`` (CUPTI): kernel time by name, the GPU's busy span and
  the idle time between kernels, with the largest gaps and the kernels around them, the host
  time before the first kernel and after the last, and the first launches and kernels in
  time order (which ones the GPU waited for);
- a host profile (cProfile) of one ``generate``.

Setup and timing helpers are shared with ``prefill_ttft.py`` (``llm_torch_common.py``).
Needs torch with CUDA.
"""

from __future__ import annotations

import cProfile
import gc
import io
import itertools
import pstats
import statistics
import time
import traceback
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import torch
from llm_torch_common import (
    event_ms,
    gemm_shapes,
    interleaved_ms,
    matmul_ms,
    prefill_arguments,
    prefill_pair,
    wall_ms,
)
from prefill_phases import phase_report

import pygpukit as gp
from pygpukit import ops
from pygpukit.llm import CausalLM
from pygpukit.llm.config import ModelConfig
from pygpukit.llm.padded_prefill import PaddedPrefill


def square_rate(n: int = 8192, reps: int = 10) -> float:
    """PyTorch's bfloat16 n^3 matmul rate in TFLOP/s (the suite's gemm_bfloat16 ceiling)."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    ms = event_ms(lambda: a @ b, reps, "torch")
    return 2 * n**3 / (ms * 1e-3) / 1e12


def prefill_flops(cfg: ModelConfig, rows: int) -> int:
    """The llm suite's matmul FLOPs of a prefill (``_prefill_flops``)."""
    return sum(2 * c * m * n * k for c, m, n, k in gemm_shapes(cfg, rows))


#: Host-side CUDA calls (runtime and driver API) that put work on the GPU, by name prefix.
_ENQUEUES = ("cudaLaunch", "cuLaunch", "cudaMemcpy", "cuMemcpy", "cudaMemset", "cuMemset")


def kernel_report(fn: Callable[[], object], rows: int = 25, timeline: int = 40) -> None:
    """One call of ``fn`` under torch.profiler: kernels by name, busy span, idle gaps.

    Also where the call's time goes around the GPU's busy span (host work before the first
    kernel, after the last), each large gap's place (the index of the kernel after it), and a
    timeline of the first ``timeline`` launches and kernels: which of them the GPU waited for.
    """
    from torch.profiler import ProfilerActivity, profile, record_function

    gp.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        with record_function("generate"):
            fn()
        gp.synchronize()
    kernels, launches, call = [], [], None
    for e in prof.events():
        if e.name == "generate":  # the marker (CPU range, and its GPU-side twin)
            if e.device_type.name != "CUDA":
                call = (e.time_range.start, e.time_range.end)
        elif e.device_type.name == "CUDA":
            kernels.append((e.time_range.start, e.time_range.end, e.name))
        elif e.name.startswith(_ENQUEUES):
            launches.append((e.time_range.start, e.time_range.end, e.name))
    kernels.sort()
    launches.sort()
    if not kernels:
        print("no kernels recorded")
        return
    by_name: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for s, e, name in kernels:
        by_name[name][0] += e - s
        by_name[name][1] += 1
    busy = sum(e - s for s, e, _ in kernels)
    span = kernels[-1][1] - kernels[0][0]
    gaps = []
    for i, ((_, e0, n0), (s1, _, n1)) in enumerate(itertools.pairwise(kernels)):
        if s1 > e0:
            gaps.append((s1 - e0, i + 1, n0, n1))
    idle = sum(g[0] for g in gaps)
    print(
        f"-- one prefill: {len(kernels)} kernels, {busy / 1e3:.3f} ms kernel time, span "
        f"{span / 1e3:.3f} ms first start to last end, {idle / 1e3:.3f} ms idle between kernels"
    )
    if call is not None:
        total, before = (call[1] - call[0]) / 1e3, (kernels[0][0] - call[0]) / 1e3
        print(
            f"  generate() {total:.3f} ms: {before:.3f} ms before the first GPU activity, "
            f"{(call[1] - kernels[-1][1]) / 1e3:.3f} ms after the last; {len(launches)} "
            "launch/copy calls on the host"
        )
    for name, (t, n) in sorted(by_name.items(), key=lambda kv: -kv[1][0])[:rows]:
        print(f"  {t / 1e3:8.3f} ms {int(n):5d}x  {name[:100]}")
    print("-- largest gaps (us, #index of the kernel after, after -> before)")
    for g, i, n0, n1 in sorted(gaps, reverse=True)[:12]:
        print(f"  {g:8.1f} #{i:<4d} {n0[:48]} -> {n1[:48]}")
    small = [g[0] for g in gaps]
    if small:
        short = sum(g for g in small if g < 20) / 1e3
        print(f"  gaps: {len(small)}, median {statistics.median(small):.2f} us, "
              f"sum of those under 20 us {short:.3f} ms")  # fmt: skip
    if call is None:
        return
    # Host calls (H) and GPU work (G) merged in time, from the call's start: a G row that starts
    # right after its H row is work the GPU waited for.
    merged = [(s, e, "H", n) for s, e, n in launches] + [(s, e, "G", n) for s, e, n in kernels]
    merged.sort()
    print(f"-- the first {timeline} host calls (H) and GPU activities (G), us from the call")
    shown = 0
    for s, e, kind, name in merged:
        print(f"  {kind} {(s - call[0]):9.1f} {(e - s):8.1f}  {name[:70]}")
        shown += kind == "G"
        if shown >= timeline // 2:
            break


def host_report(fn: Callable[[], object], rows: int = 30) -> None:
    """A host profile (cProfile) of one call of ``fn`` and the wait after it, by own time."""
    pr = cProfile.Profile()
    gp.synchronize()
    pr.enable()
    fn()
    gp.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(rows)
    print("-- host profile of one generate (cProfile, by own time)")
    print(s.getvalue())


def graph_report(model: CausalLM, prompt: list[int], reps: int = 5) -> None:
    """The prefill's device work (inputs already uploaded) eager and replayed as one graph.

    The same kernels both ways: what the replay saves is the time the GPU waited for the host
    between launches (and the launches' own latency).
    """
    m, cache = model._model, model._cache
    s = len(prompt)
    both = gp.from_numpy(np.stack([np.asarray(prompt, np.int32), np.arange(s, dtype=np.int32)]))
    ids, positions = both[0:1], both[1:2]
    token = gp.zeros((1,), gp.int32)

    def body() -> None:
        attend = m.attend_uncached(cache=(cache.k, cache.v), slots=positions)
        x = m.hidden_states(ids, positions, attend, last_position_only=True)
        ops.argmax(m.logits(x[:, 0]), out=token)

    def wall(fn: Callable[[], object]) -> float:
        gp.synchronize()
        start = time.perf_counter()
        fn()
        gp.synchronize()
        return (time.perf_counter() - start) * 1e3

    body()
    eager = statistics.median(wall(body) for _ in range(reps))
    try:
        with gp.graph_capture() as g:
            body()
        g.replay()
        replay = statistics.median(wall(g.replay) for _ in range(reps))
    except Exception as exc:  # a capture the prefill cannot take says why, the run goes on
        print(f"prefill device work: eager {eager:.2f} ms; graph capture failed: {exc!r}")
        return
    print(f"prefill device work (inputs on the device): eager {eager:.2f} ms, one graph "
          f"replayed {replay:.2f} ms")  # fmt: skip


def main() -> None:
    """Parse the arguments, build both models, print the reports."""
    parser = prefill_arguments(__doc__.splitlines()[0], rounds=7)
    parser.add_argument("--no-profile", action="store_true", help="timings only")
    args = parser.parse_args()
    t0 = time.perf_counter()
    cfg, _weights, model, anchor = prefill_pair(args.shape, args.layers, args.prompt)
    print(f"built in {time.perf_counter() - t0:.1f} s: {args.shape}, {cfg.num_layers} layers, "
          f"{args.prompt}-token prompt, bf16, {torch.cuda.get_device_name()}")  # fmt: skip
    rng = np.random.default_rng(0)
    ids = rng.integers(3, cfg.vocab_size, (1, args.prompt))
    prompt = ids[0].tolist()

    def ours() -> object:
        return model.generate(prompt, max_new_tokens=1).token_ids

    def theirs() -> object:
        anchor.prefill(ids)
        return anchor.tokens(1, args.prompt, 1)

    dec = model.decoder
    graphs = PaddedPrefill(dec.model, dec.cache, capture=True)

    def ours_graph() -> object:
        # The prefill padded to a multiple of 64 tokens and replayed from its captured graph
        # (PYGPUKIT_LLM_PREFILL_GRAPHS); its first call runs eagerly, the second captures.
        dec.padded = graphs
        try:
            return ours()
        finally:
            dec.padded = None

    def ours_no_gc() -> object:
        # The same with Python's cyclic collector paused: what a collection in the middle of
        # a prefill's launches costs the time to first token.
        gc.disable()
        try:
            return ours()
        finally:
            gc.enable()

    dec.padded = None  # the eager prefill unless a case asks (whatever the environment says)
    try:  # eager (plans), captured, replayed: a capture that fails says why, the rest goes on
        graph_ok = all(ours_graph() is not None for _ in range(3))
    except Exception:
        traceback.print_exc()
        graph_ok = False
    cases = {"pygpukit": ours, "pygpukit, graph": ours_graph, "pygpukit, gc off": ours_no_gc,
             "anchor (torch eager)": theirs}  # fmt: skip
    if not graph_ok:
        del cases["pygpukit, graph"]
    first, times = interleaved_ms(cases, args.rounds)
    anchor_med = statistics.median(times["anchor (torch eager)"])
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:22s} TTFT {med:8.2f} ms (range {min(ts):.2f}-{max(ts):.2f}) "
              f"x{anchor_med / med:.3f} vs anchor")  # fmt: skip
    print(f"first tokens: pygpukit {first['pygpukit']}, graph {first.get('pygpukit, graph')}, "
          f"anchor {first['anchor (torch eager)']}")  # fmt: skip
    if args.prompt > 64 and graph_ok:
        # What a new padded length costs: eager (its plans made), captured, replayed.
        other = prompt[: args.prompt - 64]
        dec.padded = graphs
        try:
            calls = [wall_ms(lambda: model.generate(other, max_new_tokens=1)) for _ in range(3)]
        finally:
            dec.padded = None
        print(f"a new padded length ({len(other)} tokens): first call {calls[0]:.1f} ms "
              f"(eager, its plans made), second {calls[1]:.1f} ms (captured), third "
              f"{calls[2]:.1f} ms (replayed)")  # fmt: skip
    held = sum(e["size"] for e in gp.memory.snapshot() if e.get("graph_pool"))
    print(f"the prefill graph's memory (its pool region, live and free): {held / 2**20:.0f} MiB")
    # The prefill trims its last layer to the last position; forward runs every position.
    row = model.forward(ids).to_numpy()[0, -1]
    top = np.sort(row)[-2:]
    ours_first = int(np.asarray(first["pygpukit"]).reshape(-1)[0])
    print(f"forward's last-row argmax {int(row.argmax())} (top-2 gap {top[1] - top[0]:.4f}): "
          f"{'equal' if int(row.argmax()) == ours_first else 'DIFFERENT'}")  # fmt: skip
    rate = square_rate()
    flops = prefill_flops(cfg, args.prompt)
    at_rate = flops / (rate * 1e12) * 1e3
    mm_torch = matmul_ms(cfg, args.prompt, "torch")
    mm_ours = matmul_ms(cfg, args.prompt, "pygpukit")
    t_torch, t_ours = sum(mm_torch.values()), sum(mm_ours.values())
    print(f"torch bf16 8192^3: {rate:.0f} TFLOP/s -> the prefill's {flops / 1e12:.2f} TFLOP "
          f"take {at_rate:.2f} ms at that rate")  # fmt: skip
    print(f"matmuls alone at the prefill's shapes: torch {t_torch:.2f} ms, pygpukit "
          f"{t_ours:.2f} ms")  # fmt: skip
    for key in mm_torch:
        print(f"  {key:22s} torch {mm_torch[key]:8.3f} ms  pygpukit {mm_ours[key]:8.3f} ms")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(
            f"{name:22s} TTFT {med:8.2f} ms: {at_rate / med:.1%} of the 8192^3 rate, "
            f"{med / t_torch:.3f}x torch's matmuls alone, {med / t_ours:.3f}x ours"
        )
    if not args.layers:  # the llm suite's own denominator (its ttft rows' ttft_over_matmul)
        from pygpukit.benchmark.peers import PyGPUkitLibrary, TorchLibrary
        from pygpukit.llm.benchmarks import _matmul_ms

        suite = {lib.name: _matmul_ms(lib, args.shape, args.prompt)
                 for lib in (PyGPUkitLibrary(), TorchLibrary())}  # fmt: skip
        print(f"llm suite's matmul_ms: pygpukit {suite['pygpukit']:.2f} ms, torch "
              f"{suite['torch']:.2f} ms")  # fmt: skip
        for name, ts in times.items():
            print(f"{name:22s} TTFT / the suite's matmul_ms: "
                  f"{statistics.median(ts) / suite['pygpukit']:.3f}x")  # fmt: skip
    print("eager prefill:")
    phase_report(model, prompt, rounds=3)
    if graph_ok:
        print("prefill replayed from its graph:")
        dec.padded = graphs
        phase_report(model, prompt, rounds=3)
        dec.padded = None
    # Host enqueue time of the prefill alone: call to return, then the wait.
    from pygpukit.llm.generate import SamplingParams

    greedy = SamplingParams()
    enq, total = [], []
    for _ in range(3):
        gp.synchronize()
        start = time.perf_counter()
        dec.prefill(prompt, greedy, None)
        mid = time.perf_counter()
        gp.synchronize()
        end = time.perf_counter()
        enq.append((mid - start) * 1e3)
        total.append((end - start) * 1e3)
    print(f"decoder.prefill: host enqueue {statistics.median(enq):.2f} ms, with the wait "
          f"{statistics.median(total):.2f} ms")  # fmt: skip
    graph_report(model, prompt)
    if not args.no_profile:
        kernel_report(ours)
        if graph_ok:
            print("prefill replayed from its graph:")
            kernel_report(ours_graph, rows=10, timeline=8)
    if not args.no_profile:
        host_report(ours)


if __name__ == "__main__":
    main()
