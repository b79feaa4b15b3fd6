"""Interleaved A/B timing of the attention kernels against PyTorch on one GPU.

    python tools/attention_ab.py [--rounds 3] [--calls 50]
        [--only decode,decode8k,serve,long,causal,prefill,llama]

Decode (32/8 heads, D=128, bf16): batch 8 over 8192 cached tokens, contiguous and paged (16-token
blocks, shuffled; PyTorch's row always reads the contiguous cache), then batch 8 over 16K and
batch 1 over 32K (``long``). PyTorch as the ``ops_attention`` suite calls it (SDPA with
``enable_gqa`` on ``q [B, Hq, 1, D]``) and pinned to each SDPA backend that takes these inputs;
``bulk2``, ``bulk3``, ``tma2`` and ``tma3`` with their split at 2 or 3 CTAs per SM, fused or
with the combine kernel, with the early launch of the next call, and ``mma2``; at 8K
(``decode``) also the host time per call of both libraries and a profile (torch.profiler) with
each one's kernels and their device times. ``serve``: paged decode at the serving engine's
shapes (batch 16-64, 128-512 cached tokens), every kernel and splits of shorter chunks.
``--graph`` times CUDA-graph replays of the calls instead (GPU time alone; the shorter serve
shapes are otherwise bound by each library's host time per call).
Prefill (B=4, H=32, S=4096, D=128, bf16, causal and not) with each Hopper prefill kernel and
schedules of the persistent one; the Llama-3.1-8B prefill shape (B=1, 32/8 heads, S=1024,
causal) with q/k/v contiguous and as the strided views the model passes. Every variant and
PyTorch are timed in turn, ``--rounds`` times over, so clock and power drift hit all of them
alike (one suite row after another does not). Prints the median GPU time per call of each and
its ratio to PyTorch's. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import attention, config


def gp_us(fn: Callable[[], object], calls: int) -> float:
    """GPU microseconds per call of ``calls`` calls of ``fn`` between two PyGPUkit events."""
    start, end = gp.Event(timing=True), gp.Event(timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e3 / calls


def _gp_graph_us(fn: Callable[[], object], calls: int) -> float:
    """GPU microseconds per call of ``fn``, without host time: one CUDA graph of the calls.

    ``calls`` calls are captured in one graph, replayed once to warm up, then once between two
    events.
    """
    with gp.graph_capture() as graph:
        for _ in range(calls):
            fn()
    graph.replay()
    return gp_us(graph.replay, 1) / calls


def _torch_graph_us(fn: Callable[[], object], calls: int) -> float:
    """PyTorch's counterpart of :func:`_gp_graph_us` (torch.cuda.CUDAGraph)."""
    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()  # warm-up on the capture's side stream, as torch asks
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    return torch_us(graph.replay, 1) / calls


#: Whether the decode cases time graph replays (--graph: GPU time only, no host time).
_GRAPH = [False]


