"""pygpukit.ops attention on the CPU backend: the NumPy path vs float64 references.

The references (ops_references.py, shared with the GPU tests) are independent of pygpukit.ops' code.
"""

from __future__ import annotations

import weakref

import numpy as np
import pytest
from ops_references import gather_pages, qkv, ref_decode, ref_sdpa, rel_err

import pygpukit as gp
from pygpukit import ops

HALF = [gp.float16, gp.bfloat16]
LIMIT = {np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("d", [64, 80, 96, 128, 256])
def test_sdpa_head_dims(rand, dtype, d):
    q, k, v = qkv(rand, 1, 2, 2, 17, 33, d, dtype)
    got = ops.scaled_dot_product_attention(gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v))
    assert got.dtype == np.dtype(dtype) and got.shape == q.shape
    assert rel_err(got.to_numpy(), ref_sdpa(q, k, v)) < LIMIT[np.dtype(dtype)]


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    ("hq", "hkv", "sq", "sk"),
    [(4, 4, 1, 1), (8, 2, 17, 17), (4, 1, 129, 129), (6, 3, 5, 70), (4, 2, 40, 9)],
)
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_gqa_lengths_causal(rand, dtype, hq, hkv, sq, sk, causal):
    q, k, v = qkv(rand, 2, hq, hkv, sq, sk, 64, dtype)
    got = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), is_causal=causal
    ).to_numpy()
    ref = ref_sdpa(q, k, v, causal=causal)
    assert rel_err(got, ref) < LIMIT[np.dtype(dtype)]


@pytest.mark.parametrize("b", [1, 2])
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_strided_views(rand, b, causal):
    """q as a [B, S, H, D] projection seen heads-first, k/v as the first S slots of a longer
    cache, a layer too: the same values as contiguous arrays."""
    s, hq, hkv, d, cap = 37, 8, 2, 64, 50
    qh = rand((b, s, hq, d)).astype(gp.bfloat16)
    kh, vh = (rand((b, hkv, cap, d)).astype(gp.bfloat16) for _ in "kv")
    q = gp.from_numpy(qh).transpose(0, 2, 1, 3)
    k, v = gp.from_numpy(kh)[:, :, :s], gp.from_numpy(vh)[:, :, :s]
    assert not q.is_contiguous() and not k.is_contiguous()
    want = ref_sdpa(qh.transpose(0, 2, 1, 3), kh[:, :, :s], vh[:, :, :s], causal=causal)
    got = ops.scaled_dot_product_attention(q, k, v, is_causal=causal).to_numpy()
    assert rel_err(got, want) < LIMIT[np.dtype(gp.bfloat16)]
    layer = ops.layers.Attention(hq, hkv, d, causal=causal)
    assert rel_err(layer.prefill(q, k, v).to_numpy(), want) < LIMIT[np.dtype(gp.bfloat16)]


def test_causal_bottom_right_rule(rand):
    # Sq < Sk: the last query sees every key, the first sees Sk - Sq + 1 of them.
    q, k, v = qkv(rand, 1, 1, 1, 3, 8, 64, gp.float16)
    got = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), is_causal=True
    ).to_numpy()
    last = ref_sdpa(q[:, :, 2:], k, v)  # no mask at all
    first = ref_sdpa(q[:, :, :1], k[:, :, :6], v[:, :, :6])
    assert rel_err(got[:, :, 2:], last) < 3e-3
    assert rel_err(got[:, :, :1], first) < 3e-3


def test_causal_rows_without_keys_are_zero(rand):
    q, k, v = qkv(rand, 1, 2, 2, 10, 4, 64, gp.bfloat16)
    got = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), is_causal=True
    ).to_numpy()
    assert np.all(got[:, :, :6].astype(np.float32) == 0)
    assert rel_err(got[:, :, 6:], ref_sdpa(q, k, v, causal=True)[:, :, 6:]) < 1e-2


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("mask_dtype", ["float32", "input"])
@pytest.mark.parametrize("mask_shape", [(17, 23), (2, 1, 17, 23), (1, 4, 1, 23), (23,)])
def test_sdpa_additive_mask(rand, dtype, mask_dtype, mask_shape):
    q, k, v = qkv(rand, 2, 4, 2, 17, 23, 80, dtype)
    mdt = np.float32 if mask_dtype == "float32" else dtype
    mask = rand(mask_shape).astype(mdt)
    got = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), attn_mask=gp.from_numpy(mask)
    ).to_numpy()
    assert rel_err(got, ref_sdpa(q, k, v, mask=mask)) < LIMIT[np.dtype(dtype)]


