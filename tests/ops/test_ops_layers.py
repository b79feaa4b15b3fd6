"""pygpukit.ops.layers on the current backend: layers vs the function API and float64 NumPy,
plans made once (no planning on a call, later config changes do not reach a built layer),
and ``out=`` calls that allocate nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
from ops_references import (
    gather_pages,
    linear_ref,
    ln_ref,
    qkv,
    ref_decode,
    ref_sdpa,
    rel_err,
    rms_ref,
    rope_ref,
)

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops import config
from pygpukit.ops._plan import plan_caches
from pygpukit.ops.layers import (
    Attention,
    Embedding,
    GatedMLP,
    LayerNorm,
    Linear,
    RMSNorm,
    Rotary,
)

LIMITS = {np.dtype(gp.float32): 1e-5, np.dtype(gp.float16): 3e-3, np.dtype(gp.bfloat16): 1e-2}
ALL = [gp.float32, gp.float16, gp.bfloat16]
HALF = [gp.float16, gp.bfloat16]
Rand = Callable[..., np.ndarray]


def up(a: np.ndarray) -> gp.GPUArray:
    return gp.from_numpy(a)


def plan_lookups() -> int:
    """Every lookup any op's plan cache has served (hits and misses)."""
    return sum(c.hits + c.misses for c in plan_caches().values())


def allocations() -> int:
    return int(gp.memory.stats()["alloc_count"])


# ----------------------------------------------------------------------------- Linear


@pytest.mark.parametrize("dtype", ALL)
@pytest.mark.parametrize("m", [1, 3, 8, 13])
@pytest.mark.parametrize(("with_bias", "activation"), [(False, None), (True, "silu")])
def test_linear_matches_function_and_float64(
    rand: Rand, dtype: object, m: int, with_bias: bool, activation: str | None
) -> None:
    x, w, b = rand((m, 64), dtype), rand((24, 64), dtype), rand((24,), dtype)
    bias = up(b) if with_bias else None
    layer = Linear(up(w), bias, activation=activation)
    got = layer(up(x))
    want = ops.linear(up(x), layer.weight, bias, activation=activation)
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
    ref = linear_ref(x, w, b if with_bias else None, activation)
    assert rel_err(got.to_numpy(), ref) < LIMITS[np.dtype(dtype)]


def test_linear_leading_dims_and_checks(rand: Rand) -> None:
    w = rand((10, 32), gp.bfloat16)
    layer = Linear(up(w))
    x = rand((2, 3, 32), gp.bfloat16)
    y = layer(up(x))
    assert y.shape == (2, 3, 10)
    assert rel_err(y.to_numpy(), linear_ref(x, w, None, None)) < 1e-2
    with pytest.raises(ValueError, match=r"x must be \[\.\.\., 32\]"):
        layer(up(rand((2, 31), gp.bfloat16)))
    with pytest.raises(TypeError, match="built for bfloat16"):
        layer(up(rand((2, 32), gp.float16)))
    with pytest.raises(ValueError, match="activation must be one of"):
        Linear(up(w), activation="tanh")


@pytest.mark.parametrize("with_bias", [False, True])
def test_fused_qkv_equals_three_projections(rand: Rand, with_bias: bool) -> None:
    """GQA shapes: q 4 heads, k/v 2 heads of 16; fused once at construction, split after."""
    dt = gp.float16
    ws = [rand((64, 48), dt), rand((32, 48), dt), rand((32, 48), dt)]
    bs = [rand((64,), dt), rand((32,), dt), rand((32,), dt)]
    layer = Linear.fused([up(w) for w in ws], [up(b) for b in bs] if with_bias else None)
    assert layer.splits == (64, 32, 32) and layer.out_features == 128
    x = rand((1, 48), dt)
    parts = layer.split(layer(up(x)))
    for part, w, b in zip(parts, ws, bs, strict=True):
        ref = linear_ref(x, w, b if with_bias else None, None)
        assert rel_err(part.to_numpy(), ref) < 3e-3
    with pytest.raises(ValueError, match="for every weight or for none"):
        Linear.fused([up(w) for w in ws], [up(bs[0]), None, None])
    with pytest.raises(ValueError, match="K = 47"):
        Linear.fused([up(ws[0]), up(rand((8, 47), dt))])


