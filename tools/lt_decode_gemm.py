"""cuBLASLt's candidate algorithms at the Llama-3.1-8B decode-step GEMMs, with cold weights.

    python tools/lt_decode_gemm.py [--rows 1,16,64,128,256] [--shapes qkv,o_proj,...]
                                   [--candidates 16] [--rounds 3] [--splitk] [--all]
                                   [--swapped] [--runtime-only]

For each weight shape of the 8B model (q/k/v fused [6144, 4096], o_proj [4096, 4096], gate/up
fused [28672, 4096], down [4096, 14336], lm_head [128256, 4096]; bfloat16, ``nn.Linear``
layout) and each M, ``y [M, N] = x [M, K] @ W.T`` is timed as:

- ``pygpukit``: ``pygpukit.linalg.matmul_nt`` as it runs today (cuBLASLt, its plan's choice);
- ``#i``: every candidate cuBLASLt's heuristic returns (``--candidates`` of them, 32 MiB of
  workspace as the runtime allows), called directly through ctypes with the same operand order
  as the runtime (the weight is cuBLASLt's transposed "A", x its "B": torch's order too);
  ``#i ws0`` / ``#i ws256M``: the heuristic's candidates under no and 256 MiB of workspace
  when their configuration differs from all of the 32 MiB list;
- ``#i sk=S`` / ``#i swz=W``: with ``--splitk``, the first four candidates with a forced
  split-K or the other CTA swizzling (when ``cublasLtMatmulAlgoCheck`` accepts it);
- ``#i swapped``: with ``--swapped``, the heuristic's first four for the other operand order
  (x as "A", the weight as "B": writes ``y.T``, so only a layout experiment above M = 1);
- ``torch``: ``torch.nn.functional.linear``.

Every call reads a different copy of the weight (enough copies for four times the L2 cache), so
the weight comes from DRAM as in a decode step, where each layer's weight is read once; x and y
stay in L2 as they do there. A GPU sleep before each timed batch lets the host enqueue all of
its calls first, so the events time the GPU, not the launches. Each variant is timed
``--rounds`` times in turn; the median is kept. Prints, per shape and M as it finishes, one
summary row (heuristic #0, the runtime's choice, the fastest candidate, torch: weight GB/s) and
with ``--all`` a table of its variants (the 12 fastest, #0, the runtime's pick and torch,
fastest first); then the summary table again and how much of a decode
step (32 layers and the lm_head at that M) the fastest candidates would save over the
runtime's choices. ``--runtime-only`` times only ``#0``, the runtime and torch. Needs torch
with CUDA and cuBLASLt.

On an H100 (cuBLASLt 13.1) the heuristic offered about 8 candidates per shape, all nvjet
kernels; at M = 64 the fastest variant was within 1.5% of the runtime's timed pick at every
shape (its warm timing ranks the candidates as the cold one does).
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

SHAPES = {
    "qkv": (6144, 4096),
    "o_proj": (4096, 4096),
    "gate_up": (28672, 4096),
    "down": (4096, 14336),
    "lm_head": (128256, 4096),
}
#: Calls of each shape per decode step of the 8B model (32 layers; one lm_head).
PER_STEP = {"qkv": 32, "o_proj": 32, "gate_up": 32, "down": 32, "lm_head": 1}

CUDA_R_32F, CUDA_R_16BF = 0, 14
COMPUTE_32F = 68
DESC_TRANSA, DESC_TRANSB = 3, 4
PREF_MAX_WORKSPACE_BYTES = 1
PREF_MIN_ALIGNMENT = (5, 6, 7, 8)
CONFIG_SPLITK_NUM, CONFIG_REDUCTION_SCHEME, CONFIG_CTA_SWIZZLING = 2, 3, 4
#: cublasLtMatmulAlgoConfigAttributes_t ids read for a candidate's description, and their sizes.
CONFIG_ATTRS = {
    "id": (0, 4),
    "tile": (1, 4),
    "splitk": (2, 4),
    "red": (3, 4),
    "swz": (4, 4),
    "cust": (5, 4),
    "stages": (6, 4),
    "inner": (7, 2),
    "cluster": (8, 2),
}
WORKSPACE = 32 << 20
BIG_WORKSPACE = 256 << 20


class Algo(ctypes.Structure):
    """cublasLtMatmulAlgo_t: 64 opaque bytes."""

    _fields_ = [("data", ctypes.c_uint64 * 8)]


class HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t."""

    _fields_ = [
        ("algo", Algo),
        ("workspace_size", ctypes.c_size_t),
        ("state", ctypes.c_int),
        ("waves", ctypes.c_float),
        ("reserved", ctypes.c_int * 4),
    ]


