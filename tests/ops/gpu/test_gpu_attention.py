"""Attention and KV cache ops on the GPU against float64 NumPy, and SDPA against PyTorch.

Prefill: every head dim and both half dtypes, GQA/MQA, odd lengths (1, 17, 129, 1000),
additive masks of each broadcast shape and dtype, causal with Sq == Sk, Sq < Sk and Sq > Sk.
Decode (every kernel): mixed per-sequence lengths (0, 1, short, split across CTAs, clamped),
contiguous and paged caches, GQA groups of 1 to 20 query heads per KV head; the splits merged
by the last CTA (the default) and by the combine kernel, call after call and on two streams.
KV writes: exact against NumPy loops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import numpy as np
import pytest
from ops_references import (
    gather_pages,
    kv_append_ref,
    paged_write_ref,
    qkv,
    ref_decode,
    ref_sdpa,
    rel_err,
    visible,
)

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import attention, config


@pytest.fixture
def use_config() -> Iterator[Callable[..., object]]:
    """``use_config(**knobs)``: ops.config knobs in force until the test ends."""
    with ExitStack() as stack:
        yield lambda **knobs: stack.enter_context(config.override(**knobs))


pytestmark = pytest.mark.gpu

HALF = [gp.float16, gp.bfloat16]
LIMIT = {np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}
Rand = Callable[..., np.ndarray]


def run(q, k, v, **kw) -> np.ndarray:
    mask = kw.pop("attn_mask", None)
    if mask is not None:
        kw["attn_mask"] = gp.from_numpy(mask)
    out = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), **kw
    )
    return out.to_numpy()


@pytest.fixture(params=["auto", "mma", "wgmma_pipe"])
def prefill_kernel(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a prefill test with the default kernel (wgmma_persist on SM 9.0 for head dims 64 and
    128), with the mma.sync kernel forced, and with the pointer-based Hopper kernel (mma off SM
    9.0 and for the other head dims); wgmma_tma has its own tests below."""
    with config.override(attention_kernel=request.param):
        yield request.param


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d", [64, 80, 96, 128, 256])
@pytest.mark.parametrize("causal", [False, True])
def test_head_dims(rand, prefill_kernel, dtype, d, causal):
    q, k, v = qkv(rand, 2, 4, 2, 129, 129, d, dtype)
    got = run(q, k, v, is_causal=causal)
    assert rel_err(got, ref_sdpa(q, k, v, causal=causal)) < LIMIT[np.dtype(dtype)]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    ("hq", "hkv", "sq", "sk"),
    [
        (2, 2, 1, 1),
        (4, 1, 1, 1000),  # MQA, a single query over many keys
        (8, 2, 17, 17),
        (4, 4, 1000, 1000),
        (6, 3, 17, 129),  # Sq < Sk
        (4, 2, 129, 17),  # Sq > Sk: causal rows without keys
        (2, 1, 64, 64),  # exactly one tile
        (2, 2, 65, 63),
    ],
)
@pytest.mark.parametrize("causal", [False, True])
def test_lengths_gqa_causal(rand, prefill_kernel, dtype, hq, hkv, sq, sk, causal):
    q, k, v = qkv(rand, 1, hq, hkv, sq, sk, 128, dtype)
    got = run(q, k, v, is_causal=causal)
    assert np.all(np.isfinite(got.astype(np.float32)))
    ref = ref_sdpa(q, k, v, causal=causal)
    assert rel_err(got, ref) < LIMIT[np.dtype(dtype)]
    if causal and sq > sk:
        assert np.all(got[:, :, : sq - sk].astype(np.float32) == 0)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("mask_dtype", ["float32", "input"])