def test_mask_with_causal_and_fully_masked_row(rand):
    q, k, v = qkv(rand, 1, 2, 1, 9, 9, 64, gp.float16)
    mask = rand((9, 9)).astype(np.float32)
    mask[4, :] = -np.inf
    got = ops.scaled_dot_product_attention(
        gp.from_numpy(q),
        gp.from_numpy(k),
        gp.from_numpy(v),
        attn_mask=gp.from_numpy(mask),
        is_causal=True,
    ).to_numpy()
    assert np.all(got[:, :, 4].astype(np.float32) == 0)
    assert rel_err(got, ref_sdpa(q, k, v, mask=mask, causal=True)) < 3e-3


def test_scale_and_out(rand):
    q, k, v = qkv(rand, 1, 2, 2, 12, 12, 96, gp.float16)
    out = gp.empty(q.shape, gp.float16)
    got = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), scale=0.05, out=out
    )
    assert got is out
    assert rel_err(out.to_numpy(), ref_sdpa(q, k, v, scale=0.05)) < 3e-3


def test_empty_query(rand):
    q, k, v = qkv(rand, 1, 2, 2, 0, 5, 64, gp.float16)
    got = ops.scaled_dot_product_attention(gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v))
    assert got.shape == (1, 2, 0, 64)


def _arrays(rand, *shapes, dtype=gp.float16):
    return [gp.from_numpy(rand(s).astype(dtype)) for s in shapes]


def test_sdpa_errors(rand):
    q, k, v = _arrays(rand, (1, 4, 8, 64), (1, 2, 8, 64), (1, 2, 8, 64))
    sdpa = ops.scaled_dot_product_attention
    with pytest.raises(TypeError, match="q must have dtype"):
        sdpa(gp.from_numpy(rand((1, 4, 8, 64), np.float64)), k, v)
    with pytest.raises(TypeError, match="k has dtype float16, expected float32"):
        sdpa(gp.from_numpy(rand((1, 4, 8, 64))), k, v)
    with pytest.raises(TypeError, match="k has dtype"):
        sdpa(q, *_arrays(rand, (1, 2, 8, 64), dtype=gp.bfloat16), v)
    with pytest.raises(ValueError, match="4-D"):
        sdpa(*_arrays(rand, (4, 8, 64)), k, v)
    with pytest.raises(ValueError, match="same shape"):
        sdpa(q, k, *_arrays(rand, (1, 2, 9, 64)))
    with pytest.raises(ValueError, match="match q"):
        sdpa(q, *_arrays(rand, (2, 2, 8, 64), (2, 2, 8, 64)))
    with pytest.raises(ValueError, match="multiple of the KV heads"):
        sdpa(q, *_arrays(rand, (1, 3, 8, 64), (1, 3, 8, 64)))
    with pytest.raises(ValueError, match="head dim 48"):
        sdpa(*_arrays(rand, (1, 4, 8, 48), (1, 2, 8, 48), (1, 2, 8, 48)))
    with pytest.raises(ValueError, match="does not broadcast"):
        sdpa(q, k, v, attn_mask=gp.from_numpy(rand((8, 7))))
    with pytest.raises(TypeError, match="attn_mask must have dtype"):
        sdpa(q, k, v, attn_mask=gp.from_numpy(rand((8, 8), np.float64)))
    with pytest.raises(TypeError, match="is_causal must be True or False"):
        sdpa(q, k, v, is_causal=1)
    with pytest.raises(ValueError, match="scale must be finite"):
        sdpa(q, k, v, scale=float("nan"))
    with pytest.raises(TypeError, match="scale must be a real number"):
        sdpa(q, k, v, scale="0.1")
    with pytest.raises(ValueError, match="out must have shape"):
        sdpa(q, k, v, out=gp.empty((1, 4, 8, 32), gp.float16))
    with pytest.raises(TypeError, match="out must have dtype"):
        sdpa(q, k, v, out=gp.empty((1, 4, 8, 64), gp.bfloat16))
    with pytest.raises(TypeError, match="q must be a GPUArray"):
        sdpa(rand((1, 4, 8, 64)).astype(np.float16), k, v)


