"""ops.rope_kv_append on the current backend (the CPU here, CUDA on a GPU machine).

Against the five ops it replaces (slicing the fused q/k/v, ``apply_rope``, ``kv_cache_append``)
on the same backend, and against an independent float64 rotation; caches start from random
values, so rows that must not be written are checked too.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err
from rope_kv_checks import assert_unwritten_rows_kept, rotated_reference, split_qkv

import pygpukit as gp
from pygpukit import ops
from pygpukit.errors import ReadOnlyArrayError

Rand = Callable[..., np.ndarray]
TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
#: One unit in the last place, relative: the fused kernel and the five ops round the same fp32
#: values once, but may contract the products into FMAs differently.
ULP = {"float32": 2.0**-22, "float16": 2.0**-10, "bfloat16": 2.0**-7}
HQ, HKV, D, MAX_LEN, P = 4, 2, 64, 24, 64


def _inputs(rng: np.random.Generator, rand: Rand, dtype: str, b: int, t: int):
    qkv = rand((b, t, (HQ + 2 * HKV) * D), dtype)
    kc, vc = rand((b, HKV, MAX_LEN, D), dtype), rand((b, HKV, MAX_LEN, D), dtype)
    positions = rng.integers(0, P, (b, t)).astype(np.int32)
    slots = np.stack([rng.permutation(MAX_LEN)[:t] for _ in range(b)]).astype(np.int32)
    slots[0, 0] = -1  # out of the cache: stored nowhere
    if t > 1:
        slots[-1, -1] = MAX_LEN
    return qkv, kc, vc, positions, slots


def _composed(qkv, cos, sin, positions, kc, vc, slots):
    """The same step with the ops the fused kernel replaces."""
    q, k, v = split_qkv(qkv, HQ, HKV, D)
    q, k = ops.apply_rope(q, k, cos, sin, positions)
    k_t, v_t = (a.transpose(0, 2, 1, 3).contiguous() for a in (k, v))
    ops.kv_cache_append(k_t, v_t, kc, vc, slots)
    return q


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize(("b", "t"), [(1, 1), (3, 1), (2, 5)])
@pytest.mark.parametrize("table", ["float32", "model"])
def test_matches_the_ops_it_replaces(
    rng: np.random.Generator, rand: Rand, dtype: str, b: int, t: int, table: str
) -> None:
    qkv_h, kc_h, vc_h, pos_h, slots_h = _inputs(rng, rand, dtype, b, t)
    cos, sin = ops.rope_cos_sin(P, D, dtype=dtype if table == "model" else "float32")
    qkv, positions, slots = (gp.from_numpy(a) for a in (qkv_h, pos_h, slots_h))
    kc, vc = gp.from_numpy(kc_h), gp.from_numpy(vc_h)
    kc2, vc2 = gp.from_numpy(kc_h), gp.from_numpy(vc_h)

    q = ops.rope_kv_append(qkv, cos, sin, positions, kc, vc, slots, q_heads=HQ)
    q_ref = _composed(qkv, cos, sin, positions, kc2, vc2, slots)

    assert q.shape == (b, t, HQ, D) and q.dtype == qkv.dtype
    ulp = ULP[dtype]
    np.testing.assert_allclose(q.to_numpy().astype(np.float64),
                               q_ref.to_numpy().astype(np.float64), rtol=ulp, atol=ulp)  # fmt: skip
    np.testing.assert_allclose(kc.to_numpy().astype(np.float64),
                               kc2.to_numpy().astype(np.float64), rtol=ulp, atol=ulp)  # fmt: skip
    np.testing.assert_array_equal(vc.to_numpy(), vc2.to_numpy())  # values are copied as is

    # Independent of both: float64 rotation, and the rows no slot names left untouched.
    q_rot, k_rot, v_in = rotated_reference(qkv_h, pos_h, HQ, HKV, D)
    assert rel_err(q.to_numpy(), q_rot) < TOL[dtype]
    kc_got, vc_got = kc.to_numpy(), vc.to_numpy()
    written = np.zeros((b, MAX_LEN), bool)
    for bi in range(b):
        for ti in range(t):
            s = slots_h[bi, ti]
            if 0 <= s < MAX_LEN:
                written[bi, s] = True
                assert rel_err(kc_got[bi, :, s], k_rot[bi, ti]) < TOL[dtype]
                np.testing.assert_array_equal(vc_got[bi, :, s], v_in[bi, ti])
    assert_unwritten_rows_kept(kc_got, kc_h, written)
    assert_unwritten_rows_kept(vc_got, vc_h, written)


def test_out_and_errors(rng: np.random.Generator, rand: Rand) -> None:
    qkv_h, kc_h, vc_h, pos_h, slots_h = _inputs(rng, rand, "bfloat16", 1, 2)
    cos, sin = ops.rope_cos_sin(P, D)
    qkv, positions, slots = (gp.from_numpy(a) for a in (qkv_h, pos_h, slots_h))
    kc, vc = gp.from_numpy(kc_h), gp.from_numpy(vc_h)
    out = gp.empty((1, 2, HQ, D), gp.bfloat16)
    got = ops.rope_kv_append(qkv, cos, sin, positions, kc, vc, slots, q_heads=HQ, out=out)
    assert got is out
    with pytest.raises(ValueError, match="q_heads"):
        ops.rope_kv_append(qkv, cos, sin, positions, kc, vc, slots, q_heads=HQ + 1)
    with pytest.raises(ValueError, match="width"):
        c8, s8 = ops.rope_cos_sin(P, 8)
        ops.rope_kv_append(qkv, c8, s8, positions, kc, vc, slots, q_heads=HQ)
    kc2, vc2 = (gp.from_numpy(np.concatenate([a, a])) for a in (kc_h, vc_h))  # batch 2, qkv's 1
    with pytest.raises(ValueError, match=r"caches \[B, kv_heads"):
        ops.rope_kv_append(qkv, cos, sin, positions, kc2, vc2, slots, q_heads=HQ)
    with pytest.raises(TypeError, match="positions"):
        ops.rope_kv_append(qkv, cos, sin, gp.from_numpy(pos_h.astype(np.int64)), kc, vc, slots,
                           q_heads=HQ)  # fmt: skip
    with pytest.raises(ValueError, match="slots"):
        ops.rope_kv_append(qkv, cos, sin, positions, kc, vc, gp.from_numpy(slots_h[:, :1]),
                           q_heads=HQ)  # fmt: skip
    with pytest.raises(TypeError, match="k_cache"):
        ops.rope_kv_append(qkv, cos, sin, positions, kc.astype(gp.float16), vc, slots,
                           q_heads=HQ)  # fmt: skip
    kc.setflags(write=False)
    with pytest.raises(ReadOnlyArrayError):
        ops.rope_kv_append(qkv, cos, sin, positions, kc, vc, slots, q_heads=HQ)


@pytest.mark.gpu
def test_replays_in_a_cuda_graph(rng: np.random.Generator, rand: Rand) -> None:
    """Captured once, replayed with new device-side inputs (as a decode step's graph does)."""
    if gp.backend_name() != "cuda":
        pytest.skip("needs the CUDA backend")
    qkv_h, kc_h, vc_h, pos_h, slots_h = _inputs(rng, rand, "bfloat16", 2, 1)
    stream = gp.Stream()
    with stream:
        cos, sin = ops.rope_cos_sin(P, D)
        qkv, positions, slots = (gp.from_numpy(a) for a in (qkv_h, pos_h, slots_h))
        kc, vc = gp.from_numpy(kc_h), gp.from_numpy(vc_h)
        q = gp.empty((2, 1, HQ, D), gp.bfloat16)
        ops.rope_kv_append(qkv, cos, sin, positions, kc, vc, slots, q_heads=HQ, out=q)  # planned
    stream.synchronize()
    with stream, gp.graph_capture() as graph:
        ops.rope_kv_append(qkv, cos, sin, positions, kc, vc, slots, q_heads=HQ, out=q)
    new_qkv, new_pos = rand(qkv_h.shape, "bfloat16"), ((pos_h + 1) % P).astype(np.int32)
    new_slots = ((slots_h + 3) % MAX_LEN).astype(np.int32)
    with stream:
        qkv[...], positions[...], slots[...] = new_qkv, new_pos, new_slots
        kc_before, vc_before = kc.to_numpy(), vc.to_numpy()
    graph.replay(stream)
    stream.synchronize()
    with stream:
        kc2, vc2 = gp.from_numpy(kc_before), gp.from_numpy(vc_before)
        want = ops.rope_kv_append(gp.from_numpy(new_qkv), cos, sin, gp.from_numpy(new_pos), kc2,
                                  vc2, gp.from_numpy(new_slots), q_heads=HQ)  # fmt: skip
    stream.synchronize()
    np.testing.assert_array_equal(q.to_numpy(), want.to_numpy())
    np.testing.assert_array_equal(kc.to_numpy(), kc2.to_numpy())
    np.testing.assert_array_equal(vc.to_numpy(), vc2.to_numpy())
    assert not np.array_equal(kc.to_numpy(), kc_before)  # the replay wrote new rows