def torch_us(fn: Callable[[], object], calls: int) -> float:
    """PyTorch's counterpart of :func:`gp_us` (torch.cuda events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return float(start.elapsed_time(end)) * 1e3 / calls


#: A case: the ops.config knobs to set first (None for PyTorch), and the call to time. The key
#: "schedule" sets the persistent prefill kernel's (item overhead, heads per group) instead.
Case = tuple[dict[str, Any] | None, Callable[[], object]]
#: The persistent prefill schedule's defaults (attention._prefill_schedule); "per_sm" sets the
#: decode split's CTAs per SM (of the case's decode kernel), "min_chunk" its fewest keys a split.
_SCHEDULE = (attention._ITEM_OVERHEAD, attention._HEAD_GROUP)
_PER_SM = dict(attention._DECODE_CTAS_PER_SM)
_EARLY = attention._DECODE_EARLY_LAUNCH["bulk2"]
_MIN_CHUNK = attention._DECODE_MIN_CHUNK


def _restore_knobs() -> None:
    """The module defaults the cases change, back."""
    attention._ITEM_OVERHEAD, attention._HEAD_GROUP = _SCHEDULE
    attention._DECODE_CTAS_PER_SM.update(_PER_SM)
    attention._DECODE_EARLY_LAUNCH["bulk2"] = _EARLY
    attention._DECODE_MIN_CHUNK = _MIN_CHUNK
    config.reload()


def _interleave(cases: dict[str, Case], rounds: int, calls: int) -> None:
    """Time every case once per round (after a warm-up call); print the medians.

    A knob change drops the cached plans, so each case sets its knobs and plans in the warm-up
    call, outside the timing.
    """
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (knobs, fn) in cases.items():
            if knobs is not None:
                knobs = dict(knobs)
                _restore_knobs()
                overhead, group = knobs.pop("schedule", _SCHEDULE)
                attention._ITEM_OVERHEAD, attention._HEAD_GROUP = float(overhead), int(group)
                kernel = knobs.get("decode_kernel", "bulk2")
                if "per_sm" in knobs:
                    attention._DECODE_CTAS_PER_SM[kernel] = float(knobs.pop("per_sm"))
                    attention._DECODE_CTAS_PER_SM["bulk2"] = attention._DECODE_CTAS_PER_SM[kernel]
                attention._DECODE_EARLY_LAUNCH["bulk2"] = bool(knobs.pop("early", _EARLY))
                attention._DECODE_MIN_CHUNK = int(knobs.pop("min_chunk", _MIN_CHUNK))
                config.set(**knobs)
                attention.PREFILL_PLANS.clear()  # the warm-up call below plans again
                attention.DECODE_PLANS.clear()
            fn()
            if _GRAPH[0]:
                timer = _torch_graph_us if knobs is None else _gp_graph_us
            else:
                timer = torch_us if knobs is None else gp_us
            times[name].append(timer(fn, calls))
    _restore_knobs()
    base = statistics.median(times["torch"])
    for name, ts in times.items():
        med = statistics.median(ts)
        spread = f"{min(ts):8.1f}-{max(ts):8.1f}"
        print(f"  {name:24s} {med:9.1f} us  x{base / med:.3f}  (range {spread})", flush=True)


def prefill(rounds: int, calls: int, causals: tuple[bool, ...] = (True, False)) -> None:
    """Causal (and non-causal) prefill at the suite's shape."""
    b, h, s, d = 4, 32, 4096, 128
    rng = np.random.default_rng(0)
    hosts = [random_cache(rng, b, h, s, d) for _ in range(3)]
    g = [gp.from_numpy(np.ascontiguousarray(x)) for x in hosts]
    tq = [_to_torch(x, host) for x, host in zip(g, hosts, strict=True)]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    for causal in causals:
        print(f"prefill B={b} H={h} S={s} D={d} bf16 causal={causal}")

        def theirs(c: bool = causal) -> object:
            return sdpa(*tq, is_causal=c)

        def ours(c: bool = causal) -> object:
            return ops.scaled_dot_product_attention(*g, is_causal=c)

        cases: dict[str, Case] = {"torch": (None, theirs)}
        for kernel in ("wgmma_tma", "wgmma_persist"):
            cases[kernel] = ({"attention_kernel": kernel}, ours)
        if causal:  # schedules of the persistent kernel: (item overhead, heads per group)
            for sched in ((0.25, 8), (1.0, 8), (2.0, 8), (1.0, 4), (1.0, 16), (0.5, 12)):
                knobs = {"attention_kernel": "wgmma_persist", "schedule": sched}
                cases[f"persist ovh={sched[0]} grp={sched[1]}"] = (knobs, ours)
        _interleave(cases, rounds, calls)


def prefill_llama(rounds: int, calls: int) -> None:
    """The 8B model's prefill attention: contiguous inputs against the model's strided views."""
    s, hq, hkv, d, cap = 1024, 32, 8, 128, 4096
    rng = np.random.default_rng(2)
    qh = rng.standard_normal((1, s, hq, d)).astype(np.float32)
    kh, vh = (rng.standard_normal((1, hkv, cap, d)).astype(np.float32) for _ in "kv")
    tq = torch.from_numpy(qh).to("cuda", torch.bfloat16).transpose(1, 2).contiguous()
    tk, tv = (torch.from_numpy(x[:, :, :s]).to("cuda", torch.bfloat16) for x in (kh, vh))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q_tok = gp.from_numpy(qh.astype(gp.bfloat16))  # [1, S, H, D], as the projection leaves it
    kc, vc = (gp.from_numpy(x.astype(gp.bfloat16)) for x in (kh, vh))
    views = (q_tok.transpose(0, 2, 1, 3), kc[:, :, :s], vc[:, :, :s])
    packed = tuple(x.contiguous() for x in views)
    print(f"prefill B=1 Hq={hq} Hkv={hkv} S={s} D={d} bf16 causal (the 8B model's attention)")
    cases: dict[str, Case] = {
        "torch": (None, lambda: sdpa(tq, tk, tv, is_causal=True, enable_gqa=True)),
        "contiguous": ({}, lambda: ops.scaled_dot_product_attention(*packed, is_causal=True)),
        "strided views": ({}, lambda: ops.scaled_dot_product_attention(*views, is_causal=True)),
        "views + copies": (
            {},
            lambda: ops.scaled_dot_product_attention(
                *(x.contiguous() for x in views), is_causal=True
            ),
        ),
    }
    _interleave(cases, rounds, calls)


