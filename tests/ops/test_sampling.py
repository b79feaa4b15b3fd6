"""pygpukit.ops.sampling on the current backend (CPU in CI): argmax, sample, Generator.

The statistical tests use a fresh generator seed each run and bounds loose enough
to pass reliably (chi-square at p ~ 1e-6) yet tight enough to catch a wrong
distribution (a wrong temperature or penalty moves the statistic into the hundreds).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from ops_references import chi2, probs_ref

import pygpukit as gp
from pygpukit.ops import Generator, argmax, sample
from pygpukit.ops.sampling import MAX_PENALTY_VOCAB, philox4x32_10, uniforms

DTYPES = [np.float32, gp.float16, gp.bfloat16]
CHI2_LIMIT = {9: 45.0, 15: 55.0}  # degrees of freedom -> bound (p below ~1e-6)


def test_philox_known_answers() -> None:
    # Random123's known-answer vectors for Philox4x32-10.
    kat = [
        ([0, 0, 0, 0], (0, 0), [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
        ([0xFFFFFFFF] * 4, (0xFFFFFFFF,) * 2, [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
        (
            [0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
            (0xA4093822, 0x299F31D0),
            [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1],
        ),
    ]
    for counter, key, want in kat:
        got = philox4x32_10(np.array([counter], dtype=np.uint64), key)[0]
        assert [int(v) for v in got] == want


def test_uniforms_depend_on_seed_offset_and_row() -> None:
    a = uniforms(7, 0, 4)
    assert len(set(int(v) for v in a)) == 4
    assert not np.array_equal(a, uniforms(7, 1, 4))
    assert not np.array_equal(a, uniforms(8, 0, 4))
    assert np.array_equal(a, uniforms(7, 0, 4))


def test_generator_offsets_and_errors() -> None:
    g = Generator(5)
    assert (g.seed, g.offset) == (5, 0)
    assert [g.next_offset() for _ in range(3)] == [0, 1, 2] and g.offset == 3
    assert Generator(2**64 - 1).seed == 2**64 - 1
    assert Generator().seed != Generator().seed or Generator().seed != Generator().seed
    for out_of_range in (-1, 2**64, -(2**70)):  # refused, never wrapped into [0, 2**64)
        with pytest.raises(ValueError, match=r"seed must be in \[0, 2\*\*64\)"):
            Generator(out_of_range)
    with pytest.raises(TypeError, match="seed must be an integer"):
        Generator(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset"):
        Generator(1, offset=-1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_argmax(rand: Callable[..., np.ndarray], dtype: object) -> None:
    x = rand((5, 301), dtype)
    x[1, 17] = x[1, 200] = x[1].max() + 5  # a tie: the lower index wins
    x[2, :] = np.nan
    x[2, 9] = 1.0  # NaN counts as -inf
    got = argmax(gp.from_numpy(x)).to_numpy()
    assert got.dtype == np.int32
    want = np.argmax(np.nan_to_num(x.astype(np.float64), nan=-np.inf), axis=1)
    assert got.tolist() == want.tolist() and got[1] == 17 and got[2] == 9


@pytest.mark.parametrize("dtype", DTYPES)
def test_temperature_zero_is_greedy(rand: Callable[..., np.ndarray], dtype: object) -> None:
    x = rand((6, 500), dtype)
    got = sample(gp.from_numpy(x), temperature=0.0, top_k=3).to_numpy()
    assert got.tolist() == np.argmax(x.astype(np.float64), axis=1).tolist()


def test_tiny_temperature_is_greedy(rand: Callable[..., np.ndarray]) -> None:
    x = rand((3, 100), np.float32)
    got = sample(gp.from_numpy(x), temperature=1e-38, generator=Generator(3)).to_numpy()
    assert got.tolist() == np.argmax(x, axis=1).tolist()


def test_penalty_changes_the_greedy_choice(rand: Callable[..., np.ndarray]) -> None:
    x = rand((2, 50), np.float32) * 0.01 - 2.0  # everything else well below the tokens set here
    x[0, 3], x[0, 4] = 10.0, 6.0  # 10 / 2 = 5 < 6
    x[1, 7], x[1, 8] = -0.5, -0.8  # -0.5 * 2 = -1.0 < -0.8
    prev = gp.from_numpy(np.array([[3, -1], [7, 99]], dtype=np.int32))  # -1 and 99 are ignored
    logits = gp.from_numpy(x)
    got = sample(logits, temperature=0.0, repetition_penalty=2.0, prev_tokens=prev).to_numpy()
    assert got.tolist() == [4, 8]
    plain = sample(logits, temperature=0.0, repetition_penalty=1.0, prev_tokens=prev).to_numpy()
    assert plain.tolist() == [3, 7]


def test_draws_follow_the_inverse_cdf(
    rand: Callable[..., np.ndarray], rng: np.random.Generator
) -> None:
    """Each row's token is the inverse CDF (index order) of its Philox uniform."""
    x = rand((64, 40), np.float32)
    seed = int(rng.integers(0, 2**63))
    got = sample(gp.from_numpy(x), temperature=0.9, top_k=20, top_p=0.8, generator=Generator(seed))
    u = uniforms(seed, 0, 64).astype(np.float64) / 2.0**64
    for r, token in enumerate(got.to_numpy()):
        cdf = np.cumsum(probs_ref(x[r], 0.9, 20, 0.8))
        assert token == min(int(np.searchsorted(cdf, u[r] * cdf[-1], side="right")), 39)