@pytest.mark.parametrize("activation", ["silu", "gelu_tanh"])
def test_gated_mlp_matches_float64(rand: Rand, activation: str) -> None:
    dt = gp.bfloat16
    wg, wu, wd = ((rand(s) * 0.2).astype(dt) for s in ((40, 32), (40, 32), (32, 40)))
    mlp = GatedMLP(up(wg), up(wu), up(wd), activation=activation)
    x = rand((3, 32), dt)
    g = x.astype(np.float64) @ wg.astype(np.float64).T
    u = x.astype(np.float64) @ wu.astype(np.float64).T
    if activation == "silu":
        a = g / (1 + np.exp(-g)) * u
    else:
        a = 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g**3))) * u
    ref = a @ wd.astype(np.float64).T
    assert rel_err(mlp(up(x)).to_numpy(), ref) < 2e-2  # three bf16 roundings on the way
    with pytest.raises(ValueError, match=r"w_down must be \[32, 40\]"):
        GatedMLP(up(wg), up(wu), up(wg))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("m", [1, 8, 13])
def test_linear_float32_out(rand: Rand, dtype: object, m: int) -> None:
    """A language model's head: GEMV rows unrounded (as ``ops.gemv(out_dtype=float32)``),
    more rows computed in the weight's dtype then widened (as a framework in that dtype)."""
    x, w = rand((m, 64), dtype), rand((40, 64), dtype)
    head = Linear(up(w), out_dtype=gp.float32)
    got = head(up(x))
    assert got.dtype == np.float32 and got.shape == (m, 40)
    if m <= 8:
        want = ops.gemv(up(x), up(w), out_dtype=gp.float32)
    else:
        want = ops.linear(up(x), up(w)).astype(gp.float32)
    np.testing.assert_array_equal(got.to_numpy(), want.to_numpy())
    assert rel_err(got.to_numpy(), linear_ref(x, w, None, None)) < LIMITS[np.dtype(dtype)]
    out = gp.empty((m, 40), gp.float32)
    assert head(up(x), out=out) is out
    np.testing.assert_array_equal(out.to_numpy(), got.to_numpy())
    with pytest.raises(TypeError, match="out must have dtype float32"):
        head(up(x), out=gp.empty((m, 40), dtype))
    with pytest.raises(TypeError, match="out_dtype must be None"):
        Linear(up(w), out_dtype=gp.float16 if dtype == gp.bfloat16 else gp.bfloat16)


def test_gated_mlp_keeps_decode_workspaces_only(rand: Rand) -> None:
    """Intermediates of up to GEMV_MAX_ROWS rows are kept (graph-safe); a prompt's are not."""
    dt = gp.float16
    mlp = GatedMLP(*(up((rand(s) * 0.2).astype(dt)) for s in ((48, 64), (48, 64), (64, 48))))
    for m in (1, 8, 30, 31):
        x = rand((m, 64), dt)
        g = x.astype(np.float64) @ mlp.gate_up.weight.to_numpy()[:48].astype(np.float64).T
        u = x.astype(np.float64) @ mlp.gate_up.weight.to_numpy()[48:].astype(np.float64).T
        ref = (g / (1 + np.exp(-g)) * u) @ mlp.down.weight.to_numpy().astype(np.float64).T
        assert rel_err(mlp(up(x)).to_numpy(), ref) < 1e-2
    assert sorted(m for _, m in mlp._buffers) == [1, 8]


def test_gated_mlp_on_two_threads_keeps_an_intermediate_per_thread(rand: Rand) -> None:
    """Two threads running one model (two serving engines sharing its weights) interleave their
    calls. Here the worst interleaving is forced: the other thread's whole decode-row call runs
    between this thread's gate/up product and its activation. With one kept intermediate for
    both threads this call's activation would read the other thread's product."""
    dt = gp.float16
    mlp = GatedMLP(*(up((rand(s) * 0.2).astype(dt)) for s in ((48, 64), (48, 64), (64, 48))))
    mine, theirs = up(rand((1, 64), dt)), up(rand((1, 64), dt))
    want_mine, want_theirs = mlp(mine).to_numpy(), mlp(theirs).to_numpy()
    assert not np.array_equal(want_mine, want_theirs)
    this_thread, got_theirs = threading.get_ident(), []

    class GateUpThenTheOtherThread:
        def __init__(self, gate_up: Linear) -> None:
            self.gate_up = gate_up

        def __getattr__(self, name: str) -> object:
            return getattr(self.gate_up, name)

        def __call__(self, x: gp.GPUArray, *, out: gp.GPUArray) -> gp.GPUArray:
            y = self.gate_up(x, out=out)
            if threading.get_ident() == this_thread and not got_theirs:
                other = threading.Thread(target=lambda: got_theirs.append(mlp(theirs).to_numpy()))
                other.start()
                other.join()
            return y

    mlp.gate_up = GateUpThenTheOtherThread(mlp.gate_up)  # type: ignore[assignment]
    got_mine = mlp(mine).to_numpy()
    assert len(got_theirs) == 1  # the other call did run in between
    np.testing.assert_array_equal(got_mine, want_mine)
    np.testing.assert_array_equal(got_theirs[0], want_theirs)