# --- decode -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(("hq", "hkv", "d"), [(8, 2, 128), (4, 4, 64), (6, 1, 80), (2, 2, 256)])
def test_decode_contiguous(rand, rng, dtype, hq, hkv, d):
    b, max_len = 4, 70
    q = (rand((b, hq, d)) * 0.3).astype(dtype)
    kc = (rand((b, hkv, max_len, d)) * 0.3).astype(dtype)
    vc = rand((b, hkv, max_len, d)).astype(dtype)
    lens = np.array([1, 70, 33, 0], np.int32)
    rng.shuffle(lens)
    got = ops.decode_attention(
        gp.from_numpy(q), gp.from_numpy(kc), gp.from_numpy(vc), gp.from_numpy(lens)
    ).to_numpy()
    ref = ref_decode(
        q, [kc[i, :, : lens[i]] for i in range(b)], [vc[i, :, : lens[i]] for i in range(b)]
    )
    assert rel_err(got, ref) < LIMIT[np.dtype(dtype)]
    assert np.all(got[lens == 0].astype(np.float32) == 0)


@pytest.mark.parametrize("dtype", HALF)
def test_decode_paged(rand, rng, dtype):
    b, hq, hkv, d, bs, nblocks, max_blocks = 3, 8, 2, 96, 16, 20, 5
    q = (rand((b, hq, d)) * 0.3).astype(dtype)
    kc = (rand((nblocks, hkv, bs, d)) * 0.3).astype(dtype)
    vc = rand((nblocks, hkv, bs, d)).astype(dtype)
    table = rng.permutation(nblocks)[: b * max_blocks].reshape(b, max_blocks).astype(np.int32)
    lens = np.array([17, 80, 100], np.int32)  # 100 > capacity 80: clamped
    keys, vals = gather_pages(kc, table, lens), gather_pages(vc, table, lens)
    got = ops.decode_attention(
        gp.from_numpy(q),
        gp.from_numpy(kc),
        gp.from_numpy(vc),
        gp.from_numpy(lens),
        block_table=gp.from_numpy(table),
        scale=0.07,
    ).to_numpy()
    assert rel_err(got, ref_decode(q, keys, vals, scale=0.07)) < LIMIT[np.dtype(dtype)]


def test_decode_out(rand):
    q, kc, vc = _arrays(rand, (2, 4, 64), (2, 2, 8, 64), (2, 2, 8, 64))
    lens = gp.from_numpy(np.array([3, 8], np.int32))
    out = gp.empty((2, 4, 64), gp.float16)
    assert ops.decode_attention(q, kc, vc, lens, out=out) is out


def test_decode_errors(rand):
    q, kc, vc = _arrays(rand, (2, 4, 64), (2, 2, 8, 64), (2, 2, 8, 64))
    lens = gp.from_numpy(np.array([3, 8], np.int32))
    dec = ops.decode_attention
    with pytest.raises(TypeError, match="seq_lens must have dtype"):
        dec(q, kc, vc, gp.from_numpy(np.array([3, 8], np.int64)))
    with pytest.raises(ValueError, match="seq_lens must have shape"):
        dec(q, kc, vc, gp.from_numpy(np.array([3], np.int32)))
    with pytest.raises(ValueError, match="3-D"):
        dec(*_arrays(rand, (2, 4, 1, 64)), kc, vc, lens)
    with pytest.raises(ValueError, match="head dim 32"):
        dec(q, *_arrays(rand, (2, 2, 8, 32), (2, 2, 8, 32)), lens)
    with pytest.raises(ValueError, match="multiple of the KV heads"):
        dec(q, *_arrays(rand, (2, 3, 8, 64), (2, 3, 8, 64)), lens)
    with pytest.raises(ValueError, match="same shape"):
        dec(q, kc, *_arrays(rand, (2, 2, 9, 64)), lens)
    with pytest.raises(ValueError, match="pass block_table"):
        dec(q, *_arrays(rand, (5, 2, 8, 64), (5, 2, 8, 64)), lens)
    with pytest.raises(TypeError, match="block_table must have dtype"):
        dec(q, kc, vc, lens, block_table=gp.from_numpy(np.zeros((2, 3), np.int64)))
    with pytest.raises(ValueError, match="block_table must be"):
        dec(q, kc, vc, lens, block_table=gp.from_numpy(np.zeros((3, 3), np.int32)))
    with pytest.raises(TypeError, match="k_cache has dtype"):
        dec(q, *_arrays(rand, (2, 2, 8, 64), (2, 2, 8, 64), dtype=gp.bfloat16), lens)
    with pytest.raises(ValueError, match="out must have shape"):
        dec(q, kc, vc, lens, out=gp.empty((2, 4, 32), gp.float16))
    with pytest.raises(ValueError, match="scale must be finite"):
        dec(q, kc, vc, lens, scale=float("inf"))


