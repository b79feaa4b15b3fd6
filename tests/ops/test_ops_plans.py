"""The CUDA launch plans, built and run on any backend against recording stand-in kernels.

Each plan's argument tuple is checked against the kernel's declared parameters (count and
kind: pointer, integer, float) and its geometry against CUDA's limits, so a plan that would
fail to launch, or pass its sizes in the wrong order of kinds, fails here without a GPU. The
GPU tests (tests/ops/gpu) check the results.
"""

from __future__ import annotations

import gc
import importlib
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.ops import _kernel_loader as kl
from pygpukit.ops import activations, attention, config, normalization, rope

linear = importlib.import_module("pygpukit.ops.linear")  # ops.linear is the function

INTS = {"i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "bool"}
FLOATS = {"f16", "bf16", "f32", "f64"}


def declared(file: str, func: str) -> list[str]:
    """The type codes of ``func``'s parameters: the manifest's, else parsed from the source."""
    try:
        return [p.code for p in kl.LIBRARY.params(file, func)]
    except KeyError:
        from pygpukit.jit.signature import signature

        return [p.code for p in signature(kl._source(file), func, None)]


class Recorder:
    """Stands in for a loaded kernel: checks and records each launch."""

    def __init__(self, file: str, func: str, launches: list[tuple[str, Any, Any, int]]) -> None:
        self.file, self.name = file, func
        self.codes = declared(file, func)  # KeyError / ValueError for an unknown entry point
        self.launches = launches
        self.max_dynamic_smem = 48 * 1024

    def set_max_dynamic_shared_memory(self, nbytes: int) -> None:
        self.max_dynamic_smem = nbytes

    def launch(
        self,
        grid: Any,
        block: Any,
        args: tuple[Any, ...],
        *,
        shared_mem: int = 0,
        dependent: bool = False,
    ) -> None:
        assert len(args) == len(self.codes), (self.name, len(args), self.codes)
        for i, (arg, code) in enumerate(zip(args, self.codes, strict=True)):
            where = f"{self.name} argument {i} ({code})"
            if code == "ptr":
                assert isinstance(arg, GPUArray) or arg == 0, where
            elif code in INTS:
                assert isinstance(arg, (int, np.integer)) and not isinstance(arg, bool), where
            elif code in FLOATS:
                assert isinstance(arg, float), where
        dims = grid if isinstance(grid, tuple) else (grid,)
        assert 1 <= len(dims) <= 3 and all(int(g) >= 1 for g in dims), (self.name, grid)
        assert dims[0] < 2**31 and all(int(g) < 65536 for g in dims[1:]), (self.name, grid)
        assert isinstance(block, int) and 1 <= block <= 1024 and block % 32 == 0, block
        assert 0 <= shared_mem <= max(self.max_dynamic_smem, 48 * 1024), (self.name, shared_mem)
        self.launches.append((self.name, grid, block, shared_mem))


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any, Any, int]]:
    """Every launch the plans make, through recording kernels (loaded on any backend)."""
    seen: list[tuple[str, Any, Any, int]] = []
    kernels: dict[tuple[str, str], Recorder] = {}

    def kernel(file: str, func: str) -> Recorder:
        return kernels.setdefault((file, func), Recorder(file, func, seen))

    monkeypatch.setattr(kl, "kernel", kernel)
    monkeypatch.setattr(attention, "_sm_count", lambda device: 132)
    return seen


Rand = Callable[..., np.ndarray]


def up(a: np.ndarray) -> GPUArray:
    return gp.from_numpy(a)


@pytest.mark.parametrize("variant", ["simt", "mma"])
@pytest.mark.parametrize("m", [1, 3, 8, 9])
@pytest.mark.parametrize("vector", [True, False])
def test_linear_plans(launches, rand: Rand, variant: str, m: int, vector: bool) -> None:
    dt = np.dtype(gp.bfloat16)
    x, w, b, y = (
        up(rand((m, 64), dt)),
        up(rand((40, 64), dt)),
        up(rand((40,), dt)),
        gp.empty((m, 40), dt),
    )
    with config.override(gemv_variant=variant):
        plan = linear._plan_cuda(m, 40, 64, dt, 4, vector, True, 0)
    plan(x, w, b, y)
    names = [name for name, *_ in launches]
    if m > 8:
        assert names == ["bias_act_bf16"]
    elif not vector:
        assert names == ["gemv_scalar_bf16"]
    else:
        assert names == [f"gemv_bf16_m{m}" if variant == "simt" else "gemv_mma_bf16"]