@pytest.mark.parametrize("shape", [(129, 200), (2, 1, 129, 200), (1, 4, 1, 200), (200,)])
@pytest.mark.parametrize("causal", [False, True])
def test_masks(rand, prefill_kernel, dtype, mask_dtype, shape, causal):
    q, k, v = qkv(rand, 2, 4, 2, 129, 200, 64, dtype)
    mask = rand(shape).astype(np.float32 if mask_dtype == "float32" else dtype)
    got = run(q, k, v, attn_mask=mask, is_causal=causal)
    assert rel_err(got, ref_sdpa(q, k, v, mask=mask, causal=causal)) < LIMIT[np.dtype(dtype)]


def test_mask_fully_masked_row_and_scale(rand):
    q, k, v = qkv(rand, 1, 2, 2, 70, 70, 96, gp.bfloat16)
    mask = rand((70, 70)).astype(np.float32)
    mask[3, :] = -np.inf
    got = run(q, k, v, attn_mask=mask, scale=0.04)
    assert np.all(got[:, :, 3].astype(np.float32) == 0)
    assert rel_err(got, ref_sdpa(q, k, v, mask=mask, scale=0.04)) < 1e-2


def test_out_argument(rand):
    q, k, v = qkv(rand, 1, 2, 2, 33, 33, 64, gp.float16)
    out = gp.empty(q.shape, gp.float16)
    res = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), out=out
    )
    assert res is out
    assert rel_err(out.to_numpy(), ref_sdpa(q, k, v)) < 3e-3


def _torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA here")
    return torch


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d", [64, 80, 96, 128, 256])
@pytest.mark.parametrize(("sq", "sk"), [(1000, 1000), (17, 300)])
@pytest.mark.parametrize("causal", [False, True])
def test_vs_torch(rand, prefill_kernel, dtype, d, sq, sk, causal):
    torch = _torch()
    q, k, v = qkv(rand, 2, 8, 2, sq, sk, d, dtype)
    got = run(q, k, v, is_causal=causal)
    tdt = torch.float16 if np.dtype(dtype) == np.float16 else torch.bfloat16
    tq, tk, tv = (torch.from_numpy(a.astype(np.float32)).cuda().to(tdt) for a in (q, k, v))
    tk, tv = tk.repeat_interleave(4, dim=1), tv.repeat_interleave(4, dim=1)
    if causal and sq != sk:  # PyTorch's is_causal is top-left aligned: pass our rule as a mask
        keep = torch.from_numpy(visible(sq, sk)).cuda()
        want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, attn_mask=keep)
    else:
        want = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    assert rel_err(got, want.float().cpu().numpy()) < LIMIT[np.dtype(dtype)]


@pytest.mark.parametrize("b", [1, 3])
@pytest.mark.parametrize(("s", "causal"), [(1, True), (200, True), (1024, True), (333, False)])
@pytest.mark.parametrize("d", [64, 128])
def test_sdpa_strided_views(rand, prefill_kernel, b, s, causal, d):
    """Strided q/k/v (q a [B, S, H, D] projection transposed, k/v the first S slots of a longer
    cache) give the contiguous inputs' result with every prefill kernel: read in place by the
    TMA kernels at one batch, copied elsewhere."""
    hq, hkv, cap = 16, 4, s + 64
    qh = (rand((b, s, hq, d)) * 0.5).astype(gp.bfloat16)
    kh = (rand((b, hkv, cap, d)) * 0.5).astype(gp.bfloat16)
    vh = rand((b, hkv, cap, d)).astype(gp.bfloat16)
    q = gp.from_numpy(qh).transpose(0, 2, 1, 3)
    k, v = gp.from_numpy(kh)[:, :, :s], gp.from_numpy(vh)[:, :, :s]
    got = ops.scaled_dot_product_attention(q, k, v, is_causal=causal).to_numpy()
    packed = ops.scaled_dot_product_attention(
        q.contiguous(), k.contiguous(), v.contiguous(), is_causal=causal
    ).to_numpy()
    np.testing.assert_array_equal(got, packed)  # the same kernel on the same values
    want = ref_sdpa(qh.transpose(0, 2, 1, 3), kh[:, :, :s], vh[:, :, :s], causal=causal)
    assert rel_err(got, want) < LIMIT[np.dtype(gp.bfloat16)]