def _misaligned(rand, shape, dtype=gp.float16):
    """A C-contiguous view of ``shape`` starting one element past a 16-byte boundary."""
    n = int(np.prod(shape))
    flat = gp.from_numpy((rand((n + 8,)) * 0.3).astype(dtype))
    view = flat[1 : n + 1].reshape(shape)
    assert view.is_contiguous() and view.data_ptr % 16 == 2
    return view


def test_decode_refuses_misaligned_starts(rand):
    q, kc, vc = _arrays(rand, (2, 4, 64), (2, 2, 8, 64), (2, 2, 8, 64))
    lens = gp.from_numpy(np.array([3, 8], np.int32))
    with pytest.raises(ValueError, match=r"q starts at address .* not 16-byte aligned"):
        ops.decode_attention(_misaligned(rand, (2, 4, 64)), kc, vc, lens)
    with pytest.raises(ValueError, match=r"v_cache starts at address .* not 16-byte aligned"):
        ops.decode_attention(q, kc, _misaligned(rand, (2, 2, 8, 64)), lens)
    with pytest.raises(TypeError, match="v_cache has dtype bfloat16, expected k_cache's"):
        ops.decode_attention(q, kc, *_arrays(rand, (2, 2, 8, 64), dtype=gp.bfloat16), lens)


def test_decode_checks_each_cache_pair_once(rand, monkeypatch):
    """A decode loop passes the same caches every step: they are checked on the first only,
    and a step with other caches checks those."""
    from pygpukit.ops import attention

    checked = []
    real = attention.check_array

    def counting(x, name, **kw):
        checked.append(name)
        return real(x, name, **kw)

    monkeypatch.setattr(attention, "check_array", counting)
    _, kc, vc = _arrays(rand, (2, 4, 64), (2, 2, 8, 64), (2, 2, 8, 64))
    lens = gp.from_numpy(np.array([3, 8], np.int32))
    outs = [ops.decode_attention(_arrays(rand, (2, 4, 64))[0], kc, vc, lens) for _ in range(3)]
    assert checked == ["k_cache", "v_cache"]
    _, kc2, vc2 = _arrays(rand, (2, 4, 64), (2, 2, 8, 64), (2, 2, 8, 64))
    ops.decode_attention(_arrays(rand, (2, 4, 64))[0], kc2, vc2, lens)
    assert checked == ["k_cache", "v_cache"] * 2
    assert all(np.all(np.isfinite(o.to_numpy().astype(np.float32))) for o in outs)


def test_decode_cache_checks_follow_the_arrays_not_their_ids(rand):
    """An id is reused once its array is gone: a remembered pair whose arrays died is checked
    again, not trusted (here a stale entry at the new caches' ids with another shape)."""
    from pygpukit.ops import attention

    class Gone:
        pass

    dead = weakref.ref(Gone())  # a reference whose object is already collected
    q, kc, vc = _arrays(rand, (2, 4, 64), (2, 2, 8, 64), (2, 2, 8, 64))
    lens_h = np.array([3, 8], np.int32)
    stale = (dead, dead, (2, 4, 8, 64), np.dtype(gp.float16))
    attention._CHECKED_CACHES[(id(kc), id(vc))] = stale
    try:
        got = ops.decode_attention(q, kc, vc, gp.from_numpy(lens_h)).to_numpy()
        assert attention._CHECKED_CACHES[(id(kc), id(vc))][2] == (2, 2, 8, 64)
    finally:
        attention._CHECKED_CACHES.pop((id(kc), id(vc)), None)
    k, v = kc.to_numpy(), vc.to_numpy()
    ref = ref_decode(
        q.to_numpy(),
        [k[i, :, : lens_h[i]] for i in range(2)],
        [v[i, :, : lens_h[i]] for i in range(2)],
    )
    assert rel_err(got, ref) < LIMIT[np.dtype(gp.float16)]


