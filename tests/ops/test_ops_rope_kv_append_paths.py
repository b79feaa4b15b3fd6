"""ops.rope_kv_append's two CUDA kernels give the same bits (the CPU backend: its reference).

On the GPU a call launches the 16-byte-vector kernel when the head's halves are whole vectors
and the rows start 16-byte aligned, and the one-element kernel otherwise. The same random inputs
through both (an aligned call, and one whose arrays start one element past an aligned address)
must give equal queries and caches bit for bit: the two kernels round the same fp32 products.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import rel_err
from rope_kv_checks import rotated_reference

import pygpukit as gp
from pygpukit import ops

Rand = Callable[..., np.ndarray]


def _shifted(a: np.ndarray) -> gp.GPUArray:
    """``a`` on the device starting one element past the start of a fresh buffer."""
    flat = gp.from_numpy(np.concatenate([a.reshape(-1)[:1], a.reshape(-1)]))
    return flat[1:].reshape(*a.shape)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize(("hq", "hkv", "d", "t"), [(8, 2, 128, 37), (4, 4, 64, 5), (3, 1, 16, 9)])
def test_aligned_and_unaligned_calls_agree(
    rng: np.random.Generator, rand: Rand, dtype: str, hq: int, hkv: int, d: int, t: int
) -> None:
    b, max_len, p = 2, t + 3, 64
    qkv = rand((b, t, (hq + 2 * hkv) * d), dtype)
    kc, vc = rand((b, hkv, max_len, d), dtype), rand((b, hkv, max_len, d), dtype)
    positions = gp.from_numpy(rng.integers(0, p, (b, t)).astype(np.int32))
    slot_h = np.stack([rng.permutation(max_len)[:t] for _ in range(b)]).astype(np.int32)
    slot_h[0, 0] = -1  # stored nowhere, on both paths
    slots = gp.from_numpy(slot_h)
    cos, sin = ops.rope_cos_sin(p, d)

    outs = []
    for place in (gp.from_numpy, _shifted):
        k_cache, v_cache = place(kc), place(vc)
        q = ops.rope_kv_append(
            place(qkv), cos, sin, positions, k_cache, v_cache, slots, q_heads=hq,
            out=place(np.zeros((b, t, hq, d), dtype)),
        )  # fmt: skip
        outs.append([x.to_numpy() for x in (q, k_cache, v_cache)])
    for aligned, shifted in zip(*outs, strict=True):
        np.testing.assert_array_equal(aligned, shifted)
    assert not np.array_equal(outs[0][1], kc)  # the keys were written


def test_plan_checked_once_serves_other_arrays(rng: np.random.Generator, rand: Rand) -> None:
    """A plan made (and checked) on one layer's arrays gives rope_kv_append's bits on another's."""
    from pygpukit.ops.rope import rope_kv_append_plan

    b, t, hq, hkv, d, max_len = 2, 7, 4, 2, 64, 12
    cos, sin = ops.rope_cos_sin(32, d)
    positions = gp.from_numpy(rng.integers(0, 32, (b, t)).astype(np.int32))
    slot_h = np.stack([rng.permutation(max_len)[:t] for _ in range(b)]).astype(np.int32)
    slots = gp.from_numpy(slot_h)

    def layer() -> tuple[gp.GPUArray, ...]:
        return (gp.from_numpy(rand((b, t, (hq + 2 * hkv) * d), "bfloat16")),
                gp.from_numpy(rand((b, hkv, max_len, d), "bfloat16")),
                gp.from_numpy(rand((b, hkv, max_len, d), "bfloat16")))  # fmt: skip

    first, second = layer(), layer()
    want_k, want_v = gp.from_numpy(second[1].to_numpy()), gp.from_numpy(second[2].to_numpy())
    plan = rope_kv_append_plan(first[0], cos, sin, positions, first[1], first[2], slots, q_heads=hq)
    q = gp.empty((b, t, hq, d), gp.bfloat16)
    plan(second[0], q, second[1], second[2], cos, sin, positions, slots)
    want = ops.rope_kv_append(second[0], cos, sin, positions, want_k, want_v, slots, q_heads=hq)
    np.testing.assert_array_equal(q.to_numpy(), want.to_numpy())
    np.testing.assert_array_equal(second[1].to_numpy(), want_k.to_numpy())
    np.testing.assert_array_equal(second[2].to_numpy(), want_v.to_numpy())
    with pytest.raises(ValueError, match="empty call"):
        rope_kv_append_plan(first[0][:, :0], cos, sin, positions[:, :0], first[1], first[2],
                            slots[:, :0], q_heads=hq)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_positions_outside_the_tables_rotate_by_zero_on_both_kernels(
    rng: np.random.Generator, rand: Rand, dtype: str
) -> None:
    """A position below 0 or at/past the tables' rows leaves q and k as they came (the GPU's
    documented behaviour; the CPU backend refuses such positions), on both kernels; positions
    inside still rotate."""
    b, t, hq, hkv, d, p = 2, 6, 4, 2, 64, 16
    qkv = rand((b, t, (hq + 2 * hkv) * d), dtype)
    pos_h = rng.integers(0, p, (b, t)).astype(np.int32)
    big = np.iinfo(np.int32)
    outside = [(0, 0, -1), (0, 3, p), (1, 1, big.min), (1, 4, big.max)]
    for bi, ti, value in outside:
        pos_h[bi, ti] = value
    slots = gp.from_numpy(np.tile(np.arange(t, dtype=np.int32), (b, 1)))
    cos, sin = ops.rope_cos_sin(p, d)
    heads = qkv.reshape(b, t, hq + 2 * hkv, d)
    for place in (gp.from_numpy, _shifted):
        kc, vc = place(rand((b, hkv, t, d), dtype)), place(rand((b, hkv, t, d), dtype))
        q = ops.rope_kv_append(
            place(qkv), cos, sin, gp.from_numpy(pos_h), kc, vc, slots, q_heads=hq,
            out=place(np.zeros((b, t, hq, d), dtype)),
        ).to_numpy()  # fmt: skip
        k = kc.to_numpy()
        for bi, ti, _ in outside:
            np.testing.assert_array_equal(q[bi, ti], heads[bi, ti, :hq])
            np.testing.assert_array_equal(k[bi, :, ti], heads[bi, ti, hq : hq + hkv])
        inside = np.ones((b, t), bool)
        for bi, ti, _ in outside:
            inside[bi, ti] = False
        q_rot, k_rot, _ = rotated_reference(qkv, np.where(inside, pos_h, 0), hq, hkv, d)
        assert rel_err(q[inside], q_rot[inside]) < 1e-2
        assert rel_err(k.transpose(0, 2, 1, 3)[inside], k_rot[inside]) < 1e-2