# --- decode -------------------------------------------------------------------------------


@pytest.fixture(params=["mma", "mma2", "bulk2", "bulk3", "tma2", "tma3", "simt"])
def decode_kernel(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a decode test with each decode kernel (PYGPUKIT_DECODE_KERNEL)."""
    with config.override(decode_kernel=request.param):
        yield str(request.param)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d", [64, 80, 96, 128, 256])
@pytest.mark.parametrize(("hq", "hkv"), [(32, 8), (8, 8), (6, 1), (24, 4), (40, 2)])
def test_decode_contiguous(rand, rng, decode_kernel, dtype, d, hq, hkv):
    max_len = 3000
    lens = np.array([0, 1, 17, 129, 1000, 2999, 3000, 5000], np.int32)  # 5000: clamped
    rng.shuffle(lens)
    b = len(lens)
    q = (rand((b, hq, d)) * 0.3).astype(dtype)
    kc = (rand((b, hkv, max_len, d)) * 0.3).astype(dtype)
    vc = rand((b, hkv, max_len, d)).astype(dtype)
    got = ops.decode_attention(
        gp.from_numpy(q), gp.from_numpy(kc), gp.from_numpy(vc), gp.from_numpy(lens)
    ).to_numpy()
    n = np.minimum(lens, max_len)
    ref = ref_decode(q, [kc[i, :, : n[i]] for i in range(b)], [vc[i, :, : n[i]] for i in range(b)])
    assert rel_err(got, ref) < LIMIT[np.dtype(dtype)]
    assert np.all(got[lens == 0].astype(np.float32) == 0)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    ("d", "block_size"), [(128, 16), (64, 256), (256, 1), (80, 32), (64, 8), (128, 64)]
)
def test_decode_paged(rand, rng, decode_kernel, dtype, d, block_size):
    b, hq, hkv, max_blocks = 5, 16, 4, 4096 // block_size
    nblocks = b * max_blocks + 3
    q = (rand((b, hq, d)) * 0.3).astype(dtype)
    kc = (rand((nblocks, hkv, block_size, d)) * 0.3).astype(dtype)
    vc = rand((nblocks, hkv, block_size, d)).astype(dtype)
    table = rng.permutation(nblocks)[: b * max_blocks].reshape(b, max_blocks).astype(np.int32)
    lens = np.array([1, 37, 4096, 2000, 0], np.int32)
    keys, vals = gather_pages(kc, table, lens), gather_pages(vc, table, lens)
    got = ops.decode_attention(
        gp.from_numpy(q),
        gp.from_numpy(kc),
        gp.from_numpy(vc),
        gp.from_numpy(lens),
        block_table=gp.from_numpy(table),
    ).to_numpy()
    assert rel_err(got, ref_decode(q, keys, vals)) < LIMIT[np.dtype(dtype)]


@pytest.mark.parametrize("kernel", ["bulk2", "bulk3", "tma2", "mma2", "simt"])
@pytest.mark.parametrize(("b", "hq", "hkv", "d"), [(1, 32, 8, 128), (3, 6, 1, 64), (8, 40, 2, 80)])
def test_decode_fused_combine(rand, rng, use_config, kernel, b, hq, hkv, d):
    """The last split CTA's merge equals the combine kernel's and float64 NumPy, call after call
    with new lengths (0, 1, odd, one split's worth, clamped): its counters are left at zero."""
    use_config(decode_kernel=kernel)
    max_len = 9000  # batch 1: dozens of splits; batch 8: a few
    dtype = gp.bfloat16
    q = (rand((b, hq, d)) * 0.3).astype(dtype)
    kc = (rand((b, hkv, max_len, d)) * 0.3).astype(dtype)
    vc = rand((b, hkv, max_len, d)).astype(dtype)
    gq, gk, gv = gp.from_numpy(q), gp.from_numpy(kc), gp.from_numpy(vc)
    choices = np.array([0, 1, 255, 257, 2049, 8191, 9000, 12000], np.int32)
    for _ in range(4):
        lens = rng.choice(choices, size=b).astype(np.int32)
        n = np.minimum(lens, max_len)
        ref = ref_decode(
            q, [kc[i, :, : n[i]] for i in range(b)], [vc[i, :, : n[i]] for i in range(b)]
        )
        outs = {}
        for combine in ("fused", "kernel"):
            with config.override(decode_combine=combine):
                outs[combine] = ops.decode_attention(gq, gk, gv, gp.from_numpy(lens)).to_numpy()
            live = lens > 0  # an empty row's output is exactly zero (no relative error of it)
            if live.any():
                err = rel_err(outs[combine][live], ref[live])
                assert err < LIMIT[np.dtype(dtype)], (combine, lens)
            assert np.all(outs[combine][~live].astype(np.float32) == 0)
        np.testing.assert_allclose(
            outs["fused"].astype(np.float32), outs["kernel"].astype(np.float32), rtol=0, atol=2e-2
        )


@pytest.mark.parametrize("paged", [False, True])
def test_decode_early_launch_changes_no_bit(rand, rng, use_config, monkeypatch, paged):
    """Letting the next call launch after the key loops (bulk2's early launch) only moves its
    start: calls back to back, with two sets of lengths that end mid-tile, mid-block and past a
    split's last tile, give bitwise the outputs of the plain kernel, which match float64 NumPy;
    with three and with two CTAs per SM planned."""
    use_config(decode_kernel="bulk2")
    b, hq, hkv, d, block, max_blocks = 4, 16, 4, 128, 16, 300
    dtype = gp.bfloat16
    lens = [np.array([4800, 1, 2049, 3333], np.int32), np.array([0, 4799, 64, 1000], np.int32)]
    q = (rand((b, hq, d)) * 0.3).astype(dtype)
    if paged:
        nblocks = b * max_blocks + 5
        kc = (rand((nblocks, hkv, block, d)) * 0.3).astype(dtype)
        vc = rand((nblocks, hkv, block, d)).astype(dtype)
        table = rng.permutation(nblocks)[: b * max_blocks].reshape(b, max_blocks).astype(np.int32)
        refs = [ref_decode(q, gather_pages(kc, table, n), gather_pages(vc, table, n)) for n in lens]
        gtable = gp.from_numpy(table)
    else:
        kc = (rand((b, hkv, block * max_blocks, d)) * 0.3).astype(dtype)
        vc = rand((b, hkv, block * max_blocks, d)).astype(dtype)
        refs = [
            ref_decode(
                q, [kc[i, :, : n[i]] for i in range(b)], [vc[i, :, : n[i]] for i in range(b)]
            )
            for n in lens
        ]
        gtable = None
    gq, gk, gv = (gp.from_numpy(x) for x in (q, kc, vc))
    glens = [gp.from_numpy(n) for n in lens]
    outs = {}
    for per_sm, early in ((3, False), (3, True), (2, False), (2, True)):
        monkeypatch.setitem(attention._DECODE_CTAS_PER_SM, "bulk2", per_sm)
        monkeypatch.setitem(attention._DECODE_EARLY_LAUNCH, "bulk2", early)
        attention.DECODE_PLANS.clear()
        calls = [
            ops.decode_attention(gq, gk, gv, glens[i % 2], block_table=gtable) for i in range(4)
        ]
        outs[per_sm, early] = [c.to_numpy() for c in calls]
    attention.DECODE_PLANS.clear()  # no plan with a patched knob outlives the test
    for per_sm in (3, 2):  # the split differs with the CTAs per SM, and so do its roundings
        base = outs[per_sm, False]
        for i in range(4):
            assert rel_err(base[i], refs[i % 2]) < LIMIT[np.dtype(dtype)], (per_sm, i)
            assert np.all(base[i][lens[i % 2] == 0].astype(np.float32) == 0)
            early = outs[per_sm, True][i]
            assert np.array_equal(early.view(np.uint16), base[i].view(np.uint16)), (per_sm, i)


def test_decode_fused_combine_streams_and_layer(rand, rng):
    """The fused combine on two streams at once (each its own counters) and through the layer,
    whose workspace is kept across calls."""
    b, hq, hkv, d, max_len = 2, 16, 4, 128, 8192
    dtype = gp.bfloat16
    q = (rand((b, hq, d)) * 0.3).astype(dtype)
    kc = (rand((b, hkv, max_len, d)) * 0.3).astype(dtype)
    vc = rand((b, hkv, max_len, d)).astype(dtype)
    gq, gk, gv = gp.from_numpy(q), gp.from_numpy(kc), gp.from_numpy(vc)
    lens = [np.array([8192, 3001], np.int32), np.array([77, 6000], np.int32)]
    refs = [
        ref_decode(q, [kc[i, :, : n[i]] for i in range(b)], [vc[i, :, : n[i]] for i in range(b)])
        for n in lens
    ]
    streams = [gp.Stream(), gp.Stream()]
    outs: list[list[object]] = [[], []]
    for _ in range(5):
        for i, st in enumerate(streams):
            with st:
                outs[i].append(ops.decode_attention(gq, gk, gv, gp.from_numpy(lens[i])))
    for st in streams:
        st.synchronize()
    for i in range(2):
        for o in outs[i]:
            assert rel_err(o.to_numpy(), refs[i]) < LIMIT[np.dtype(dtype)]
    layer = ops.layers.Attention(hq, hkv, d)
    for i in (0, 1, 0):
        got = layer.decode(gq, gk, gv, gp.from_numpy(lens[i])).to_numpy()
        assert rel_err(got, refs[i]) < LIMIT[np.dtype(dtype)]


def test_decode_matches_prefill_last_row(rand, decode_kernel):
    """One decode step equals the last row of causal prefill over the same keys."""
    b, hq, hkv, s, d = 2, 8, 2, 777, 128
    q, k, v = qkv(rand, b, hq, hkv, s, s, d, gp.bfloat16)
    full = run(q, k, v, is_causal=True)
    lens = gp.from_numpy(np.full(b, s, np.int32))
    step = ops.decode_attention(
        gp.from_numpy(np.ascontiguousarray(q[:, :, -1])), gp.from_numpy(k), gp.from_numpy(v), lens
    ).to_numpy()
    assert rel_err(step, full[:, :, -1]) < 1e-2


# --- KV cache writes ----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [gp.float16, gp.bfloat16, gp.float32])
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_kv_append(rand, rng, dtype, per_token, index_dtype):
    b, hkv, t, d, max_len = 4, 8, 5, 128, 300
    k, v = rand((b, hkv, t, d)).astype(dtype), rand((b, hkv, t, d)).astype(dtype)
    kc0 = rand((b, hkv, max_len, d)).astype(dtype)
    vc0 = rand((b, hkv, max_len, d)).astype(dtype)
    if per_token:
        pos = np.stack([rng.permutation(max_len)[:t] for _ in range(b)]).astype(index_dtype)
        pos[0, 0], pos[1, 1] = -5, max_len
    else:
        pos = np.array([0, 17, 100, max_len - 3], index_dtype)
    kc, vc = gp.from_numpy(kc0), gp.from_numpy(vc0)
    ops.kv_cache_append(gp.from_numpy(k), gp.from_numpy(v), kc, vc, gp.from_numpy(pos))
    want_k, want_v = kv_append_ref(kc0, vc0, k, v, pos)
    np.testing.assert_array_equal(kc.to_numpy(), want_k)
    np.testing.assert_array_equal(vc.to_numpy(), want_v)


@pytest.mark.parametrize("dtype", [gp.float16, gp.bfloat16])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_paged_write(rand, rng, dtype, index_dtype):
    n, hkv, d, nblocks, bs = 1000, 4, 128, 80, 16
    k, v = rand((n, hkv, d)).astype(dtype), rand((n, hkv, d)).astype(dtype)
    kc0 = rand((nblocks, hkv, bs, d)).astype(dtype)
    vc0 = rand((nblocks, hkv, bs, d)).astype(dtype)
    slots = rng.permutation(nblocks * bs)[:n].astype(index_dtype)
    slots[::7] = -1
    slots[3] = nblocks * bs + 1
    kc, vc = gp.from_numpy(kc0), gp.from_numpy(vc0)
    ops.paged_kv_cache_write(gp.from_numpy(k), gp.from_numpy(v), kc, vc, gp.from_numpy(slots))
    want_k, want_v = paged_write_ref(kc0, vc0, k, v, slots)
    np.testing.assert_array_equal(kc.to_numpy(), want_k)
    np.testing.assert_array_equal(vc.to_numpy(), want_v)


def test_write_then_decode(rand, decode_kernel):
    """Paged writes followed by decode over the written blocks: the serving loop's order."""
    b, hq, hkv, d, bs, steps = 3, 8, 2, 128, 16, 40
    nblocks = b * 4
    kc = gp.zeros((nblocks, hkv, bs, d), gp.bfloat16)
    vc = gp.zeros((nblocks, hkv, bs, d), gp.bfloat16)
    table = np.arange(nblocks, dtype=np.int32).reshape(b, 4)[:, ::-1].copy()
    ks = (rand((steps, b, hkv, d)) * 0.3).astype(gp.bfloat16)
    vs = rand((steps, b, hkv, d)).astype(gp.bfloat16)
    for t in range(steps):
        slots = np.array([table[i, t // bs] * bs + t % bs for i in range(b)], np.int32)
        ops.paged_kv_cache_write(
            gp.from_numpy(ks[t]), gp.from_numpy(vs[t]), kc, vc, gp.from_numpy(slots)
        )
    q = (rand((b, hq, d)) * 0.3).astype(gp.bfloat16)
    got = ops.decode_attention(
        gp.from_numpy(q),
        kc,
        vc,
        gp.from_numpy(np.full(b, steps, np.int32)),
        block_table=gp.from_numpy(table),
    ).to_numpy()
    keys = [ks[:, i].transpose(1, 0, 2) for i in range(b)]
    vals = [vs[:, i].transpose(1, 0, 2) for i in range(b)]
    assert rel_err(got, ref_decode(q, keys, vals)) < 1e-2


# --- Hopper wgmma prefill (head dims 64, 128): the default on SM 9.0; each variant forced ---
# through PYGPUKIT_ATTENTION_KERNEL (wgmma_pipe: each warpgroup overlaps its softmax with its
# own P V; wgmma_tma: one TMA producer thread and two consumer warpgroups synchronized by
# mbarriers, taking turns at the tensor cores; wgmma_persist: the same, persistent, each CTA
# running a list of query tiles).
WGMMA_VARIANTS = ["wgmma_pipe", "wgmma_tma", "wgmma_persist"]


def _hopper() -> None:
    from pygpukit.ops import attention

    if attention._arch(gp.get_device()) != "sm_90a":
        pytest.skip("the wgmma prefill kernel runs on SM 9.0 only")


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize(
    ("hq", "hkv", "sq", "sk"),
    [(2, 2, 1, 1), (4, 1, 17, 17), (8, 2, 129, 129), (4, 4, 1000, 1000), (4, 2, 17, 300),
     (4, 2, 300, 17), (2, 2, 128, 128), (2, 2, 256, 255), (2, 1, 2048, 2048)],
)  # fmt: skip
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", WGMMA_VARIANTS)
def test_wgmma_prefill(rand, use_config, variant, dtype, d, hq, hkv, sq, sk, causal):
    _hopper()
    use_config(attention_kernel=variant)
    q, k, v = qkv(rand, 2, hq, hkv, sq, sk, d, dtype)
    got = run(q, k, v, is_causal=causal)
    assert np.all(np.isfinite(got.astype(np.float32)))
    assert rel_err(got, ref_sdpa(q, k, v, causal=causal)) < LIMIT[np.dtype(dtype)]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("shape", [(129, 200), (2, 1, 129, 200), (1, 4, 1, 200)])
@pytest.mark.parametrize("variant", WGMMA_VARIANTS)
def test_wgmma_prefill_masks(rand, use_config, variant, dtype, shape):
    _hopper()
    use_config(attention_kernel=variant)
    q, k, v = qkv(rand, 2, 4, 2, 129, 200, 128, dtype)
    mask = rand(shape).astype(np.float32)
    got = run(q, k, v, attn_mask=mask, is_causal=True)
    assert rel_err(got, ref_sdpa(q, k, v, mask=mask, causal=True)) < LIMIT[np.dtype(dtype)]


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", WGMMA_VARIANTS)
def test_wgmma_prefill_no_keys(rand, use_config, variant, d, causal):
    """Sk = 0: every CTA runs zero key tiles (no load, no barrier phase) and writes zeros."""
    _hopper()
    use_config(attention_kernel=variant)
    q, k, v = qkv(rand, 2, 4, 2, 200, 0, d, gp.bfloat16)
    got = run(q, k, v, is_causal=causal)
    assert got.shape == q.shape
    assert np.all(got.astype(np.float32) == 0)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("variant", WGMMA_VARIANTS)
def test_wgmma_matches_mma(rand, use_config, variant, d):
    """Both kernels on a long causal problem (4 K tokens): same result within bf16 rounding."""
    _hopper()
    q, k, v = qkv(rand, 1, 4, 4, 4096, 4096, d, gp.bfloat16)
    use_config(attention_kernel="mma")
    a = run(q, k, v, is_causal=True)
    use_config(attention_kernel=variant)
    b = run(q, k, v, is_causal=True)
    assert rel_err(b, a) < 1e-2


@pytest.mark.parametrize("scale", [-0.1, 0.0, 0.04])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", WGMMA_VARIANTS)
def test_wgmma_prefill_explicit_scales(rand, use_config, variant, scale, causal):
    """Interior tiles fold a positive scale into exp2; zero and negative scales take the
    explicitly scaled path on every tile (the fold needs max(S * scale) = max(S) * scale)."""
    _hopper()
    use_config(attention_kernel=variant)
    q, k, v = qkv(rand, 1, 2, 2, 300, 300, 128, gp.bfloat16)
    got = run(q, k, v, is_causal=causal, scale=scale)
    ref = ref_sdpa(q, k, v, causal=causal, scale=scale)
    assert rel_err(got, ref) < LIMIT[np.dtype(gp.bfloat16)]


@pytest.mark.parametrize("variant", WGMMA_VARIANTS)
def test_wgmma_prefill_head_groups_with_a_partial_last_group(rand, use_config, variant):
    """B * Hq = 12 heads: one full group of 8 and a last group of 4 (the kernels' PrefillOrder),
    with GQA, causal, row tiles of unequal length."""
    _hopper()
    use_config(attention_kernel=variant)
    q, k, v = qkv(rand, 3, 4, 2, 700, 700, 64, gp.float16)
    got = run(q, k, v, is_causal=True)
    assert rel_err(got, ref_sdpa(q, k, v, causal=True)) < LIMIT[np.dtype(gp.float16)]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(("sq", "sk"), [(700, 700), (700, 300), (300, 700), (1100, 1100)])
@pytest.mark.parametrize("causal", [False, True])
def test_persistent_prefill_equals_the_tma_kernel(rand, use_config, dtype, sq, sk, causal):
    """More query tiles than SMs (B * Hq * row tiles >= 288): each CTA of the persistent kernel
    runs several, of unequal causal length (some with no key at all when Sq > Sk), reusing its Q
    buffer and continuing its K/V ring from one to the next. Same tile math as the
    one-CTA-per-tile TMA kernel (checked against float64 above), other work order: the output
    is bit for bit that kernel's, on two calls of one plan (its work lists are reused)."""
    _hopper()
    q, k, v = qkv(rand, 2, 48, 8, sq, sk, 64 if sq < 1000 else 128, dtype)
    use_config(attention_kernel="wgmma_tma")
    want = run(q, k, v, is_causal=causal)
    use_config(attention_kernel="wgmma_persist")
    np.testing.assert_array_equal(run(q, k, v, is_causal=causal), want)
    np.testing.assert_array_equal(run(q, k, v, is_causal=causal), want)
    # and the first (batch, head) against float64
    one = (slice(0, 1), slice(0, 6))
    ref = ref_sdpa(q[one], k[one[0], :1], v[one[0], :1], causal=causal)
    assert rel_err(want[one], ref) < LIMIT[np.dtype(dtype)]


def test_prefill_of_evictable_inputs(rand, use_config):
    """Evictable q, k, v (their address may change) run on the Hopper kernel that takes
    pointers: the TMA kernel's maps would hold a stale address."""
    use_config(attention_kernel="auto")
    q, k, v = qkv(rand, 2, 4, 2, 200, 200, 128, gp.bfloat16)
    ga = [gp.from_numpy(x, evictable=True) for x in (q, k, v)]
    got = ops.scaled_dot_product_attention(*ga, is_causal=True).to_numpy()
    assert rel_err(got, ref_sdpa(q, k, v, causal=True)) < LIMIT[np.dtype(gp.bfloat16)]


def test_wgmma_is_the_hopper_default(use_config):
    """Unset or auto: wgmma_persist for head dims 64 and 128 on SM 9.0, mma for the others."""
    _hopper()
    from pygpukit.ops import attention

    use_config(attention_kernel="auto")
    assert [attention._prefill_kernel(d) for d in (64, 80, 128, 256)] == [
        "wgmma_persist", "mma", "wgmma_persist", "mma",
    ]  # fmt: skip
    use_config(attention_kernel="mma")
    assert attention._prefill_kernel(128) == "mma"


# SmolLM2-135M's attention: 9 query heads over 3 KV heads (groups of 3, not a power of two), head
# dim 64, a chat-sized prompt (37 tokens: less than one 64- or 128-row tile) and a longer one.
@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("s", [37, 300])
def test_prefill_at_smollm2_shapes(rand, prefill_kernel, dtype, s):
    q, k, v = qkv(rand, 1, 9, 3, s, s, 64, dtype)
    got = run(q, k, v, is_causal=True, scale=0.125)
    assert rel_err(got, ref_sdpa(q, k, v, causal=True, scale=0.125)) < LIMIT[np.dtype(dtype)]


@pytest.mark.parametrize("dtype", HALF)
def test_decode_at_smollm2_shapes(rand, rng, decode_kernel, dtype):
    max_len = 128
    lens = np.array([1, 37, 38, 64, 65, 128], np.int32)
    b = len(lens)
    q = (rand((b, 9, 64)) * 0.3).astype(dtype)
    kc = (rand((b, 3, max_len, 64)) * 0.3).astype(dtype)
    vc = rand((b, 3, max_len, 64)).astype(dtype)
    got = ops.decode_attention(
        gp.from_numpy(q), gp.from_numpy(kc), gp.from_numpy(vc), gp.from_numpy(lens), scale=0.125
    ).to_numpy()
    ref = ref_decode(
        q, [kc[i, :, : lens[i]] for i in range(b)], [vc[i, :, : lens[i]] for i in range(b)],
        scale=0.125,
    )  # fmt: skip
    assert rel_err(got, ref) < LIMIT[np.dtype(dtype)]