def test_benchmark_suite_quick_on_cpu(rng):
    """The ops_attention suite's cases build, run and pass their own checks (small sizes)."""
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.peers import PyGPUkitLibrary
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.ops.benchmarks import attention as suite

    ctx = SuiteContext(backend="cpu", quick=True, data=DataCache(rng), rng=rng)
    lib = PyGPUkitLibrary()
    ops_seen = []
    for case in suite.SUITE.cases(ctx):
        assert case.skip is None
        timed = case.setups["pygpukit"](lib, 1)
        err = timed.check(timed.run(0))
        assert err is not None and err < 2e-2
        ops_seen.append(case.op)
    assert ops_seen == ["sdpa_prefill", "decode", "decode_paged"]


@pytest.mark.parametrize("sms", [1, 8, 132])
@pytest.mark.parametrize("capacity", [1, 63, 256, 1000, 8192, 500_000])
@pytest.mark.parametrize(("batch", "ctas"), [(1, 1), (8, 8), (64, 32)])
@pytest.mark.parametrize("per_sm", [2, 8])
def test_decode_split_covers_the_cache(monkeypatch, sms, capacity, batch, ctas, per_sm):
    """The flash-decoding split: whole 64-key steps, at most 64 splits, every key in one split,
    and no more CTAs than per_sm per SM unless a single split already exceeds that."""
    from pygpukit.ops import attention

    monkeypatch.setattr(attention, "_sm_count", lambda device: sms)
    splits, chunk = attention._decode_split(batch, ctas, capacity, per_sm)
    assert 1 <= splits <= 64 and chunk % 64 == 0
    assert (splits - 1) * chunk < capacity <= splits * chunk
    assert splits == 1 or splits * batch * ctas <= per_sm * sms


def test_decode_split_of_the_benchmark_shape(monkeypatch):
    """B=8 with 8 head CTAs on 132 SMs: 4 splits of 2048 keys for bulk2 and mma2 (two CTAs per
    SM, all resident at once; 6 of 1408 at three per SM), 16 of 512 for the SIMT kernel."""
    from pygpukit.ops import attention

    monkeypatch.setattr(attention, "_sm_count", lambda device: 132)
    assert attention._decode_split(8, 8, 8192, attention._DECODE_CTAS_PER_SM["bulk2"]) == (4, 2048)
    assert attention._decode_split(8, 8, 8192, 3) == (6, 1408)
    assert attention._decode_split(8, 8, 8192, attention._DECODE_CTAS_PER_SM["mma2"]) == (4, 2048)
    assert attention._decode_split(8, 8, 8192, attention._DECODE_CTAS_PER_SM["simt"]) == (16, 512)
    # A short cache stays whole unless its chunks may be shorter (then the idle SMs split it).
    assert attention._decode_split(16, 8, 128, 2) == (1, 128)
    monkeypatch.setattr(attention, "_DECODE_MIN_CHUNK", 64)
    assert attention._decode_split(16, 8, 128, 2) == (2, 64)
    assert attention._decode_split(64, 8, 512, 2) == (1, 512)  # 512 CTAs fill the SMs already


def test_bulk_decode_needs_sm90():
    """Before SM 9.0 (no bulk copies) the bulk kernel runs as the cp.async kernel of its stages."""
    from pygpukit.ops import attention

    assert attention._decode_stages("bulk2", 128, 227 * 1024, bulk_ok=False)[0] == "mma2"
    assert attention._decode_stages("bulk2", 128, 227 * 1024, bulk_ok=True)[0] == "bulk2"
    assert attention._decode_stages("bulk3", 128, 227 * 1024, bulk_ok=False)[0] == "mma2"
    assert attention._decode_stages("bulk3", 128, 227 * 1024, bulk_ok=True)[0] == "bulk3"


