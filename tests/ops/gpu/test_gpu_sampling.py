"""pygpukit.ops.sampling on the GPU: argmax, filters, distributions and the Philox stream.

Statistical bounds as in tests/ops/test_sampling.py: chi-square at p ~ 1e-6 with a
fixed number of draws, and a check that the same counts reject a wrong distribution.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import chi2, probs_ref

import pygpukit as gp
from pygpukit.ops import Generator, argmax, sample
from pygpukit.ops.sampling import uniforms

pytestmark = pytest.mark.gpu

DTYPES = [np.float32, gp.float16, gp.bfloat16]
CHI2_LIMIT = {9: 45.0, 15: 55.0}
LLAMA3_VOCAB = 128256


def seed_of(rng: np.random.Generator) -> int:
    return int(rng.integers(0, 2**63))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab", [1000, LLAMA3_VOCAB])
def test_argmax(rand: Callable[..., np.ndarray], dtype: object, vocab: int) -> None:
    x = rand((6, vocab), dtype)
    x[1, 17] = x[1, vocab - 3] = x[1].max() + 5  # a tie: the lower index wins
    x[2, :] = np.nan
    x[2, 9] = 1.0  # NaN counts as -inf
    got = argmax(gp.from_numpy(x)).to_numpy()
    want = np.argmax(np.nan_to_num(x.astype(np.float64), nan=-np.inf), axis=1)
    assert got.tolist() == want.tolist() and got[1] == 17 and got[2] == 9


@pytest.mark.parametrize("dtype", DTYPES)
def test_temperature_zero_is_greedy(rand: Callable[..., np.ndarray], dtype: object) -> None:
    x = rand((8, LLAMA3_VOCAB), dtype)
    got = sample(gp.from_numpy(x), temperature=0.0, top_k=3, top_p=0.5).to_numpy()
    assert got.tolist() == np.argmax(x.astype(np.float64), axis=1).tolist()


def test_draws_are_the_inverse_cdf_of_the_philox_uniform(
    rand: Callable[..., np.ndarray], rng: np.random.Generator
) -> None:
    """Same uniform as the NumPy version per row; the token is its inverse CDF in index order.

    The kernel sums probabilities in 32.32 fixed point: a draw within rounding of a
    boundary may land on the neighbour, hence a tolerance of a few rows in 512.
    """
    rows, vocab = 512, 3000
    x = rand((rows, vocab), np.float32) * 0.5
    seed = seed_of(rng)
    g = Generator(seed, offset=11)
    got = sample(gp.from_numpy(x), temperature=0.8, top_k=300, top_p=0.9, generator=g).to_numpy()
    assert g.offset == 12
    u = uniforms(seed, 11, rows).astype(np.float64) / 2.0**64
    want = []
    for r in range(rows):
        cdf = np.cumsum(probs_ref(x[r], 0.8, 300, 0.9))
        want.append(min(int(np.searchsorted(cdf, u[r] * cdf[-1], side="right")), vocab - 1))
    assert int(np.count_nonzero(got != np.array(want))) <= 3


def test_fixed_seed_reproduces(rand: Callable[..., np.ndarray], rng: np.random.Generator) -> None:
    logits = gp.from_numpy(rand((64, LLAMA3_VOCAB), np.float32) * 0.1)
    seed = seed_of(rng)
    kw = {"temperature": 0.9, "top_k": 1000, "top_p": 0.95}
    a = sample(logits, generator=Generator(seed), **kw).to_numpy()
    b = sample(logits, generator=Generator(seed), **kw).to_numpy()
    assert a.tolist() == b.tolist()
    g = Generator(seed)
    sample(logits, generator=g, **kw)
    assert sample(logits, generator=g, **kw).to_numpy().tolist() != a.tolist()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [1, 7, 1000])
def test_top_k_stays_in_top_k(
    rand: Callable[..., np.ndarray], rng: np.random.Generator, dtype: object, k: int
) -> None:
    x = rand((16, LLAMA3_VOCAB), dtype) * 0.05  # flat: unfiltered draws leave the top k
    logits, g = gp.from_numpy(x), Generator(seed_of(rng))
    kth = np.sort(x.astype(np.float64), axis=1)[:, -k]  # ties at the k-th value are kept
    for _ in range(16):
        got = sample(logits, top_k=k, generator=g).to_numpy()
        assert all(x[r, t] >= kth[r] for r, t in enumerate(got))


@pytest.mark.parametrize("top_p", [0.0, 0.5, 0.9])
@pytest.mark.parametrize("top_k", [0, 40])
def test_top_p_stays_in_the_nucleus(
    rand: Callable[..., np.ndarray], rng: np.random.Generator, top_p: float, top_k: int
) -> None:
    x = rand((32, 20000), np.float32) * 0.5
    logits, g = gp.from_numpy(x), Generator(seed_of(rng))
    # The smallest set reaching top_p (of what top-k kept), with a margin for float rounding.
    allowed = [
        set(np.flatnonzero(probs_ref(row, top_k=top_k, top_p=min(top_p + 1e-4, 1.0)))) for row in x
    ]
    for _ in range(8):
        got = sample(logits, top_k=top_k, top_p=top_p, generator=g).to_numpy()
        assert all(int(t) in allowed[r] for r, t in enumerate(got))


def test_min_p_is_respected(rand: Callable[..., np.ndarray], rng: np.random.Generator) -> None:
    x = rand((32, 5000), np.float32) * 0.3
    logits, g = gp.from_numpy(x), Generator(seed_of(rng))
    p = np.exp(x - x.max(axis=1, keepdims=True))
    for _ in range(8):
        got = sample(logits, min_p=0.3, generator=g).to_numpy()
        assert all(p[r, t] >= 0.3 * (1 - 1e-5) for r, t in enumerate(got))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_frequencies_match_softmax(
    rng: np.random.Generator, dtype: object, temperature: float
) -> None:
    row = rng.standard_normal(10).astype(dtype)
    draws = 50000
    logits = gp.from_numpy(np.tile(row, (draws, 1)))
    got = sample(logits, temperature=temperature, generator=Generator(seed_of(rng)))
    counts = np.bincount(got.to_numpy(), minlength=10)
    assert chi2(counts, probs_ref(row, temperature)) < CHI2_LIMIT[9]
    assert chi2(counts, probs_ref(row, 1.6 - temperature)) > CHI2_LIMIT[9]


def test_penalty_frequencies(rng: np.random.Generator) -> None:
    row = rng.standard_normal(16).astype(np.float32)
    row[2], row[5] = 1.5, -0.7  # penalized: one positive (divided), one negative (multiplied)
    draws = 50000
    logits = gp.from_numpy(np.tile(row, (draws, 1)))
    prev = gp.from_numpy(np.tile(np.array([2, 5, 5, -1], dtype=np.int32), (draws, 1)))
    got = sample(
        logits, repetition_penalty=1.8, prev_tokens=prev, generator=Generator(seed_of(rng))
    )
    counts = np.bincount(got.to_numpy(), minlength=16)
    assert chi2(counts, probs_ref(row, penalty=1.8, prev=[2, 5])) < CHI2_LIMIT[15]
    assert chi2(counts, probs_ref(row)) > CHI2_LIMIT[15]


def test_penalty_over_a_large_vocabulary(rand: Callable[..., np.ndarray]) -> None:
    x = rand((2, LLAMA3_VOCAB), gp.bfloat16)
    top = np.argmax(x.astype(np.float64), axis=1)
    prev = gp.from_numpy(np.stack([top, top]).T.astype(np.int32))  # each row's own top token
    got = sample(gp.from_numpy(x), temperature=0.0, repetition_penalty=1e6, prev_tokens=prev)
    pen = x.astype(np.float64)
    for r in range(2):
        v = pen[r, top[r]]
        pen[r, top[r]] = v / 1e6 if v > 0 else v * 1e6
    assert got.to_numpy().tolist() == np.argmax(pen, axis=1).tolist()


def test_per_row_parameters(rand: Callable[..., np.ndarray], rng: np.random.Generator) -> None:
    x = rand((4, 5000), np.float32) * 0.2
    temps = gp.from_numpy(np.array([0.0, 1.0, 1.0, 0.0], dtype=np.float32))
    ks = gp.from_numpy(np.array([0, 1, 3, 0], dtype=np.int32))
    ps = gp.from_numpy(np.array([1.0, 1.0, 1.0, 0.5], dtype=np.float32))
    g = Generator(seed_of(rng))
    order = np.argsort(-x.astype(np.float64), axis=1, kind="stable")
    for _ in range(10):
        t = sample(gp.from_numpy(x), temperature=temps, top_k=ks, top_p=ps, generator=g).to_numpy()
        assert t[0] == order[0, 0] and t[1] == order[1, 0] and t[3] == order[3, 0]
        assert t[2] in order[2, :3]


def test_matches_torch_greedy(rand: Callable[..., np.ndarray]) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch has no CUDA device")
    x = rand((8, LLAMA3_VOCAB), np.float32)
    want = torch.argmax(torch.from_numpy(x).cuda(), dim=-1).cpu().numpy()
    assert argmax(gp.from_numpy(x)).to_numpy().tolist() == want.tolist()