@pytest.mark.parametrize(
    ("width", "vec"), [(1, 1), (64, 1), (64, 8), (4096, 8), (70000, 8), (70001, 1)]
)
def test_norm_plans(launches, rand: Rand, width: int, vec: int) -> None:
    dt = np.dtype(gp.float16)
    x, w = up(rand((3, width), dt)), up(rand((width,), dt))
    y, s = gp.empty((3, width), dt), gp.empty((3, width), dt)
    plan = normalization._plan_cuda(3, width, vec, dt, 0)
    plan(x, x, w, None, y, s, 1e-6, False)
    plan(x, None, w, w, y, None, 1e-5, True)
    assert len(launches) == 2


def test_rope_gated_embedding_softmax_plans(launches, rand: Rand) -> None:
    dt = np.dtype(gp.bfloat16)
    q, k = up(rand((5, 4, 64), dt)), up(rand((5, 2, 64), dt))
    cos, sin = rope.rope_cos_sin(32, 64)
    pos = up(np.arange(5, dtype=np.int32))
    flags = rope.rope_flags(pos.dtype, False, True, cos.dtype)
    rope._plan_cuda(5, 4, 2, 64, 64, 32, flags, dt, 0)(q, k, q, k, cos, sin, pos)
    x, h = up(rand((3, 128), dt)), gp.empty((3, 64), dt)
    activations._plan_gated_cuda(3, 64, 8, dt, "silu", 0)(x, h)
    table, ids, e = up(rand((50, 64), dt)), up(np.arange(7, dtype=np.int64)), gp.empty((7, 64), dt)
    activations._plan_embedding_cuda(7, 50, 128, 16, 0)(ids, 1, table, e)
    activations._plan_softmax_cuda(3, 128, 8, dt, 0)(x, gp.empty((3, 128), dt))
    assert [n for n, *_ in launches] == [
        "rope_bf16", "gated_bf16_v8", "embedding_w16", "softmax_bf16_v8_n1",
    ]  # fmt: skip


@pytest.mark.parametrize("kind", ["mma", "wgmma_pipe"])
@pytest.mark.parametrize("d", [64, 80, 128, 256])
def test_prefill_plans(launches, monkeypatch, rand: Rand, kind: str, d: int) -> None:
    monkeypatch.setattr(attention, "_arch", lambda device: "sm_90a")
    dt = np.dtype(gp.float16)
    q, k, v = (up(rand(s, dt)) for s in ((2, 4, 100, d), (2, 2, 130, d), (2, 2, 130, d)))
    mask = up(rand((100, 130), np.float32))
    with config.override(attention_kernel=kind):
        plan = attention._plan_prefill_cuda(2, 4, 2, 100, 130, d, dt, True, 1, False, 0)
    plan(q, k, v, gp.empty(q.shape, dt), mask, (0, 0, 130, 1), 0.125)
    ((name, _, _, smem),) = launches
    wgmma = kind != "mma" and d in (64, 128)
    assert name == (f"attn_prefill_wgmma_pipe_d{d}_f16" if wgmma else f"attn_prefill_d{d}_f16")
    assert smem > 0