# ----------------------------------------------------------------------------- norms


@pytest.mark.parametrize("dtype", ALL)
def test_rmsnorm_and_its_residual_form(rand: Rand, dtype: object) -> None:
    x, r, w = rand((5, 96), dtype), rand((5, 96), dtype), rand((96,), dtype)
    norm = RMSNorm(up(w), eps=1e-5)
    y = norm(up(x))
    np.testing.assert_array_equal(y.to_numpy(), ops.rmsnorm(up(x), up(w), 1e-5).to_numpy())
    assert rel_err(y.to_numpy(), rms_ref(x, w, 1e-5)) < LIMITS[np.dtype(dtype)]
    s, y2 = norm(up(x), up(r))
    s_f, y_f = ops.add_rmsnorm(up(x), up(r), up(w), 1e-5)
    np.testing.assert_array_equal(s.to_numpy(), s_f.to_numpy())
    np.testing.assert_array_equal(y2.to_numpy(), y_f.to_numpy())


def test_layernorm_with_bias(rand: Rand) -> None:
    x, w, b = rand((4, 3, 64), gp.float16), rand((64,), gp.float16), rand((64,), gp.float16)
    norm = LayerNorm(up(w), up(b))
    assert rel_err(norm(up(x)).to_numpy(), ln_ref(x, w, b, 1e-5)) < 3e-3
    with pytest.raises(ValueError, match="eps must be"):
        LayerNorm(up(w), eps=float("nan"))


# ----------------------------------------------------------------------------- rotary, embedding


@pytest.mark.parametrize("layout", ["neox", "gptj"])
@pytest.mark.parametrize("inplace", [True, False])
def test_rotary_matches_complex_reference(rand: Rand, rng, layout: str, inplace: bool) -> None:
    rot = Rotary(32, rotary_dim=16, base=500.0, max_positions=64, layout=layout)
    q, k = rand((6, 4, 32), gp.float32), rand((6, 2, 32), gp.float32)
    pos = rng.integers(0, 64, size=6).astype(np.int32)
    gq, gk = up(q), up(k)
    oq, ok = rot(gq, gk, up(pos), inplace=inplace)
    assert (oq is gq) == inplace and (ok is gk) == inplace
    assert rel_err(oq.to_numpy(), rope_ref(q, pos, 16, layout, 500.0)) < 1e-5
    assert rel_err(ok.to_numpy(), rope_ref(k, pos, 16, layout, 500.0)) < 1e-5


def test_rotary_with_scaled_frequencies(rand: Rand, rng) -> None:
    """A long-context scaling's inv_freq and attention factor give the function's tables."""
    inv_freq, factor = ops.rope_inv_freq(
        64, 5e5, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
        max_position_embeddings=128,
    )  # fmt: skip
    assert factor != 1.0
    rot = Rotary(64, base=5e5, max_positions=128, inv_freq=inv_freq, attention_factor=factor)
    cos, sin = ops.rope_cos_sin(128, 64, 5e5, inv_freq=inv_freq, attention_factor=factor)
    np.testing.assert_array_equal(rot.cos.to_numpy(), cos.to_numpy())
    q, k = rand((5, 4, 64), gp.float32), rand((5, 2, 64), gp.float32)
    pos = up(rng.integers(0, 128, size=5).astype(np.int32))
    got_q, got_k = rot(up(q), up(k), pos)
    want_q, want_k = ops.apply_rope(up(q), up(k), cos, sin, pos)
    np.testing.assert_array_equal(got_q.to_numpy(), want_q.to_numpy())
    np.testing.assert_array_equal(got_k.to_numpy(), want_k.to_numpy())
    with pytest.raises(ValueError, match="inv_freq must be 32"):
        Rotary(64, inv_freq=inv_freq[:8])