class Lt:
    """The few cuBLASLt calls this tool makes, through ctypes, on one handle."""

    def __init__(self, path: str) -> None:
        self.lib = ctypes.CDLL(path)
        vp, sz, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
        signatures: dict[str, list[Any]] = {
            "cublasLtCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulDescCreate": [ctypes.POINTER(vp), i32, i32],
            "cublasLtMatmulDescSetAttribute": [vp, i32, vp, sz],
            "cublasLtMatrixLayoutCreate": [
                ctypes.POINTER(vp),
                i32,
                ctypes.c_uint64,
                ctypes.c_uint64,
                ctypes.c_int64,
            ],
            "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulPreferenceSetAttribute": [vp, i32, vp, sz],
            "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i32, vp, vp],
            "cublasLtMatmulAlgoCheck": [vp, vp, vp, vp, vp, vp, vp, vp],
            "cublasLtMatmulAlgoConfigGetAttribute": [vp, i32, vp, sz, vp],
            "cublasLtMatmulAlgoConfigSetAttribute": [vp, i32, vp, sz],
            "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp],
        }
        for name, args in signatures.items():
            fn = getattr(self.lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_int
        self.handle = vp()
        self.check(self.lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")

    @staticmethod
    def check(status: int, what: str) -> None:
        """Raise on a non-zero cublasStatus_t."""
        if status != 0:
            raise RuntimeError(f"{what} failed with cublasStatus_t {status}")

    def describe(self, algo: Algo) -> dict[str, int]:
        """The configuration attributes of an algorithm (-1 where unreadable)."""
        out = {}
        for name, (attr, size) in CONFIG_ATTRS.items():
            buf = ctypes.c_uint64(0)
            written = ctypes.c_size_t(0)
            s = self.lib.cublasLtMatmulAlgoConfigGetAttribute(
                ctypes.byref(algo), attr, ctypes.byref(buf), size, ctypes.byref(written)
            )
            out[name] = int(buf.value) if s == 0 else -1
        return out


@dataclass
class Problem:
    """Descriptor and layouts of ``y [M, N] = x [M, K] @ W[N, K].T`` in the runtime's order.

    ``swapped``: the other operand order, x as cuBLASLt's transposed "A" and the weight as its
    "B", which writes ``y.T`` ([N, M] row-major): usable as is only for M = 1, timed to see
    whether the kernels stream the weight faster as "B".
    """

    lt: Lt
    m: int
    n: int
    k: int
    swapped: bool = False
    desc: ctypes.c_void_p = field(default_factory=ctypes.c_void_p)
    a: ctypes.c_void_p = field(default_factory=ctypes.c_void_p)
    b: ctypes.c_void_p = field(default_factory=ctypes.c_void_p)
    c: ctypes.c_void_p = field(default_factory=ctypes.c_void_p)

    def __post_init__(self) -> None:
        lib, chk = self.lt.lib, Lt.check
        chk(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), COMPUTE_32F, CUDA_R_32F), "desc")
        for attr, op in ((DESC_TRANSA, 1), (DESC_TRANSB, 0)):
            v = ctypes.c_int(op)
            chk(lib.cublasLtMatmulDescSetAttribute(self.desc, attr, ctypes.byref(v), 4), "trans")
        # cuBLASLt's A: the weight read as (K x N, ld K) and transposed; B: x as (K x M, ld K);
        # C: y as (N x M, ld N) -- column-major views of the row-major arrays. Swapped: A is x
        # (K x M), B the weight (K x N), C is y.T as (M x N, ld M).
        shapes = [(self.k, self.n, self.k), (self.k, self.m, self.k), (self.n, self.m, self.n)]
        if self.swapped:
            shapes = [(self.k, self.m, self.k), (self.k, self.n, self.k), (self.m, self.n, self.m)]
        for lay, (rows, cols, ld) in zip((self.a, self.b, self.c), shapes, strict=True):
            chk(
                lib.cublasLtMatrixLayoutCreate(ctypes.byref(lay), CUDA_R_16BF, rows, cols, ld),
                "layout",
            )

    def heuristic(self, count: int, workspace: int) -> list[HeuristicResult]:
        """The heuristic's candidates (that can run) under this workspace limit, best first."""
        lib = self.lt.lib
        pref = ctypes.c_void_p()
        Lt.check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "preference")
        ws = ctypes.c_uint64(workspace)
        lib.cublasLtMatmulPreferenceSetAttribute(
            pref, PREF_MAX_WORKSPACE_BYTES, ctypes.byref(ws), 8
        )
        align = ctypes.c_uint32(16)
        for attr in PREF_MIN_ALIGNMENT:
            lib.cublasLtMatmulPreferenceSetAttribute(pref, attr, ctypes.byref(align), 4)
        results = (HeuristicResult * count)()
        found = ctypes.c_int(0)
        s = lib.cublasLtMatmulAlgoGetHeuristic(
            self.lt.handle,
            self.desc,
            self.a,
            self.b,
            self.c,
            self.c,
            pref,
            count,
            results,
            ctypes.byref(found),
        )
        if s != 0:
            return []
        return [results[i] for i in range(found.value) if results[i].state == 0]

    def with_config(self, algo: Algo, values: dict[int, int]) -> tuple[Algo, int] | None:
        """A copy of ``algo`` with these 32-bit configuration attributes set, and its workspace.

        None when cuBLASLt refuses a value or ``cublasLtMatmulAlgoCheck`` the result.
        """
        forced = Algo()
        ctypes.memmove(ctypes.byref(forced), ctypes.byref(algo), ctypes.sizeof(Algo))
        lib = self.lt.lib
        for attr, value in values.items():
            v = ctypes.c_uint32(value)
            if lib.cublasLtMatmulAlgoConfigSetAttribute(
                ctypes.byref(forced), attr, ctypes.byref(v), 4
            ):
                return None
        result = HeuristicResult()
        status = lib.cublasLtMatmulAlgoCheck(
            self.lt.handle,
            self.desc,
            self.a,
            self.b,
            self.c,
            self.c,
            ctypes.byref(forced),
            ctypes.byref(result),
        )
        if status != 0 or result.workspace_size > BIG_WORKSPACE:
            return None
        return forced, int(result.workspace_size)

    def run(
        self,
        algo: Algo,
        w: int,
        x: int,
        y: int,
        ws: int,
        ws_size: int,
        stream: int,
        alpha: Any,
        beta: Any,
    ) -> int:
        """Enqueue one product with ``algo``; the cublasStatus_t."""
        if self.swapped:
            w, x = x, w
        return self.lt.lib.cublasLtMatmul(
            self.lt.handle,
            self.desc,
            ctypes.byref(alpha),
            w,
            self.a,
            x,
            self.b,
            ctypes.byref(beta),
            y,
            self.c,
            y,
            self.c,
            ctypes.byref(algo),
            ws,
            ws_size,
            stream,
        )