@pytest.mark.parametrize("causal", [False, True])
def test_persistent_prefill_plan(launches, monkeypatch, causal: bool) -> None:
    """The persistent kernel's plan: one CTA per SM (fewer when there are fewer row tiles),
    its work lists uploaded once with the plan, the TMA kernel's launch geometry."""
    monkeypatch.setattr(attention, "_arch", lambda device: "sm_90a")
    monkeypatch.setattr(attention, "_sm_count", lambda device: 5)
    dt = np.dtype(gp.bfloat16)
    with config.override(attention_kernel="wgmma_persist"):
        plan = attention._plan_prefill_cuda(2, 4, 2, 300, 300, 128, dt, causal, 0, False, 0)
        small = attention._plan_prefill_cuda(1, 1, 1, 200, 200, 64, dt, causal, 0, False, 0)
        moved = attention._plan_prefill_cuda(1, 1, 1, 200, 200, 64, dt, causal, 0, True, 0)
    assert plan.launch.kernel.name == "attn_prefill_wgmma_persist_d128_bf16"
    assert (plan.launch.grid, plan.launch.block, plan.tma) == (5, 384, True)
    assert plan.sched is not None
    want = attention._prefill_schedule(8, 300, 300, causal, 5)
    np.testing.assert_array_equal(plan.sched.to_numpy(), want)
    assert small.launch.grid == 2 and small.sched is not None  # two row tiles in all
    # inputs whose address may move take the pointer kernel, as for wgmma_tma
    assert moved.launch.kernel.name == "attn_prefill_wgmma_pipe_d64_bf16" and moved.sched is None


@pytest.mark.parametrize("knob", ["on", "off"])
def test_decode_combine_is_a_dependent_launch(launches, knob: str) -> None:
    """The split combine starts by programmatic dependent launch unless the knob turns it off
    (the kernel waits for the split kernel's results itself)."""
    dt = np.dtype(gp.bfloat16)
    with config.override(dependent_launch=knob, decode_combine="kernel"):
        plan = attention._plan_decode_cuda(8, 32, 8, 128, dt, 8192, 0, 8192, 0)
    assert plan.combine is not None and not plan.fused
    assert plan.dependent is (knob == "on")


@pytest.mark.parametrize("combine", ["fused", "kernel"])
def test_decode_fused_combine_counters(launches, monkeypatch, rand: Rand, combine: str) -> None:
    """The fused combine launches one kernel with a counter per (sequence, head group), zeroed
    once per stream and reused by later calls; the kernel combine passes no counters."""
    monkeypatch.setattr(attention, "_has_bulk_copy", lambda device: True)  # as on SM 9.0
    dt, b, hq, hkv, d, n = np.dtype(gp.bfloat16), 2, 32, 8, 128, 8192
    with config.override(decode_kernel="bulk2", decode_combine=combine):
        plan = attention._plan_decode_cuda(b, hq, hkv, d, dt, n, 0, n, 0)
    q, kc = up(rand((b, hq, d), dt)), gp.empty((b, hkv, n, d), dt)
    lens = up(np.full(b, n, np.int32))
    for _ in range(2):
        plan(q, kc, kc, lens, None, gp.empty((b, hq, d), dt), 0.08, *plan.workspace())
    names = [name for name, *_ in launches]
    grid = launches[0][1]
    assert grid[0] > 1  # split
    if combine == "fused":
        assert names == ["attn_decode_bulk2_d128_bf16"] * 2
        assert plan.combine is None and plan.fused == grid[1] * grid[2]
        (counters,) = plan.counters.values()  # one stream: one array, made once
        assert counters.shape == (grid[1] * grid[2],) and not counters.to_numpy().any()
    else:
        assert names[1] == "attn_decode_combine_bf16" and not len(plan.counters)