def test_fixed_seed_reproduces(rand: Callable[..., np.ndarray], rng: np.random.Generator) -> None:
    logits = gp.from_numpy(rand((32, 1000), np.float32) * 0.1)
    seed = int(rng.integers(0, 2**63))
    a = sample(logits, generator=Generator(seed)).to_numpy()
    b = sample(logits, generator=Generator(seed)).to_numpy()
    g = Generator(seed)
    first, second = sample(logits, generator=g).to_numpy(), sample(logits, generator=g).to_numpy()
    assert a.tolist() == b.tolist() == first.tolist()
    assert (
        second.tolist() != first.tolist()
    )  # the offset advanced (32 rows of ~flat 1000-way draws)


@pytest.mark.parametrize("dtype", DTYPES)
def test_top_k_stays_in_top_k(
    rand: Callable[..., np.ndarray], rng: np.random.Generator, dtype: object
) -> None:
    x = rand((256, 200), dtype) * 0.2  # flat-ish: without the filter most draws leave the top k
    logits, g = gp.from_numpy(x), Generator(int(rng.integers(0, 2**63)))
    # Ties at the 7th largest value are kept (documented); half precision makes them common.
    kth = np.sort(x.astype(np.float64), axis=1)[:, -7]
    for _ in range(4):
        got = sample(logits, top_k=7, generator=g).to_numpy()
        assert all(x[r, t] >= kth[r] for r, t in enumerate(got))


@pytest.mark.parametrize("top_p", [0.0, 0.3, 0.9])
def test_top_p_stays_in_the_nucleus(
    rand: Callable[..., np.ndarray], rng: np.random.Generator, top_p: float
) -> None:
    x = rand((128, 300), np.float32) * 0.5
    logits, g = gp.from_numpy(x), Generator(int(rng.integers(0, 2**63)))
    # Allowed: the smallest set reaching top_p, plus a margin for float rounding at its edge.
    allowed = [set(np.flatnonzero(probs_ref(row, top_p=min(top_p + 1e-6, 1.0)))) for row in x]
    hits = 0
    for _ in range(4):
        got = sample(logits, top_p=top_p, generator=g).to_numpy()
        assert all(int(t) in allowed[r] for r, t in enumerate(got))
        hits += sum(len(allowed[r]) > 1 for r in range(len(got)))
    assert top_p == 0.0 or hits > 0  # the filter was not trivially a single token


def test_min_p_is_respected(rand: Callable[..., np.ndarray], rng: np.random.Generator) -> None:
    x = rand((128, 300), np.float32) * 0.5
    logits, g = gp.from_numpy(x), Generator(int(rng.integers(0, 2**63)))
    p = np.exp(x - x.max(axis=1, keepdims=True))
    for _ in range(4):
        got = sample(logits, min_p=0.2, generator=g).to_numpy()
        assert all(p[r, t] >= 0.2 * (1 - 1e-6) for r, t in enumerate(got))


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_frequencies_match_softmax(rng: np.random.Generator, temperature: float) -> None:
    row = rng.standard_normal(10).astype(np.float32)
    draws = 20000
    logits = gp.from_numpy(np.tile(row, (draws, 1)))  # one draw per row: independent counters
    got = sample(logits, temperature=temperature, generator=Generator(int(rng.integers(2**63))))
    counts = np.bincount(got.to_numpy(), minlength=10)
    assert chi2(counts, probs_ref(row, temperature)) < CHI2_LIMIT[9]
    # The same draws against the distribution at temperature 1.0 vs 0.6: the wrong one fails.
    other = probs_ref(row, 1.6 - temperature)
    assert chi2(counts, other) > CHI2_LIMIT[9]