def test_embedding_rows(rand: Rand, rng) -> None:
    table = rand((50, 24), gp.bfloat16)
    ids = rng.integers(0, 50, size=(2, 7)).astype(np.int64)
    emb = Embedding(up(table))
    np.testing.assert_array_equal(emb(up(ids)).to_numpy(), table[ids])


# ----------------------------------------------------------------------------- attention


@pytest.mark.parametrize("dtype", HALF)
def test_attention_prefill_gqa_causal(rand: Rand, dtype: object) -> None:
    q, k, v = qkv(rand, 2, 4, 2, 9, 13, 64, dtype)
    attn = Attention(4, 2, 64)
    got = attn.prefill(up(q), up(k), up(v))
    assert rel_err(got.to_numpy(), ref_sdpa(q, k, v, causal=True)) < LIMITS[np.dtype(dtype)]
    with pytest.raises(ValueError, match=r"8 query and 2 KV heads of 64; got q \(2, 4, 9, 64\)"):
        Attention(8, 2, 64).prefill(up(q), up(k), up(v))
    with pytest.raises(ValueError, match="KV heads of 128"):
        Attention(4, 2, 128).prefill(up(q), up(k), up(v))


@pytest.mark.parametrize(("sq", "sk"), [(11, 11), (4, 11), (6, 6)])
def test_attention_prefill_sliding_window(rand: Rand, sq: int, sk: int) -> None:
    """Query i sees keys i - window < j <= i (bottom-right aligned); no mask within the window."""
    window, dt = 6, gp.float16
    q, k, v = qkv(rand, 2, 4, 2, sq, sk, 64, dt)
    attn = Attention(4, 2, 64, sliding_window=window)
    i = np.arange(sq)[:, None] + (sk - sq)
    far = np.arange(sk)[None, :] <= i - window
    ref = ref_sdpa(q, k, v, mask=np.where(far, -np.inf, 0.0), causal=True)
    got = attn.prefill(up(q), up(k), up(v))
    assert rel_err(got.to_numpy(), ref) < LIMITS[np.dtype(dt)]
    again = attn.prefill(up(q), up(k), up(v))  # the kept mask
    np.testing.assert_array_equal(again.to_numpy(), got.to_numpy())
    full = Attention(4, 2, 64).prefill(up(q), up(k), up(v)).to_numpy()
    assert np.array_equal(full, got.to_numpy()) == (sk <= window)
    with pytest.raises(ValueError, match="builds its own mask"):
        attn.prefill(up(q), up(k), up(v), attn_mask=up(np.zeros((sq, sk), np.float32)))
    with pytest.raises(ValueError, match="causal layer"):
        Attention(4, 2, 64, causal=False, sliding_window=4)
    with pytest.raises(TypeError, match="sliding_window must be an int"):
        Attention(4, 2, 64, sliding_window=4.0)  # type: ignore[arg-type]


def test_sliding_window_prefills_on_two_threads_keep_their_own_masks(rand: Rand) -> None:
    """Two threads prefilling through one sliding-window layer (two engines sharing a model):
    the other thread's prefill of another length runs right after this one keeps its mask,
    the worst interleaving, forced. Each must still attend with its own shape's mask."""
    window, dt = 6, gp.float16
    mine, theirs = qkv(rand, 1, 4, 2, 11, 11, 64, dt), qkv(rand, 1, 4, 2, 9, 9, 64, dt)
    alone = Attention(4, 2, 64, sliding_window=window)
    want_mine, want_theirs = (alone.prefill(*map(up, t)).to_numpy() for t in (mine, theirs))
    this_thread, got_theirs = threading.get_ident(), []

    class OtherThreadAfterKeepingAMask(Attention):
        def __setattr__(self, name: str, value: object) -> None:
            super().__setattr__(name, value)
            first = name == "_window_mask" and value is not None and not got_theirs
            if first and threading.get_ident() == this_thread:
                other = threading.Thread(
                    target=lambda: got_theirs.append(self.prefill(*map(up, theirs)).to_numpy())
                )
                other.start()
                other.join()

    got_mine = OtherThreadAfterKeepingAMask(4, 2, 64, sliding_window=window).prefill(*map(up, mine))
    assert len(got_theirs) == 1  # the other prefill did run in between
    np.testing.assert_array_equal(got_mine.to_numpy(), want_mine)
    np.testing.assert_array_equal(got_theirs[0], want_theirs)