def random_cache(rng: np.random.Generator, b: int, hkv: int, n: int, d: int) -> np.ndarray:
    """A ``[b, hkv, n, d]`` bfloat16 cache: 1024 random tokens repeated (long caches build fast)."""
    base = rng.standard_normal((b, hkv, min(n, 1024), d)).astype(gp.bfloat16)
    return np.tile(base, (1, 1, -(-n // base.shape[2]), 1))[:, :, :n]


def _to_torch(x: gp.GPUArray, host: np.ndarray) -> Any:
    """``x`` as a torch tensor on the GPU: shared through DLPack, else uploaded again."""
    try:
        return torch.from_dlpack(x)
    except Exception:  # no DLPack exchange here: a second copy does as well
        return torch.from_numpy(host.astype(np.float32)).to("cuda", torch.bfloat16)


def _torch_backends(tq: Any, tk: Any, tv: Any, pinned_too: bool = True) -> dict[str, Case]:
    """PyTorch's SDPA decode as the suite calls it, and pinned to each fused backend it has."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    cases: dict[str, Case] = {"torch": (None, lambda: sdpa(tq, tk, tv, enable_gqa=True))}
    if not pinned_too:
        return cases
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return cases
    for name in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"):
        backend = getattr(SDPBackend, name, None)
        if backend is None:
            continue

        def pinned(be: Any = backend) -> object:
            with sdpa_kernel(be):
                return sdpa(tq, tk, tv, enable_gqa=True)

        try:
            pinned()
        except RuntimeError:  # this backend does not take these inputs
            continue
        cases[f"torch {name.split('_')[0].lower()}"] = (None, pinned)
    return cases


def _profile(label: str, fns: dict[str, Callable[[], object]], calls: int = 20) -> None:
    """Kernel names and mean device time per call of each function (torch.profiler, CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    for name, fn in fns.items():
        fn()
        torch.cuda.synchronize()
        try:
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    fn()
                torch.cuda.synchronize()
            events = list(prof.events())
        except Exception as exc:  # the profiler is a diagnostic: report and go on
            print(f"  profile {label} {name}: failed ({exc})")
            continue
        kernels: dict[str, list[float]] = {}
        first = last = None
        for ev in events:
            if ev.device_type.name != "CUDA":
                continue
            took = getattr(ev, "device_time", None) or getattr(ev, "cuda_time", None) or 0.0
            kernels.setdefault(ev.name, []).append(float(took))
            start, end = ev.time_range.start, ev.time_range.end
            first = start if first is None else min(first, start)
            last = end if last is None else max(last, end)
        span = (last - first) / calls if first is not None and last is not None else 0.0
        print(
            f"  profile {label} {name}: {span:.1f} us per call from first kernel start to last end"
        )
        for kname, ts in kernels.items():
            print(f"    {len(ts):4d} x {statistics.mean(ts):8.1f} us  {kname[:90]}")


def host_us(fn: Callable[[], object], sync: Callable[[], None], calls: int = 200) -> float:
    """Host microseconds per call, the GPU left to run behind (launch queue far from full)."""
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    sync()
    return (t1 - t0) * 1e6 / calls


#: Decode variants timed: label -> ops.config knobs and the tool's own (``per_sm``: the bulk2
#: split's CTAs per SM; ``early``: the fused kernel lets its successor launch after its key loop).
_KERNEL = {"decode_combine": "kernel"}
VARIANTS: dict[str, dict[str, Any]] = {
    "bulk2 sm=2": {"per_sm": 2},
    "bulk2 sm=2 combine=kernel": {"per_sm": 2, **_KERNEL},
    "tma2 sm=2": {"decode_kernel": "tma2", "per_sm": 2},
    "tma2 sm=2 combine=kernel": {"decode_kernel": "tma2", "per_sm": 2, **_KERNEL},
    "tma3 sm=2": {"decode_kernel": "tma3", "per_sm": 2},
    "tma3 sm=2 combine=kernel": {"decode_kernel": "tma3", "per_sm": 2, **_KERNEL},
    "tma2 sm=3": {"decode_kernel": "tma2", "per_sm": 3},
    # Other splits of the default kernel (batch 8 at 8K: 2, 3, 5 and 8 splits of 64 CTAs each),
    # and its launch without programmatic dependence.
    "tma2 sm=1": {"decode_kernel": "tma2", "per_sm": 1},
    "tma2 sm=1.5": {"decode_kernel": "tma2", "per_sm": 1.5},
    "tma2 sm=2.5": {"decode_kernel": "tma2", "per_sm": 2.5},
    "tma2 sm=4": {"decode_kernel": "tma2", "per_sm": 4},
    "tma2 sm=2 plain launch": {"decode_kernel": "tma2", "per_sm": 2, "dependent_launch": "off"},
    "tma2 sm=3 combine=kernel": {"decode_kernel": "tma2", "per_sm": 3, **_KERNEL},
    "bulk3 sm=2": {"decode_kernel": "bulk3", "per_sm": 2},
    "bulk3 sm=2 combine=kernel": {"decode_kernel": "bulk3", "per_sm": 2, **_KERNEL},
    "bulk2 sm=3 combine=kernel": {"per_sm": 3, **_KERNEL},
    "bulk2 sm=2 early": {"per_sm": 2, "early": True},
    "mma2 sm=2": {"decode_kernel": "mma2"},
}
#: Variants at the serving engine's shapes (many sequences, short caches): each kernel at its
#: default split, then splits of shorter chunks for the batches that leave SMs idle.
SERVE_VARIANTS: dict[str, dict[str, Any]] = {
    "bulk2": {},
    "tma2": {"decode_kernel": "tma2"},
    "tma3": {"decode_kernel": "tma3"},
    "bulk3": {"decode_kernel": "bulk3"},
    "mma2": {"decode_kernel": "mma2"},
    "mma": {"decode_kernel": "mma"},
    "simt": {"decode_kernel": "simt"},
    "bulk2 chunk>=64": {"min_chunk": 64},
    "tma2 chunk>=64": {"decode_kernel": "tma2", "min_chunk": 64},
    "tma2 chunk>=64 sm=3": {"decode_kernel": "tma2", "min_chunk": 64, "per_sm": 3},
    "tma2 chunk>=64 combine=kernel": {"decode_kernel": "tma2", "min_chunk": 64, **_KERNEL},
    "mma chunk>=64 sm=3": {"decode_kernel": "mma", "min_chunk": 64, "per_sm": 3},
    # More CTAs than fit at once (batch 64: 512 per split, 396 resident at three per SM):
    # splitting shrinks the partial last wave.
    "bulk2 chunk>=64 sm=8": {"min_chunk": 64, "per_sm": 8},
    "tma2 chunk>=64 sm=8": {"decode_kernel": "tma2", "min_chunk": 64, "per_sm": 8},
    "tma2 chunk>=64 sm=16": {"decode_kernel": "tma2", "min_chunk": 64, "per_sm": 16},
}
#: The serving shapes: (batch, cached tokens per sequence).
SERVE_SHAPES = ((64, 128), (64, 512), (16, 128), (16, 512), (32, 256))


def decode(
    rounds: int,
    calls: int,
    b: int,
    n: int,
    *,
    paged: bool,
    variants: dict[str, dict[str, Any]],
    profile_it: bool = False,
    torch_pinned: bool = True,
) -> None:
    """Decode over ``n`` cached tokens (32/8 heads, D 128, bf16), contiguous or paged.

    Paged: 16-token blocks in shuffled order. PyTorch's rows always read the contiguous cache.
    """
    hq, hkv, d, block = 32, 8, 128, 16
    rng = np.random.default_rng(1)
    qh = rng.standard_normal((b, hq, d)).astype(np.float32)
    kh, vh = (random_cache(rng, b, hkv, n, d) for _ in "kv")
    tq = torch.from_numpy(qh).to("cuda", torch.bfloat16).reshape(b, hq, 1, d)
    kg, vg = gp.from_numpy(np.ascontiguousarray(kh)), gp.from_numpy(np.ascontiguousarray(vh))
    tk, tv = _to_torch(kg, kh), _to_torch(vg, vh)
    q = gp.from_numpy(qh.astype(gp.bfloat16))
    lens = gp.from_numpy(np.full(b, n, np.int32))
    table = None
    if paged:
        nb = -(-n // block)
        perm = rng.permutation(b * nb).astype(np.int32)

        def page(x: np.ndarray) -> np.ndarray:
            x = np.pad(x, ((0, 0), (0, 0), (0, nb * block - n), (0, 0)))
            blocks = x.reshape(b, hkv, nb, block, d).transpose(0, 2, 1, 3, 4)
            out = np.empty_like(blocks.reshape(b * nb, hkv, block, d))
            out[perm] = blocks.reshape(b * nb, hkv, block, d)
            return out

        kc, vc = (gp.from_numpy(page(x)) for x in (kh, vh))
        table = gp.from_numpy(perm.reshape(b, nb))
    else:
        kc, vc = kg, vg
    del kh, vh
    label = "paged" if paged else "contiguous"
    gb = 2 * b * hkv * n * d * 2 / 1e9
    print(f"decode B={b} Hq={hq} Hkv={hkv} ctx={n} D={d} bf16 {label} ({gb * 1e3:.0f} MB of K/V)")

    def fn() -> object:
        return ops.decode_attention(q, kc, vc, lens, block_table=table)

    cases = _torch_backends(tq, tk, tv, pinned_too=torch_pinned and not paged)
    for name, knobs in variants.items():
        cases[name] = ({"decode_kernel": "bulk2", **knobs}, fn)
    _interleave(cases, rounds, calls)
    if profile_it:
        config.reload()
        attention.DECODE_PLANS.clear()
        theirs = cases["torch"][1]
        print(
            f"  host time per call: pygpukit {host_us(fn, gp.synchronize):.1f} us, "
            f"torch {host_us(theirs, torch.cuda.synchronize):.1f} us"
        )
        _profile(label, {"torch": theirs, "pygpukit (defaults)": fn})


def main() -> None:
    """Parse the arguments and run the A/B tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument(
        "--only",
        default="decode,long,prefill,llama",
        help="comma-separated parts, run in this order: decode (8K, with a profile), decode8k "
        "(8K contiguous and paged, no profile), serve (paged decode at the serving engine's "
        "shapes), long, causal (prefill, causal only), prefill, llama",
    )
    parser.add_argument(
        "--exclude", default="", help="leave out the decode variants whose names contain this"
    )
    parser.add_argument(
        "--graph",
        action="store_true",
        help="time CUDA graphs of the calls (GPU time alone: short serve-shape calls are "
        "otherwise bound by each library's host time)",
    )
    args = parser.parse_args()
    _GRAPH[0] = args.graph
    if args.exclude:
        for table in (VARIANTS, SERVE_VARIANTS):
            for name in [n for n in table if args.exclude in n]:
                del table[name]
    parts = args.only.split(",")
    r, c = args.rounds, args.calls * 4
    for part in parts:
        if part in ("decode", "decode8k"):
            decode(r, c, 8, 8192, paged=False, variants=VARIANTS, profile_it=part == "decode")
            decode(r, c, 8, 8192, paged=True, variants=VARIANTS)
        elif part == "serve":
            for b, n in SERVE_SHAPES:
                decode(r, c, b, n, paged=True, variants=SERVE_VARIANTS, torch_pinned=False)
        elif part == "long":
            decode(r, c, 8, 16384, paged=False, variants=VARIANTS)
            decode(r, c, 1, 32768, paged=False, variants=VARIANTS)
        elif part in ("causal", "prefill"):
            prefill(args.rounds, args.calls, (True,) if part == "causal" else (True, False))
        elif part == "llama":
            prefill_llama(args.rounds, args.calls * 4)
        else:
            parser.error(f"unknown part {part!r}")


if __name__ == "__main__":
    main()