@pytest.mark.parametrize("bulk", [True, False])
def test_decode_early_launch_and_stream_workspace(
    launches, monkeypatch, rand: Rand, bulk: bool
) -> None:
    """The early launch reaches only a fused-combine bulk2 plan; calls that pass no workspace
    share the stream's, made by the first of them."""
    monkeypatch.setattr(attention, "_has_bulk_copy", lambda device: bulk)
    monkeypatch.setitem(attention._DECODE_EARLY_LAUNCH, "bulk2", True)
    dt, b, hq, hkv, d, n = np.dtype(gp.bfloat16), 2, 32, 8, 128, 8192
    plans = {}
    for combine in ("fused", "kernel"):
        with config.override(decode_kernel="bulk2", decode_combine=combine):
            plans[combine] = attention._plan_decode_cuda(b, hq, hkv, d, dt, n, 0, n, 0)
    fused = plans["fused"]
    assert fused.launch.kernel.name == f"attn_decode_{'bulk2' if bulk else 'mma2'}_d128_bf16"
    assert fused.early == int(bulk) and plans["kernel"].early == 0
    q, kc = up(rand((b, hq, d), dt)), gp.empty((b, hkv, n, d), dt)
    lens = up(np.full(b, n, np.int32))
    for _ in range(3):
        fused(q, kc, kc, lens, None, gp.empty((b, hq, d), dt), 0.08)
    ((o_part, lse),) = fused.workspaces.values()  # one stream: one workspace, made once
    assert o_part.shape == (fused.partials[0],) and lse.shape == (fused.partials[1],)
    assert len(launches) == 3


def test_decode_stream_workspace_and_counters_go_with_their_stream(
    launches, monkeypatch, rand: Rand
) -> None:
    """A split plan's per-stream workspace and counters are held by the stream they were made
    for: a side stream dropped after a call takes them with it (the cached plan keeps neither
    the stream nor its arrays); the default stream's stay for later calls."""
    monkeypatch.setattr(attention, "_has_bulk_copy", lambda device: True)
    dt, b, hq, hkv, d, n = np.dtype(gp.bfloat16), 2, 32, 8, 128, 8192
    with config.override(decode_kernel="bulk2", decode_combine="fused"):
        plan = attention._plan_decode_cuda(b, hq, hkv, d, dt, n, 0, n, 0)
    q, kc = up(rand((b, hq, d), dt)), gp.empty((b, hkv, n, d), dt)
    lens = up(np.full(b, n, np.int32))
    plan(q, kc, kc, lens, None, gp.empty((b, hq, d), dt), 0.08)
    ((default_part, _),) = plan.workspaces.values()
    side = gp.Stream()
    with side:
        plan(q, kc, kc, lens, None, gp.empty((b, hq, d), dt), 0.08)
    assert len(plan.workspaces) == 2 and len(plan.counters) == 2
    side_arrays = [weakref.ref(a) for a in (*plan.workspaces.values()[1],
                                            plan.counters.values()[1])]  # fmt: skip
    stream_object = weakref.ref(side._impl)
    del side
    gc.collect()
    assert stream_object() is None and all(a() is None for a in side_arrays)
    assert len(plan.workspaces) == 1 and len(plan.counters) == 1
    plan(q, kc, kc, lens, None, gp.empty((b, hq, d), dt), 0.08)
    assert plan.workspaces.values()[0][0] is default_part  # reused, not made again