@pytest.mark.parametrize("paged", [False, True])
def test_attention_decode(rand: Rand, rng, paged: bool) -> None:
    b, hq, hkv, d, dt = 3, 8, 2, 128, gp.bfloat16
    q = (rand((b, hq, d)) * 0.3).astype(dt)
    lens = rng.integers(1, 40, size=b).astype(np.int32)
    attn = Attention(hq, hkv, d)
    if paged:
        bs, nb = 16, 3
        kc = (rand((b * nb, hkv, bs, d)) * 0.3).astype(dt)
        vc = rand((b * nb, hkv, bs, d)).astype(dt)
        table = rng.permutation(b * nb).reshape(b, nb).astype(np.int32)
        got = attn.decode(up(q), up(kc), up(vc), up(lens), block_table=up(table))
        keys, vals = gather_pages(kc, table, lens), gather_pages(vc, table, lens)
    else:
        kc = (rand((b, hkv, 48, d)) * 0.3).astype(dt)
        vc = rand((b, hkv, 48, d)).astype(dt)
        got = attn.decode(up(q), up(kc), up(vc), up(lens))
        keys = [kc[i, :, : lens[i]] for i in range(b)]
        vals = [vc[i, :, : lens[i]] for i in range(b)]
    assert rel_err(got.to_numpy(), ref_decode(q, keys, vals)) < 1e-2


# ----------------------------------------------------------------------------- plans made once


def _decoder_pieces(
    rand: Rand, rng
) -> tuple[list[Callable[[], object]], list[Callable[[], object]]]:
    """Calls of every layer (allocating, and with ``out=``) on fresh random inputs."""
    dt = gp.float16
    lin = Linear(up(rand((64, 64), dt)), up(rand((64,), dt)), activation="silu")
    norm = RMSNorm(up(rand((64,), dt)))
    mlp = GatedMLP(*(up((rand(s) * 0.2).astype(dt)) for s in ((48, 64), (48, 64), (64, 48))))
    rot = Rotary(64, max_positions=32)
    emb = Embedding(up(rand((32, 64), dt)))
    attn = Attention(4, 2, 64)
    x, r = up(rand((1, 64), dt)), up(rand((1, 64), dt))
    y, s = gp.empty((1, 64), dt), gp.empty((1, 64), dt)
    q3, k3 = up(rand((1, 4, 64), dt)), up(rand((1, 2, 64), dt))
    pos = up(np.array([5], np.int32))
    ids = up(rng.integers(0, 32, size=1).astype(np.int32))
    e = gp.empty((1, 64), dt)
    q, kc, vc = (up(a) for a in qkv(rand, 1, 4, 2, 1, 40, 64, dt))
    lens = up(np.array([23], np.int32))
    o = gp.empty((1, 4, 64), dt)
    qp, kp, vp = (up(a) for a in qkv(rand, 1, 4, 2, 5, 5, 64, dt))
    op = gp.empty((1, 4, 5, 64), dt)
    allocating = [
        lambda: lin(x),
        lambda: norm(x, r),
        lambda: mlp(x),
        lambda: rot(q3, k3, pos, inplace=False),
        lambda: emb(ids),
        lambda: attn.decode(q.reshape(1, 4, 64), kc, vc, lens),
        lambda: attn.prefill(qp, kp, vp),
    ]
    with_out = [
        lambda: lin(x, out=y),
        lambda: norm(x, r, out=y, sum_out=s),
        lambda: mlp(x, out=y),
        lambda: rot(q3, k3, pos),
        lambda: emb(ids, out=e),
        lambda: attn.decode(q.reshape(1, 4, 64), kc, vc, lens, out=o),
        lambda: attn.prefill(qp, kp, vp, out=op),
    ]
    return allocating, with_out


def test_a_layer_call_makes_no_plan(rand: Rand, rng) -> None:
    """After a layer's first call with a shape, its calls never reach a plan cache again."""
    allocating, with_out = _decoder_pieces(rand, rng)
    for call in allocating + with_out:
        call()
    before = plan_lookups()
    for _ in range(3):
        for call in allocating + with_out:
            call()
    assert plan_lookups() == before