@pytest.mark.parametrize(
    ("kernel", "d", "optin", "expect"),
    [("mma2", 256, 99 * 1024, "mma"), ("mma2", 128, 99 * 1024, "mma2"),
     ("mma", 256, 48 * 1024, "mma"), ("mma2", 64, 227 * 1024, "mma2"),
     ("bulk2", 256, 227 * 1024, "bulk2"), ("bulk2", 256, 99 * 1024, "mma"),
     ("bulk3", 256, 227 * 1024, "bulk3"), ("bulk3", 128, 99 * 1024, "bulk2"),
     ("bulk3", 256, 99 * 1024, "mma"), ("tma3", 256, 227 * 1024, "tma3"),
     ("tma3", 256, 160 * 1024, "tma2"), ("tma2", 96, 227 * 1024, "bulk2")],
)  # fmt: skip
def test_decode_stages_fall_back_to_what_fits(kernel, d, optin, expect):
    """A decode kernel whose K/V stages do not fit the GPU's shared memory gives way to the one
    with the most stages that does: (16 + 2 * stages * 64) rows of D + 8 16-bit values."""
    from pygpukit.ops import attention

    got, smem = attention._decode_stages(kernel, d, optin)
    assert got == expect
    stages = int(got.lstrip("bulkmat") or 1)
    if got.startswith("tma"):  # unpadded tiles, 1 KiB aligned
        assert smem == 16 * (d + 8) * 2 + 1024 + 2 * stages * 64 * d * 2
    else:
        assert smem == (16 + 2 * stages * 64) * (d + 8) * 2
    assert smem <= optin or got == "mma"


@pytest.mark.parametrize(
    ("env", "arch", "expect"),
    [(None, "sm_90a", ["wgmma_persist", "mma", "wgmma_persist", "mma"]),
     ("auto", "sm_90a", ["wgmma_persist", "mma", "wgmma_persist", "mma"]),
     ("", "sm_90a", ["wgmma_persist", "mma", "wgmma_persist", "mma"]),
     ("mma", "sm_90a", ["mma"] * 4),
     ("wgmma_pipe", "sm_90a", ["wgmma_pipe", "mma", "wgmma_pipe", "mma"]),
     ("wgmma_tma", "sm_90a", ["wgmma_tma", "mma", "wgmma_tma", "mma"]),
     ("wgmma_persist", "sm_90a", ["wgmma_persist", "mma", "wgmma_persist", "mma"]),
     ("wgmma_persist", "sm_80", ["mma"] * 4),
     (None, "sm_80", ["mma"] * 4),
     ("wgmma_pipe", "sm_100a", ["mma"] * 4),
     ("wgmma_tma", "sm_100a", ["mma"] * 4),
     ("wgmma_tma", "sm_89", ["mma"] * 4),
     ("wgmma_tma", "sm_80", ["mma"] * 4)],
)  # fmt: skip
def test_prefill_kernel_choice(monkeypatch, env, arch, expect):
    """wgmma_persist is the default on SM 9.0 for head dims 64 and 128; mma everywhere else."""
    from pygpukit.ops import attention, config

    monkeypatch.setattr(attention, "_arch", lambda device: arch)
    with config.override(attention_kernel=env or "auto"):
        assert [attention._prefill_kernel(d) for d in (64, 80, 128, 256)] == expect