def test_penalty_frequencies(rng: np.random.Generator) -> None:
    row = rng.standard_normal(16).astype(np.float32)
    row[2], row[5] = 1.5, -0.7  # one positive and one negative penalized logit
    prev = [2, 5, 5, -1]
    draws = 20000
    logits = gp.from_numpy(np.tile(row, (draws, 1)))
    prev_tokens = gp.from_numpy(np.tile(np.array(prev, dtype=np.int32), (draws, 1)))
    got = sample(
        logits,
        repetition_penalty=1.8,
        prev_tokens=prev_tokens,
        generator=Generator(int(rng.integers(2**63))),
    )
    counts = np.bincount(got.to_numpy(), minlength=16)
    assert chi2(counts, probs_ref(row, penalty=1.8, prev=[2, 5])) < CHI2_LIMIT[15]
    assert chi2(counts, probs_ref(row)) > CHI2_LIMIT[15]


def test_per_row_parameters(rand: Callable[..., np.ndarray], rng: np.random.Generator) -> None:
    x = rand((4, 100), np.float32) * 0.2
    temps = gp.from_numpy(np.array([0.0, 1.0, 1.0, 0.0], dtype=np.float32))
    ks = gp.from_numpy(np.array([0, 1, 3, 0], dtype=np.int32))
    ps = gp.from_numpy(np.array([1.0, 1.0, 1.0, 0.5], dtype=np.float32))
    g = Generator(int(rng.integers(2**63)))
    order = np.argsort(-x.astype(np.float64), axis=1, kind="stable")
    for _ in range(10):
        got = sample(gp.from_numpy(x), temperature=temps, top_k=ks, top_p=ps, generator=g)
        t = got.to_numpy()
        assert t[0] == order[0, 0] and t[1] == order[1, 0] and t[3] == order[3, 0]
        assert t[2] in order[2, :3]


def test_errors(rand: Callable[..., np.ndarray]) -> None:
    logits = gp.from_numpy(rand((2, 10), np.float32))
    cases: list[tuple[type[Exception], str, dict[str, object]]] = [
        (ValueError, "temperature must be", {"temperature": -1.0}),
        (TypeError, "top_k must be an int", {"top_k": 2.5}),
        (ValueError, "top_k must be", {"top_k": -1}),
        (ValueError, "top_p must be", {"top_p": 1.5}),
        (ValueError, "min_p must be", {"min_p": -0.1}),
        (ValueError, "repetition_penalty must be > 0", {"repetition_penalty": 0.0}),
        (TypeError, "repetition_penalty must be a number", {"repetition_penalty": logits}),
        (TypeError, "temperature must have dtype", {"temperature": gp.zeros((2,), gp.int32)}),
        (ValueError, "top_k must have shape", {"top_k": gp.zeros((3,), gp.int32)}),
        (TypeError, "prev_tokens must have dtype", {"prev_tokens": gp.zeros((2, 3), np.float32)}),
        (ValueError, "prev_tokens must be", {"prev_tokens": gp.zeros((3, 3), gp.int32)}),
        (TypeError, "generator must be", {"generator": np.random.default_rng()}),
    ]
    for exc, match, kwargs in cases:
        with pytest.raises(exc, match=match):
            sample(logits, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must be 2-D"):
        sample(gp.from_numpy(rand((10,), np.float32)))
    with pytest.raises(TypeError, match="logits must have dtype"):
        argmax(gp.from_numpy(rand((2, 10), np.int32)))
    with pytest.raises(ValueError, match="empty vocabulary"):
        argmax(gp.zeros((2, 0), np.float32))
    big = gp.zeros((1, MAX_PENALTY_VOCAB + 1), np.float32)
    with pytest.raises(ValueError, match="repetition penalty supports"):
        sample(big, repetition_penalty=1.2, prev_tokens=gp.zeros((1, 1), gp.int32))


def test_benchmark_suite_smoke() -> None:
    """The ops_sampling suite's cases run and pass their checks on this backend."""
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.harness import HarnessConfig, measure
    from pygpukit.benchmark.peers import PyGPUkitLibrary
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.ops.benchmarks import sampling as suite

    rng = np.random.default_rng()
    ctx = SuiteContext(PyGPUkitLibrary.backend_name(gp), True, DataCache(rng), rng, sizes=[500])
    cfg = HarnessConfig(max_reps=2, min_reps=1, budget_s=0.05, warmup_s=0.0, target_rep_ms=0.1)
    lib = PyGPUkitLibrary()
    results = [measure(case, lib, cfg) for case in suite.SUITE.cases(ctx)]
    assert [r.status for r in results] == ["ok"] * 3, [r.reason for r in results]