def test_a_layer_keeps_a_bounded_number_of_plans(rand: Rand, monkeypatch) -> None:
    """One plan per prompt length would grow without bound in a server: the oldest goes."""
    from pygpukit.ops.layers import _checks

    monkeypatch.setattr(_checks, "MAX_PLANS", 4)
    w = rand((16, 32), gp.float16)
    layer, norm = Linear(up(w)), RMSNorm(up(rand((32,), gp.float16)))
    for m in range(1, 8):
        x = rand((m, 32), gp.float16)
        assert rel_err(layer(up(x)).to_numpy(), linear_ref(x, w, None, None)) < 3e-3
        norm(up(x))
    assert list(layer._plans) == [(m, True) for m in range(4, 8)]
    assert len(norm._plans) == 4
    x = rand((1, 32), gp.float16)  # dropped: planned again, same result
    np.testing.assert_array_equal(layer(up(x)).to_numpy(), ops.linear(up(x), up(w)).to_numpy())
    assert (1, True) in layer._plans and len(layer._plans) == 4


def test_out_calls_allocate_nothing(rand: Rand, rng) -> None:
    allocating, with_out = _decoder_pieces(rand, rng)
    for call in with_out:
        call()  # first use: plans, and the MLP's intermediates
    before = allocations()
    for call in with_out:
        call()
    assert allocations() == before
    for call in allocating:  # the counter sees a layer's output allocation
        count = allocations()
        call()
        assert allocations() > count


def test_a_built_layer_keeps_its_plan_when_the_config_changes(rand: Rand) -> None:
    """The knobs are read when a plan is made: a layer's plans stay; the function API replans."""
    w = up(rand((16, 64), gp.bfloat16))
    layer = Linear(w)
    x = up(rand((2, 64), gp.bfloat16))
    first = layer(x).to_numpy()
    plan = layer.plan(2)
    misses = plan_caches()["linear"].misses
    with config.override(gemv_variant="simt"):
        again = layer(x).to_numpy()
        assert layer.plan(2) is plan
        assert plan_caches()["linear"].misses == misses
        ops.linear(x, w)  # the function API plans under the new configuration
        assert plan_caches()["linear"].misses == misses + 1
    np.testing.assert_array_equal(first, again)


def test_function_api_plans_once_per_shape(rand: Rand) -> None:
    cache = plan_caches()["norm"]
    x, w = up(rand((3, 40), gp.float32)), up(rand((40,), gp.float32))
    ops.rmsnorm(x, w)
    hits, misses = cache.hits, cache.misses
    for _ in range(4):
        ops.rmsnorm(up(rand((3, 40), gp.float32)), w)
    assert (cache.hits, cache.misses) == (hits + 4, misses)


def test_config_reads_the_environment_once(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = config.get()
    try:
        monkeypatch.setenv("PYGPUKIT_DECODE_KERNEL", "simt")
        assert config.get() is cfg  # not read again
        assert config.reload().decode_kernel == "simt"
        monkeypatch.setenv("PYGPUKIT_DECODE_KERNEL", "mma9")
        with pytest.raises(ValueError, match="PYGPUKIT_DECODE_KERNEL='mma9' is not valid"):
            config.reload()
        assert config.get().decode_kernel == "simt"
        with pytest.raises(TypeError):
            config.set(no_such_knob="x")
    finally:
        monkeypatch.undo()
        config.reload()


def test_launch_benchmark_suite_smoke() -> None:
    """The ops_launch suite's rows (function API and layer) run and pass their checks."""
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.harness import HarnessConfig, measure
    from pygpukit.benchmark.peers import PyGPUkitLibrary
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.ops.benchmarks import launch as suite

    rng = np.random.default_rng()
    ctx = SuiteContext(PyGPUkitLibrary.backend_name(gp), True, DataCache(rng), rng)
    lib = PyGPUkitLibrary()
    cfg = HarnessConfig(max_reps=2, min_reps=1, budget_s=0.05, warmup_s=0.0, target_rep_ms=0.1)
    cases = list(suite.SUITE.cases(ctx))
    assert [(c.op, c.params["api"]) for c in cases] == [
        ("gemv", "function"), ("gemv", "layer"), ("linear", "function"), ("linear", "function"),
        ("decode_attention", "function"), ("decode_attention", "layer"),
    ]  # fmt: skip
    results = [measure(case, lib, cfg) for case in cases]
    assert all(r.status == "ok" for r in results), [r.reason for r in results]