def _schedule_loads(table, sq, sk, causal, rows=128):
    """(items of each CTA, key tiles each CTA runs) of a persistent prefill schedule."""
    tiles = -(-sq // rows)
    # table = offsets[ctas + 1] + items, and offsets[ctas] is the item count
    ctas = next(c for c in range(1, len(table)) if table[c] == len(table) - 1 - c)
    offsets, items = table[: ctas + 1], table[ctas + 1 :]
    lists = [items[offsets[c] : offsets[c + 1]] for c in range(ctas)]
    loads = []
    for lst in lists:
        m0 = (lst % tiles) * rows
        n_end = np.minimum(sk, m0 + rows + sk - sq) if causal else np.full(len(lst), sk)
        loads.append(int((-(-np.maximum(n_end, 0) // rows)).sum()))
    return lists, loads


@pytest.mark.parametrize(
    ("bh", "sq", "sk", "causal", "sms"),
    [(128, 4096, 4096, True, 132), (128, 4096, 4096, False, 132), (3, 200, 200, True, 132),
     (10, 1000, 1500, True, 16), (2, 4096, 1024, True, 132), (5, 640, 640, True, 7)],
)  # fmt: skip
def test_persistent_prefill_schedule(bh, sq, sk, causal, sms):
    """The persistent kernel's work lists: every (head, row tile) exactly once, at most one CTA
    per SM, each CTA's list in the start order of the other kernels (longest causal tiles first
    within a head group), and key tiles spread so no CTA runs much past the average."""
    from pygpukit.ops import attention

    table = attention._prefill_schedule(bh, sq, sk, causal, sms)
    tiles = -(-sq // 128)
    assert table.dtype == np.int32
    lists, loads = _schedule_loads(table, sq, sk, causal)
    assert len(lists) == min(sms, bh * tiles)
    everything = np.sort(np.concatenate(lists))
    np.testing.assert_array_equal(everything, np.arange(bh * tiles))
    for lst in lists:
        heads = lst // tiles
        groups = heads // 8
        assert np.all(np.diff(groups) >= 0)  # head groups in order
        same = np.diff(groups) == 0
        assert np.all(np.diff(lst % tiles)[same] <= 0)  # longest (last) row tiles first
    # Greedy by key tiles: no CTA ends more than one item's worth past the average.
    longest = -(-sk // 128) + 1
    assert max(loads) <= sum(loads) / len(loads) + longest


def test_persistent_prefill_schedule_balances_causal_tiles():
    """At the benchmark shape the greedy lists stay within 3% of a perfect split of the key
    tiles (one CTA per item in start order, round robin, lands 5% over)."""
    from pygpukit.ops import attention

    table = attention._prefill_schedule(128, 4096, 4096, True, 132)
    _, loads = _schedule_loads(table, 4096, 4096, True)
    assert max(loads) <= 1.03 * sum(loads) / len(loads)


@pytest.mark.parametrize("env", ["wgma", "wgmma", "wgmma_ws", "wgmma_ws_pp"])
@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
def test_prefill_kernel_env_invalid(monkeypatch, env, arch):
    """A typo or a removed variant (wgmma, wgmma_ws, wgmma_ws_pp) is an error on every GPU,
    naming the valid choices, rather than a silent fallback."""
    from pygpukit.ops import attention, config

    monkeypatch.setattr(attention, "_arch", lambda device: arch)
    monkeypatch.setenv(attention.KERNEL_ENV, env)
    try:
        with pytest.raises(ValueError, match=f"PYGPUKIT_ATTENTION_KERNEL='{env}' is not valid"):
            config.reload()
        match = r"must be one of auto, mma, wgmma_pipe, wgmma_tma, wgmma_persist, got '"
        with pytest.raises(ValueError, match=match + env + "'"):
            config.set(attention_kernel=env)
    finally:
        monkeypatch.undo()
        config.reload()


def test_wgmma_kernels_match_their_launch():
    """Every Hopper variant the env var can pick has its four entry points in
    attention_prefill.cu (the build's manifest), and the kernels' exported thread count is the
    one attention.py launches them with (a mismatch would only show as a launch failure on an
    H100/H200)."""
    from pygpukit.ops import _kernel_loader, attention

    entries = _kernel_loader.LIBRARY.entries("attention_prefill")
    declared = [name for name in entries if name.startswith("attn_prefill_wgmma")]
    kinds = [c for c in attention._KERNEL_CHOICES if c not in ("auto", "mma")]
    assert sorted(kinds) == sorted(attention._WGMMA_THREADS)
    for kind in kinds:
        threads = _kernel_loader.constant("attention_prefill", f"PREFILL_{kind.upper()}_THREADS")
        assert threads == attention._WGMMA_THREADS[kind], kind
        for d in attention._WGMMA_HEAD_DIMS:
            for suffix in ("f16", "bf16"):
                assert f"attn_prefill_{kind}_d{d}_{suffix}" in entries
    assert len(declared) == 4 * len(kinds)
