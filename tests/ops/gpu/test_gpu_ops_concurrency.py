"""Thread stress tests of every pygpukit.ops op family, against the float64 references.

For each op, N threads (8 on the GPU) launch it on fresh random inputs of random shapes and
dtypes, all on the default stream or each on its own ``gp.Stream()``, keep a few results
pending and check every one against ``ops_references`` (written independently of the ops).
A kernel, launch plan or cache an op shares between calls shows up as a wrong result here.

Not marked ``gpu``: on the CPU backend the same tests check the NumPy path's thread safety
with fewer iterations; the GPU machine runs them with 8 threads and more iterations.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import (
    gated_ref,
    kv_append_ref,
    linear_ref,
    ln_ref,
    paged_write_ref,
    ref_decode,
    ref_sdpa,
    rel_err,
    rms_ref,
    rope_ref,
    softmax_ref,
)

import pygpukit as gp
from pygpukit import ops
from pygpukit.ops.linear import ACTIVATIONS

Check = Callable[[], "str | None"]
Launch = Callable[[np.random.Generator], Check]

TOL = {"float32": 1e-5, "float16": 3e-3, "bfloat16": 1e-2}
FLOATS = list(TOL)
HALF = ["float16", "bfloat16"]


def _data(
    rng: np.random.Generator, shape: tuple[int, ...], dtype: str, scale: float = 1.0
) -> np.ndarray:
    """Fresh random normals around 0.5 (times ``scale``) in ``dtype``; never all zeros."""
    return ((rng.standard_normal(shape) + 0.5) * scale).astype(gp.dtypes.normalize(dtype))


def _pick(rng: np.random.Generator, choices: list[str]) -> str:
    return str(choices[int(rng.integers(0, len(choices)))])


def _dims(rng: np.random.Generator, lo: int, hi: int, n: int) -> list[int]:
    return [int(v) for v in rng.integers(lo, hi + 1, n)]


def _close(got: object, ref: np.ndarray, tol: float, what: str) -> str | None:
    """``None`` when the GPUArray ``got`` matches ``ref`` (exactly when ``tol`` is 0)."""
    out = got.to_numpy()  # type: ignore[attr-defined]
    if out.shape != ref.shape:
        return f"{what}: shape {out.shape}, expected {ref.shape}"
    if tol == 0.0:
        same = np.array_equal(out.astype(np.float64), ref.astype(np.float64))
        return None if same else f"{what}: differs from the reference"
    err = rel_err(out, ref)
    return None if err <= tol else f"{what}: relative error {err:.3g} > {tol:g}"


# ----------------------------------------------------------------------------- one launch per op


def _rmsnorm(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    rows, width = _dims(rng, 1, 33, 1)[0], _dims(rng, 1, 700, 1)[0]
    x, w = _data(rng, (rows, width), dt), _data(rng, (width,), dt)
    y = ops.rmsnorm(gp.from_numpy(x), gp.from_numpy(w), 1e-6)
    return lambda: _close(y, rms_ref(x, w, 1e-6), TOL[dt], f"rmsnorm {dt} {x.shape}")


def _layernorm(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    rows, width = _dims(rng, 1, 33, 1)[0], _dims(rng, 2, 700, 1)[0]
    x, w, b = _data(rng, (rows, width), dt), _data(rng, (width,), dt), _data(rng, (width,), dt)
    y = ops.layernorm(gp.from_numpy(x), gp.from_numpy(w), gp.from_numpy(b), eps=1e-5)
    return lambda: _close(y, ln_ref(x, w, b, 1e-5), TOL[dt], f"layernorm {dt} {x.shape}")


def _add_rmsnorm(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    shape = (_dims(rng, 1, 17, 1)[0], _dims(rng, 1, 500, 1)[0])
    x, r, w = _data(rng, shape, dt), _data(rng, shape, dt), _data(rng, shape[-1:], dt)
    s, y = ops.add_rmsnorm(gp.from_numpy(x), gp.from_numpy(r), gp.from_numpy(w), 1e-6)
    summed = (x.astype(np.float64) + r.astype(np.float64)).astype(x.dtype)

    def check() -> str | None:
        return _close(s, summed, TOL[dt], f"add_rmsnorm sum {dt} {shape}") or _close(
            y, rms_ref(summed, w, 1e-6), TOL[dt], f"add_rmsnorm norm {dt} {shape}"
        )

    return check


def _rope(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    layout = _pick(rng, ["neox", "gptj"])
    tokens, hq, hk = _dims(rng, 1, 20, 1)[0], _dims(rng, 1, 8, 1)[0], _dims(rng, 1, 4, 1)[0]
    d = int(rng.choice([16, 32, 64, 128]))
    rd = d if rng.random() < 0.5 else d // 2
    q, k = _data(rng, (tokens, hq, d), dt), _data(rng, (tokens, hk, d), dt)
    pos = rng.integers(0, 100, size=tokens).astype(np.int64)
    cos, sin = ops.rope_cos_sin(100, rd)
    qo, ko = ops.apply_rope(
        gp.from_numpy(q),
        gp.from_numpy(k),
        cos,
        sin,
        gp.from_numpy(pos),
        layout=layout,
        rotary_dim=rd,
    )
    what = f"apply_rope {dt} {layout} q{q.shape} k{k.shape} rotary_dim={rd}"

    def check() -> str | None:
        return _close(qo, rope_ref(q, pos, rd, layout), TOL[dt], what) or _close(
            ko, rope_ref(k, pos, rd, layout), TOL[dt], what
        )

    return check


def _gated(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    act = _pick(rng, ["silu", "tanh", "none"])
    shape = (_dims(rng, 1, 17, 1)[0], 2 * _dims(rng, 1, 300, 1)[0])
    x = _data(rng, shape, dt)
    gx = gp.from_numpy(x)
    y = ops.silu_mul(gx) if act == "silu" else ops.gelu_mul(gx, approximate=act)
    return lambda: _close(y, gated_ref(x, act), TOL[dt], f"gated {act} {dt} {shape}")


def _softmax(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    shape = (_dims(rng, 1, 17, 1)[0], _dims(rng, 1, 3000, 1)[0])
    x = _data(rng, shape, dt, scale=3.0)
    y = ops.softmax(gp.from_numpy(x))
    return lambda: _close(y, softmax_ref(x), TOL[dt], f"softmax {dt} {shape}")


def _embedding(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    vocab, dim = _dims(rng, 1, 500, 1)[0], _dims(rng, 1, 300, 1)[0]
    table = _data(rng, (vocab, dim), dt)
    ids = rng.integers(0, vocab, size=_dims(rng, 1, 40, 1)[0]).astype(
        _pick(rng, ["int32", "int64"])
    )
    y = ops.embedding(gp.from_numpy(ids), gp.from_numpy(table))
    return lambda: _close(y, table[ids], 0.0, f"embedding {dt} table{table.shape} ids{ids.shape}")


def _linear(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    m, n, k = _dims(rng, 1, 48, 3)
    activation = list(ACTIVATIONS)[int(rng.integers(0, len(ACTIVATIONS)))]
    x, w, b = _data(rng, (m, k), dt), _data(rng, (n, k), dt), _data(rng, (n,), dt)
    bias = b if rng.random() < 0.5 else None
    y = ops.linear(
        gp.from_numpy(x),
        gp.from_numpy(w),
        None if bias is None else gp.from_numpy(bias),
        activation=activation,
    )
    ref = linear_ref(x, w, bias, activation)
    return lambda: _close(y, ref, TOL[dt], f"linear {dt} {m}x{k} @ ({n}x{k})^T {activation}")


def _gemv(rng: np.random.Generator) -> Check:
    dt = _pick(rng, HALF)
    m, n, k = _dims(rng, 1, 8, 1)[0], _dims(rng, 1, 200, 1)[0], _dims(rng, 1, 400, 1)[0]
    x, w = _data(rng, (m, k), dt), _data(rng, (n, k), dt)
    y = ops.gemv(gp.from_numpy(x), gp.from_numpy(w))
    return lambda: _close(
        y, linear_ref(x, w, None, None), TOL[dt], f"gemv {dt} {m}x{k} @ ({n}x{k})^T"
    )


def _sdpa(rng: np.random.Generator) -> Check:
    dt = _pick(rng, HALF)
    b, hkv = _dims(rng, 1, 2, 1)[0], _dims(rng, 1, 2, 1)[0]
    hq = hkv * _dims(rng, 1, 3, 1)[0]
    sq, sk = _dims(rng, 1, 40, 2)
    d = int(rng.choice([64, 128]))
    causal = bool(rng.random() < 0.5)
    q = _data(rng, (b, hq, sq, d), dt, scale=0.3)
    k, v = _data(rng, (b, hkv, sk, d), dt, scale=0.3), _data(rng, (b, hkv, sk, d), dt)
    y = ops.scaled_dot_product_attention(
        gp.from_numpy(q), gp.from_numpy(k), gp.from_numpy(v), is_causal=causal
    )
    ref = ref_sdpa(q, k, v, causal=causal)
    return lambda: _close(y, ref, TOL[dt], f"sdpa {dt} q{q.shape} k{k.shape} causal={causal}")


def _decode(rng: np.random.Generator) -> Check:
    dt = _pick(rng, HALF)
    b, hkv = _dims(rng, 1, 4, 1)[0], _dims(rng, 1, 2, 1)[0]
    hq = hkv * _dims(rng, 1, 4, 1)[0]
    d, max_len = int(rng.choice([64, 128])), _dims(rng, 1, 300, 1)[0]
    q = _data(rng, (b, hq, d), dt, scale=0.3)
    kc, vc = _data(rng, (b, hkv, max_len, d), dt, scale=0.3), _data(rng, (b, hkv, max_len, d), dt)
    lens = rng.integers(1, max_len + 1, size=b).astype(np.int32)
    y = ops.decode_attention(
        gp.from_numpy(q), gp.from_numpy(kc), gp.from_numpy(vc), gp.from_numpy(lens)
    )
    ref = ref_decode(
        q, [kc[i, :, : lens[i]] for i in range(b)], [vc[i, :, : lens[i]] for i in range(b)]
    )
    return lambda: _close(
        y, ref, TOL[dt], f"decode_attention {dt} q{q.shape} cache{kc.shape} lens {lens}"
    )


def _kv_append(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    b, hkv, t, max_len = _dims(rng, 1, 3, 1)[0], _dims(rng, 1, 2, 1)[0], _dims(rng, 1, 5, 1)[0], 12
    d = int(rng.choice([64, 128]))
    k, v = _data(rng, (b, hkv, t, d), dt), _data(rng, (b, hkv, t, d), dt)
    kc0, vc0 = _data(rng, (b, hkv, max_len, d), dt), _data(rng, (b, hkv, max_len, d), dt)
    pos = rng.integers(0, max_len, size=b).astype(np.int32)
    kc, vc = gp.from_numpy(kc0), gp.from_numpy(vc0)
    ops.kv_cache_append(gp.from_numpy(k), gp.from_numpy(v), kc, vc, gp.from_numpy(pos))
    want_k, want_v = kv_append_ref(kc0, vc0, k, v, pos)
    what = f"kv_cache_append {dt} k{k.shape} positions {pos}"
    return lambda: _close(kc, want_k, 0.0, what) or _close(vc, want_v, 0.0, what)


def _paged_write(rng: np.random.Generator) -> Check:
    dt = _pick(rng, FLOATS)
    nblocks, bs, hkv = _dims(rng, 1, 6, 1)[0], 4, _dims(rng, 1, 2, 1)[0]
    n, d = _dims(rng, 1, nblocks * bs, 1)[0], int(rng.choice([64, 128]))
    k, v = _data(rng, (n, hkv, d), dt), _data(rng, (n, hkv, d), dt)
    kc0, vc0 = _data(rng, (nblocks, hkv, bs, d), dt), _data(rng, (nblocks, hkv, bs, d), dt)
    slots = rng.permutation(nblocks * bs)[:n].astype(np.int32)
    kc, vc = gp.from_numpy(kc0), gp.from_numpy(vc0)
    ops.paged_kv_cache_write(gp.from_numpy(k), gp.from_numpy(v), kc, vc, gp.from_numpy(slots))
    want_k, want_v = paged_write_ref(kc0, vc0, k, v, slots)
    what = f"paged_kv_cache_write {dt} k{k.shape} cache{kc0.shape}"
    return lambda: _close(kc, want_k, 0.0, what) or _close(vc, want_v, 0.0, what)


def _sampling(rng: np.random.Generator) -> Check:
    # Distinct integer logits (exact in every dtype up to 256): argmax has one answer, top_k=1
    # sampling must give it too, and a top_k sample must be one of the k largest.
    dt = _pick(rng, ["float32", *HALF])
    rows, vocab = _dims(rng, 1, 8, 1)[0], _dims(rng, 2, 256, 1)[0]
    logits = np.stack([rng.permutation(vocab) - vocab // 2 for _ in range(rows)]).astype(
        gp.dtypes.normalize(dt)
    )
    top_k = _dims(rng, 1, vocab, 1)[0]
    g = gp.from_numpy(logits)
    best = ops.argmax(g)
    greedy = ops.sample(g, top_k=1, generator=ops.Generator(int(rng.integers(0, 2**31))))
    drawn = ops.sample(
        g, temperature=0.7, top_k=top_k, generator=ops.Generator(int(rng.integers(0, 2**31)))
    )
    want = np.argmax(logits, axis=-1)
    allowed = np.argsort(-logits.astype(np.float64), axis=-1)[:, :top_k]
    what = f"sampling {dt} logits{logits.shape} top_k={top_k}"

    def check() -> str | None:
        got_best, got_greedy, got = (
            np.asarray(a.to_numpy()).reshape(-1) for a in (best, greedy, drawn)
        )
        if not np.array_equal(got_best, want):
            return f"{what}: argmax {got_best}, expected {want}"
        if not np.array_equal(got_greedy, want):
            return f"{what}: top_k=1 sample {got_greedy}, expected {want}"
        outside = [i for i in range(rows) if int(got[i]) not in allowed[i]]
        return f"{what}: rows {outside} sampled outside the top k" if outside else None

    return check


OPS: dict[str, Launch] = {
    "rmsnorm": _rmsnorm,
    "layernorm": _layernorm,
    "add_rmsnorm": _add_rmsnorm,
    "apply_rope": _rope,
    "gated_activations": _gated,
    "softmax": _softmax,
    "embedding": _embedding,
    "linear": _linear,
    "gemv": _gemv,
    "scaled_dot_product_attention": _sdpa,
    "decode_attention": _decode,
    "kv_cache_append": _kv_append,
    "paged_kv_cache_write": _paged_write,
    "sampling": _sampling,
}


@pytest.mark.parametrize("streams", ["shared", "separate"])
@pytest.mark.parametrize("op", list(OPS))
def test_op_threads(hammer: Callable[..., None], op: str, streams: str) -> None:
    """Every result of ``op`` from N threads x random shapes and dtypes matches its reference."""
    hammer(OPS[op], streams=streams, gpu_iterations=150, cpu_iterations=6)
