"""ops.rope_kv_paged_write on the current backend (the CPU here, CUDA on a GPU machine).

Against the five ops it replaces in a batched decode step (three slices of the fused q/k/v,
``apply_rope``, ``paged_kv_cache_write``) on the same backend, bit for bit (the engine's greedy
outputs must not move), and against an independent float64 rotation; the caches start from
random values, so the slots that must not be written are checked too.
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
BLOCKS, BLOCK_SIZE, P = 6, 4, 64
#: (q_heads, kv_heads, head_dim): a small GQA shape, and Llama-3-8B's (12 blocks of pairs a
#: token on the GPU).
SHAPES = [(4, 2, 64), (32, 8, 128)]


def _inputs(rng: np.random.Generator, rand: Rand, dtype: str, n: int, shape: tuple[int, ...]):
    hq, hkv, d = shape
    qkv = rand((n, (hq + 2 * hkv) * d), dtype)
    kc, vc = rand((BLOCKS, hkv, BLOCK_SIZE, d), dtype), rand((BLOCKS, hkv, BLOCK_SIZE, d), dtype)
    positions = rng.integers(0, P, n).astype(np.int32)
    slots = rng.permutation(BLOCKS * BLOCK_SIZE)[:n].astype(np.int32)
    slots[0] = -1  # padding: stored nowhere
    if n > 2:
        slots[-1] = BLOCKS * BLOCK_SIZE + 1  # past the last block: stored nowhere
    return qkv, kc, vc, positions, slots


def _composed(qkv, cos, sin, positions, kc, vc, slots, shape):
    """The same step with the ops the fused kernel replaces."""
    q, k, v = split_qkv(qkv, *shape)
    q, k = ops.apply_rope(q, k, cos, sin, positions)
    ops.paged_kv_cache_write(k, v, kc, vc, slots)
    return q


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("n", [1, 5, 16])
@pytest.mark.parametrize("table", ["float32", "model"])
@pytest.mark.parametrize("shape", SHAPES)
def test_matches_the_ops_it_replaces_bit_for_bit(
    rng: np.random.Generator, rand: Rand, dtype: str, n: int, table: str, shape: tuple[int, ...]
) -> None:
    hq, hkv, d = shape
    qkv_h, kc_h, vc_h, pos_h, slots_h = _inputs(rng, rand, dtype, n, shape)
    cos, sin = ops.rope_cos_sin(P, d, dtype=dtype if table == "model" else "float32")
    qkv, positions, slots = (gp.from_numpy(a) for a in (qkv_h, pos_h, slots_h))
    kc, vc = gp.from_numpy(kc_h), gp.from_numpy(vc_h)
    kc2, vc2 = gp.from_numpy(kc_h), gp.from_numpy(vc_h)

    q = ops.rope_kv_paged_write(qkv, cos, sin, positions, kc, vc, slots, q_heads=hq)
    q_ref = _composed(qkv, cos, sin, positions, kc2, vc2, slots, shape)

    assert q.shape == (n, hq, d) and q.dtype == qkv.dtype
    np.testing.assert_array_equal(q.to_numpy(), q_ref.to_numpy())
    np.testing.assert_array_equal(kc.to_numpy(), kc2.to_numpy())
    np.testing.assert_array_equal(vc.to_numpy(), vc2.to_numpy())

    # Independent of both: float64 rotation, and the slots no token names left untouched.
    q_rot, k_rot, v_in = rotated_reference(qkv_h, pos_h, hq, hkv, d)
    assert rel_err(q.to_numpy(), q_rot) < TOL[dtype]
    kc_got, vc_got = kc.to_numpy(), vc.to_numpy()
    written = np.zeros((BLOCKS, BLOCK_SIZE), bool)
    for t, s in enumerate(slots_h.tolist()):
        if 0 <= s < BLOCKS * BLOCK_SIZE:
            blk, off = divmod(s, BLOCK_SIZE)
            written[blk, off] = True
            assert rel_err(kc_got[blk, :, off], k_rot[t]) < TOL[dtype]
            np.testing.assert_array_equal(vc_got[blk, :, off], v_in[t])
    assert_unwritten_rows_kept(kc_got, kc_h, written)
    assert_unwritten_rows_kept(vc_got, vc_h, written)


def test_takes_the_tokens_in_any_leading_shape(rng: np.random.Generator, rand: Rand) -> None:
    """A ``[1, B, W]`` projection with ``[1, B]`` positions (a decode step's shapes)."""
    shape = SHAPES[0]
    hq = shape[0]
    qkv_h, kc_h, vc_h, pos_h, slots_h = _inputs(rng, rand, "bfloat16", 3, shape)
    cos, sin = ops.rope_cos_sin(P, shape[2])
    kc, vc, kc2, vc2 = (gp.from_numpy(a) for a in (kc_h, vc_h, kc_h, vc_h))
    flat = ops.rope_kv_paged_write(gp.from_numpy(qkv_h), cos, sin, gp.from_numpy(pos_h), kc, vc,
                                   gp.from_numpy(slots_h), q_heads=hq)  # fmt: skip
    lead = ops.rope_kv_paged_write(gp.from_numpy(qkv_h[None]), cos, sin,
                                   gp.from_numpy(pos_h[None]), kc2, vc2, gp.from_numpy(slots_h),
                                   q_heads=hq)  # fmt: skip
    np.testing.assert_array_equal(flat.to_numpy(), lead.to_numpy())
    np.testing.assert_array_equal(kc.to_numpy(), kc2.to_numpy())


def test_out_and_errors(rng: np.random.Generator, rand: Rand) -> None:
    hq, _, d = SHAPES[0]
    qkv_h, kc_h, vc_h, pos_h, slots_h = _inputs(rng, rand, "bfloat16", 2, SHAPES[0])
    cos, sin = ops.rope_cos_sin(P, d)
    qkv, positions, slots = (gp.from_numpy(a) for a in (qkv_h, pos_h, slots_h))
    kc, vc = gp.from_numpy(kc_h), gp.from_numpy(vc_h)
    out = gp.empty((2, hq, d), gp.bfloat16)
    got = ops.rope_kv_paged_write(qkv, cos, sin, positions, kc, vc, slots, q_heads=hq, out=out)
    assert got is out
    with pytest.raises(ValueError, match="q_heads"):
        ops.rope_kv_paged_write(qkv, cos, sin, positions, kc, vc, slots, q_heads=hq + 1)
    with pytest.raises(ValueError, match="width"):
        c8, s8 = ops.rope_cos_sin(P, 8)
        ops.rope_kv_paged_write(qkv, c8, s8, positions, kc, vc, slots, q_heads=hq)
    with pytest.raises(ValueError, match="block_size >= 1"):
        ops.rope_kv_paged_write(qkv, cos, sin, positions, gp.from_numpy(kc_h[:, :, :0]),
                                gp.from_numpy(vc_h[:, :, :0]), slots, q_heads=hq)  # fmt: skip
    with pytest.raises(TypeError, match="positions"):
        ops.rope_kv_paged_write(qkv, cos, sin, gp.from_numpy(pos_h.astype(np.int64)), kc, vc,
                                slots, q_heads=hq)  # fmt: skip
    with pytest.raises(ValueError, match="slots"):
        ops.rope_kv_paged_write(qkv, cos, sin, positions, kc, vc, gp.from_numpy(slots_h[:1]),
                                q_heads=hq)  # fmt: skip
    with pytest.raises(TypeError, match="k_cache"):
        ops.rope_kv_paged_write(qkv, cos, sin, positions, kc.astype(gp.float16), vc, slots,
                                q_heads=hq)  # fmt: skip
    with pytest.raises(ValueError, match="out"):
        ops.rope_kv_paged_write(qkv, cos, sin, positions, kc, vc, slots, q_heads=hq,
                                out=gp.empty((3, hq, d), gp.bfloat16))  # fmt: skip
    kc.setflags(write=False)
    with pytest.raises(ReadOnlyArrayError):
        ops.rope_kv_paged_write(qkv, cos, sin, positions, kc, vc, slots, q_heads=hq)