def config_text(cfg: dict[str, int]) -> str:
    """A candidate's configuration in one short string."""
    return " ".join(f"{k}={v}" for k, v in cfg.items())


def main() -> None:
    """Print the tables (markdown)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,16,64,128,256")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--candidates", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=16, help="calls per timed batch (lm_head: 4)")
    ap.add_argument(
        "--splitk", action="store_true", help="also force split-K / swizzling on the first 4"
    )
    ap.add_argument(
        "--swapped", action="store_true", help="also the swapped operand order's first 4 (y.T)"
    )
    ap.add_argument("--all", action="store_true", help="print every variant, not only summaries")
    ap.add_argument(
        "--runtime-only",
        action="store_true",
        help="time only #0, the runtime and torch",
    )
    args = ap.parse_args()

    import torch

    import pygpukit as gp
    from pygpukit.backend import cuda_linalg
    from pygpukit.linalg import matmul_nt

    status = cuda_linalg.cublaslt_status()
    if gp.backend_name() != "cuda" or not status["loaded"]:
        raise SystemExit("needs the CUDA backend with cuBLASLt")
    lt = Lt(status["path"])
    info = gp.get_device_info(gp.get_device())
    l2 = int(info.get("l2_cache_bytes") or 50 << 20)
    # One stream for everything: the runtime's current stream, seen by torch as external.
    stream = torch.cuda.ExternalStream(gp.current_stream().handle)
    torch.cuda.set_stream(stream)
    ws_buf = torch.empty(BIG_WORKSPACE, dtype=torch.uint8, device="cuda")
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(0.0)
    sleep_cycles = 2_000_000  # ~1 ms at H100 clocks: several times a batch's enqueue

    def time_us(fn: Callable[[int], object], calls: int) -> float:
        fn(0)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(sleep_cycles)
        start.record()
        for i in range(calls):
            fn(i)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) * 1e3 / calls

    print(
        f"device: {info['name']}; cuBLASLt {status['version']} ({status['path']}); "
        f"L2 {l2 >> 20} MiB; weights cold (copies >= 4x L2); GB/s = weight bytes / time\n"
    )
    summary = [
        "| shape | M | #0 GB/s | runtime GB/s (its pick) | best GB/s (which) "
        "| torch GB/s | best vs #0 | best vs runtime | best vs torch |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    detail_head = (
        "| shape | M | variant | config | us | GB/s | runtime's tuning pass: gpu/host us |\n"
        "|---|---|---|---|---|---|---|"
    )
    print(summary[0] + "\n" + summary[1], flush=True)
    savings: dict[int, float] = {}
    for name in args.shapes.split(","):
        n, k = SHAPES[name]
        nbytes = n * k * 2
        copies = max(1, -(-4 * l2 // nbytes))
        tw = [torch.randn(n, k, device="cuda").to(torch.bfloat16) for _ in range(copies)]
        gw = [gp.from_dlpack(w) for w in tw]
        calls = 4 if name == "lm_head" else args.calls
        for m in (int(r) for r in args.rows.split(",")):
            tx = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            ty = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            gx, gy = gp.from_dlpack(tx), gp.from_dlpack(ty)
            prob = Problem(lt, m, n, k)
            variants: dict[str, tuple[str, Callable[[int], object]]] = {}
            configs: list[tuple[str, dict[str, int]]] = []
            lists = [("", WORKSPACE), (" ws0", 0), (" ws256M", BIG_WORKSPACE)]
            seen: list[dict[str, int]] = []
            for suffix, limit in lists:
                for idx, res in enumerate(prob.heuristic(args.candidates, limit)):
                    cfg = lt.describe(res.algo)
                    if suffix and cfg in seen:
                        continue
                    seen.append(cfg)
                    label = f"#{idx}{suffix}"
                    configs.append((label, cfg))
                    if args.runtime_only and label != "#0":
                        continue
                    variants[label] = (
                        config_text(cfg),
                        _lt_call(
                            prob,
                            res.algo,
                            tw,
                            tx,
                            ty,
                            ws_buf,
                            max(limit, int(res.workspace_size)),
                            stream,
                            alpha,
                            beta,
                            copies,
                        ),
                    )
            if args.splitk:
                plain = [label for label, _cfg in configs if " " not in label][:4]
                base_list = prob.heuristic(args.candidates, WORKSPACE)
                for label in plain:
                    base = base_list[int(label[1:])]
                    swizzle = lt.describe(base.algo)["swz"]
                    forcings: dict[str, dict[int, int]] = {
                        # Split K reduced out of place in the compute type.
                        f"{label} sk={sk}": {CONFIG_SPLITK_NUM: sk, CONFIG_REDUCTION_SCHEME: 2}
                        for sk in (2, 4, 8)
                    }
                    if swizzle in (0, 1):
                        forcings[f"{label} swz={1 - swizzle}"] = {CONFIG_CTA_SWIZZLING: 1 - swizzle}
                    for variant, values in forcings.items():
                        forced = prob.with_config(base.algo, values)
                        if forced is None:
                            continue
                        variants[variant] = (
                            config_text(lt.describe(forced[0])),
                            _lt_call(
                                prob,
                                forced[0],
                                tw,
                                tx,
                                ty,
                                ws_buf,
                                max(forced[1], 1),
                                stream,
                                alpha,
                                beta,
                                copies,
                            ),
                        )
            if args.swapped:
                swapped = Problem(lt, m, n, k, swapped=True)
                for idx, res in enumerate(swapped.heuristic(4, WORKSPACE)):
                    variants[f"#{idx} swapped"] = (
                        config_text(lt.describe(res.algo)),
                        _lt_call(
                            swapped,
                            res.algo,
                            tw,
                            tx,
                            ty,
                            ws_buf,
                            WORKSPACE,
                            stream,
                            alpha,
                            beta,
                            copies,
                        ),
                    )
            variants["pygpukit"] = (
                "matmul_nt",
                partial(_rotating, matmul_nt, gx, gw, gy),
            )
            variants["torch"] = (
                "F.linear",
                partial(_rotating, torch.nn.functional.linear, tx, tw, None),
            )
            for v in [v for v in variants if v.startswith("#")]:
                try:  # one run each: a candidate cuBLASLt refuses here is left out
                    variants[v][1](0)
                except RuntimeError as exc:
                    print(f"<!-- {name} M={m} {v} left out: {exc} -->")
                    del variants[v]
            torch.cuda.synchronize()
            if "#0" not in variants:
                print(f"| {name} | {m} | no cuBLASLt candidate |")
                continue
            # Correctness of the direct calls against torch (a wrong operand order shows here).
            variants["#0"][1](0)
            ref = torch.nn.functional.linear(tx.float(), tw[0].float())
            err = float((ty.float() - ref).norm() / ref.norm())
            times: dict[str, list[float]] = {v: [] for v in variants}
            for _ in range(args.rounds):
                for v, (_c, fn) in variants.items():
                    times[v].append(time_us(fn, calls))
            med = {v: statistics.median(t) for v, t in times.items()}
            rate = {v: nbytes / (us * 1e-6) / 1e9 for v, us in med.items()}
            pick, hot = _runtime_pick(cuda_linalg, gp, m, n, k, configs)
            # The swapped order writes y.T: a candidate for y only at M = 1.
            lt_names = [v for v in variants if v.startswith("#") and ("swapped" not in v or m == 1)]
            best = min(lt_names, key=lambda v: med[v])
            summary.append(
                f"| {name} [{n},{k}] | {m} | {rate['#0']:.0f} | {rate['pygpukit']:.0f} ({pick}) "
                f"| {rate[best]:.0f} ({best}) | {rate['torch']:.0f} "
                f"| {med['#0'] / med[best]:.3f}x | {med['pygpukit'] / med[best]:.3f}x "
                f"| {med['torch'] / med[best]:.3f}x |"
            )
            savings[m] = savings.get(m, 0.0) + PER_STEP[name] * (med["pygpukit"] - med[best])
            detail = [detail_head]
            # The fastest dozen, and always #0, the runtime (and its pick) and torch.
            ranked = sorted(variants, key=lambda v: med[v])
            keep = set(ranked[:12]) | {"#0", "pygpukit", "torch"}
            keep |= set(pick.split("=")[-1].split("/"))
            for v in ranked:
                if v not in keep:
                    continue
                cfg_text = variants[v][0]
                h = hot.get(v, "")
                detail.append(
                    f"| {name} | {m} | {v} | {cfg_text} | {med[v]:.2f} | {rate[v]:.0f} | {h} |"
                )
            detail.append(f"| {name} | {m} | rel. error #0 vs fp32 | {err:.2e} | | |")
            print(summary[-1], flush=True)
            if args.all:
                print("\n" + "\n".join(detail) + "\n\n" + summary[0] + "\n" + summary[1])
        del tw, gw
        torch.cuda.empty_cache()
    print("\n## Summary\n")
    print("\n".join(summary))
    print(
        "\nPer decode step (32 layers + lm_head), runtime minus the fastest candidate, us: "
        + ", ".join(f"M={m}: {us:.0f}" for m, us in savings.items())
    )


def _rotating(fn: Callable[..., object], x: Any, weights: list[Any], out: Any, i: int) -> object:
    """``fn(x, weights[i % len], [out])``: the i-th call of a batch, on the next weight copy."""
    w = weights[i % len(weights)]
    return fn(x, w) if out is None else fn(x, w, out)


def _lt_call(
    prob: Problem,
    algo: Algo,
    tw: list[Any],
    tx: Any,
    ty: Any,
    ws_buf: Any,
    ws_size: int,
    stream: Any,
    alpha: Any,
    beta: Any,
    copies: int,
) -> Callable[[int], object]:
    """One direct cuBLASLt call over the weight copies (raises if cuBLASLt refuses it)."""
    ptrs = [w.data_ptr() for w in tw]
    x, y, ws, s = tx.data_ptr(), ty.data_ptr(), ws_buf.data_ptr(), stream.cuda_stream
    keep = Algo()
    ctypes.memmove(ctypes.byref(keep), ctypes.byref(algo), ctypes.sizeof(Algo))

    def call(i: int) -> object:
        Lt.check(
            prob.run(keep, ptrs[i % copies], x, y, ws, ws_size, s, alpha, beta), "cublasLtMatmul"
        )
        return None

    return call


def _runtime_pick(
    cuda_linalg: Any, gp: Any, m: int, n: int, k: int, configs: list[tuple[str, dict[str, int]]]
) -> tuple[str, dict[str, str]]:
    """Which listed candidate the runtime's plan for (m, n, k) runs, and its tuning pass.

    The pass's times per candidate (the runtime re-reads one weight, so warm in L2) by
    label (the runtime's list is the heuristic's under the same preferences: index i = ``#i``).
    """
    for plan in cuda_linalg._native.cublaslt_plans(gp.get_device()):
        if (plan["m"], plan["n"], plan["k"]) != (m, n, k) or plan["batch"] != 1:
            continue
        c = plan["candidates"][plan["chosen"]]
        how = "timed" if plan["tuned"] else ("inherited" if plan.get("inherited") else "first")
        keys = ("algo_id", "tile", "stages", "splitk", "reduction", "swizzle", "custom")
        mine = ("id", "tile", "stages", "splitk", "red", "swz", "cust")
        matches = [
            label
            for label, cfg in configs
            if all(cfg[b] == c[a] for a, b in zip(keys, mine, strict=True))
        ]
        hot = {
            f"#{i}": f"{c['gpu_us']:.2f}/{c['host_us']:.2f}"
            for i, c in enumerate(plan["candidates"])
        }
        return f"{how} {plan['chosen']}={'/'.join(matches) or '?'}", hot
    return "no plan", {}


if __name__ == "__main__":
    main()