@pytest.mark.parametrize("kernel", ["bulk2", "bulk3", "mma2", "mma", "simt"])
@pytest.mark.parametrize(("b", "n", "paged"), [(1, 4096, False), (8, 8192, True), (3, 100, False)])
def test_decode_plans(
    launches, monkeypatch, rand: Rand, kernel: str, b: int, n: int, paged: bool
) -> None:
    monkeypatch.setattr(attention, "_has_bulk_copy", lambda device: True)  # as on SM 9.0
    dt, hq, hkv, d = np.dtype(gp.bfloat16), 32, 8, 128
    bs = 16
    cache = (n // bs, hkv, bs, d) if paged else (b, hkv, n, d)
    q, kc = up(rand((b, hq, d), dt)), gp.empty(cache, dt)
    lens = up(np.full(b, n, np.int32))
    table = up(np.zeros((b, n // bs // b), np.int32)) if paged else None
    max_blocks = n // bs // b if paged else 0
    capacity = max_blocks * bs if paged else n
    with config.override(decode_kernel=kernel, decode_combine="kernel"):
        plan = attention._plan_decode_cuda(b, hq, hkv, d, dt, cache[2], max_blocks, capacity, 0)
    plan(q, kc, kc, lens, table, gp.empty((b, hq, d), dt), 0.08, *plan.workspace())
    names = [name for name, *_ in launches]
    main = f"attn_decode_{kernel}_d128_bf16" if kernel != "simt" else "attn_decode_d128_bf16"
    assert names[0] == main
    splits = launches[0][1][0]
    assert names[1:] == (["attn_decode_combine_bf16"] if splits > 1 else [])


@pytest.mark.parametrize(
    ("kernel", "d", "block", "expect", "box"),
    [("tma2", 128, 0, "tma2", 64), ("tma3", 128, 0, "tma3", 64), ("tma2", 128, 16, "tma2", 16),
     ("tma2", 64, 8, "tma2", 8), ("tma2", 128, 256, "tma2", 64), ("tma2", 128, 1, "bulk2", 0),
     ("tma2", 128, 24, "bulk2", 0), ("tma3", 80, 0, "bulk3", 0), ("tma2", 256, 0, "tma2", 64)],
)  # fmt: skip
def test_decode_tensor_copy_plans(
    launches, monkeypatch, kernel: str, d: int, block: int, expect: str, box: int
) -> None:
    """The tensor-copy kernels take whole 64-key tiles of a contiguous cache and one box per
    block of a paged one (8 to 64 tokens dividing 64, or 64 rows of longer blocks); other head
    dims and block sizes run the bulk kernel of as many stages, with no tensor maps."""
    monkeypatch.setattr(attention, "_has_bulk_copy", lambda device: True)  # as on SM 9.0
    dt, b, hq, hkv, n = np.dtype(gp.bfloat16), 4, 32, 8, 4096
    cache_len, max_blocks = (block, n // block) if block else (n, 0)
    with config.override(decode_kernel=kernel):
        plan = attention._plan_decode_cuda(b, hq, hkv, d, dt, cache_len, max_blocks, n, 0)
    assert plan.launch.kernel.name == f"attn_decode_{expect}_d{d}_bf16"
    assert plan.box == box
    stages = int(expect[-1])
    if box:  # unpadded tiles after Q's padded rows and a 1 KiB alignment slack
        assert plan.launch.shared_mem == 16 * (d + 8) * 2 + 1024 + 2 * stages * 64 * d * 2
    else:
        assert plan.launch.shared_mem == (16 + 2 * stages * 64) * (d + 8) * 2


def test_decode_tensor_maps_are_made_once_per_cache(launches, monkeypatch, rand: Rand) -> None:
    """A tma plan encodes the K and V caches' tensor maps on their first call only (boxes of
    64 rows x 64 values, 128-byte swizzle, over the caches seen as [rows, D]), and forgets
    them when the cache arrays go."""
    made: list[tuple[tuple[int, ...], tuple[int, ...], int]] = []

    class FakeMap:  # the CPU backend has no tensor maps
        def __init__(self, array: GPUArray, box: tuple[int, ...], swizzle: int) -> None:
            made.append((tuple(array.shape), tuple(box), swizzle))

    monkeypatch.setattr(gp, "TensorMap", FakeMap)
    monkeypatch.setattr(attention, "_has_bulk_copy", lambda device: True)  # as on SM 9.0
    dt, b, hq, hkv, d, n = np.dtype(gp.bfloat16), 2, 32, 8, 128, 4096
    with config.override(decode_kernel="tma2"):
        plan = attention._plan_decode_cuda(b, hq, hkv, d, dt, n, 0, n, 0)
    q, lens = up(rand((b, hq, d), dt)), up(np.full(b, n, np.int32))
    kc, vc = gp.empty((b, hkv, n, d), dt), gp.empty((b, hkv, n, d), dt)
    for _ in range(3):
        plan(q, kc, vc, lens, None, gp.empty((b, hq, d), dt), 0.08)
    assert made == [((b * hkv * n, d), (64, 64), 128)] * 2 and len(launches) == 3
    assert launches[0][0] == "attn_decode_tma2_d128_bf16"
    del kc
    gc.collect()
    assert len(plan.maps) == 1  # v's
    kc = gp.empty((b, hkv, n, d), dt)
    plan(q, kc, vc, lens, None, gp.empty((b, hq, d), dt), 0.08)
    assert len(made) == 3 and len(plan.maps) == 2


@pytest.mark.parametrize("epilogue", [None, "residual", "swiglu", "rope_kv", "f32"])
@pytest.mark.parametrize("norm", [False, True])
def test_decode_linear_plans(
    launches, monkeypatch, request, rand: Rand, epilogue: str | None, norm: bool
) -> None:
    """Every fused epilogue packs the kernel's parameters; the norm stages K values in shared."""
    dl = importlib.import_module("pygpukit.ops.decode_linear")
    monkeypatch.setattr(dl, "_fusable", lambda *args: True)
    monkeypatch.setattr(dl, "_bind_backend", dl._bind_cuda)
    # The 4-rows-a-warp kernel (the other layouts: tests/ops/test_ops_decode_plans.py).
    monkeypatch.setitem(dl.ROWS_PER_WARP, "plain", 4)
    monkeypatch.setitem(dl.ROWS_PER_WARP, "paired", 4)
    # Plans hold the kernels they were made with: make these with the recorder, and drop them
    # after the test so that no later launch goes to a recorder.
    dl.PLANS.clear()
    request.addfinalizer(dl.PLANS.clear)
    dt = np.dtype(gp.bfloat16)
    hq, hkv, d, k = 4, 2, 16, 72
    n = (hq + 2 * hkv) * d
    x, w, b = up(rand((1, k), dt)), up(rand((n, k), dt)), up(rand((n,), dt))
    nw = up(rand((k,), dt)) if norm else None
    kw: dict[str, Any] = {"norm_weight": nw}
    if epilogue == "residual":
        kw.update(epilogue="residual", residual=gp.empty((1, n), dt))
    elif epilogue == "f32":
        b = None
        kw.update(out_dtype=gp.float32)
    elif epilogue == "rope_kv":
        cos, sin = rope.rope_cos_sin(32, d)
        cache = gp.empty((1, hkv, 9, d), dt)
        pos = up(np.array([3], np.int32))
        kw.update(epilogue="rope_kv", rope_kv=dl.RopeKV(cos, sin, pos, cache, cache, hq))
    else:
        kw.update(epilogue=epilogue)
    dl.decode_linear(x, w, b, **kw)
    ((name, grid, block, smem),) = launches
    assert name == "decode_linear_bf16" and block == 128
    assert grid == -(-n // 16) and smem == (k * 2 if norm else 0)


@pytest.mark.parametrize("d", [64, 128])
def test_decode_attention_single_plans(launches, request, rand: Rand, d: int) -> None:
    single = importlib.import_module("pygpukit.ops.decode_attention_single")
    single.PLANS.clear()
    request.addfinalizer(single.PLANS.clear)
    dt = np.dtype(gp.float16)
    q, kc = up(rand((2, 6, d), dt)), gp.empty((2, 3, 50, d), dt)
    plan = single._plan_cuda(2, 6, 3, d, dt, 50, 0)
    plan(q, kc, kc, up(np.array([4, 9], np.int32)), gp.empty((2, 6, d), dt), 0.1)
    assert launches == [(f"attn_decode_single_d{d}_f16", (6, 2), 256, 0)]


def test_decode_linear_dependent_launch_only_for_small_weights(launches) -> None:
    """Dependent launch for a small model's GEMVs; plain launches from 24 MiB of weights on."""
    dl = importlib.import_module("pygpukit.ops.decode_linear")
    dt = np.dtype(gp.bfloat16)
    # (N, K, dtype, norm, pair, rows per warp, one pass, device)
    assert dl._plan(9728, 896, dt, True, 4864, 4, False, 0).dependent  # Qwen2.5-0.5B gate/up
    assert not dl._plan(4096, 4096, dt, False, 0, 4, False, 0).dependent  # Llama-8B o_proj, 34 MB
    with config.override(dependent_launch="off"):
        assert not dl._plan(576, 576, dt, False, 0, 4, False, 0).dependent
