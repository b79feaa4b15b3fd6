"""CausalLM on the GPU: forward against the float64 NumPy model (float32 and bfloat16), the
graph-captured decode against forward, and a decode loop that neither waits nor allocates."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from llm_reference_numpy import CONFIGS, forward, rel_err

import pygpukit as gp
from pygpukit import llm, ops
from pygpukit.llm.random_model import random_weights

pytestmark = pytest.mark.gpu


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A fresh weights seed per test, recorded in the report."""
    value = secrets.randbits(32)
    request.node.user_properties.append(("weights_seed", value))
    return value


def _model(name, seed, dtype="float32", max_seq_len=128):
    w = random_weights(CONFIGS[name], seed)
    cfg = {**CONFIGS[name], "eos_token_id": None}
    return llm.CausalLM.from_weights(cfg, w, dtype=dtype, max_seq_len=max_seq_len), w


@pytest.mark.parametrize("name", sorted(CONFIGS))
@pytest.mark.parametrize(("dtype", "limit"), [("float32", 1e-4), ("bfloat16", 2e-2)])
def test_forward(name, dtype, limit, seed, rng):
    model, w = _model(name, seed, dtype)
    ids = rng.integers(3, 256, (2, 24))
    got = model.forward(ids)
    assert got.dtype == np.float32 and got.device.startswith("cuda")
    assert rel_err(got.to_numpy(), forward(CONFIGS[name], w, ids)) < limit


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_graph_decode_equals_forward(name, seed, rng):
    model, _ = _model(name, seed)
    prompt = rng.integers(3, 256, 8).tolist()
    got = model.generate(prompt, max_new_tokens=32).token_ids
    seq, ref = list(prompt), []
    for _ in range(32):
        ref.append(int(model.forward(np.array([seq])).to_numpy()[0, -1].argmax()))
        seq.append(ref[-1])
    assert got == ref


@pytest.mark.parametrize(
    "sampling",
    [llm.SamplingParams(), llm.SamplingParams(temperature=0.8, top_p=0.9, seed=3),
     llm.SamplingParams(temperature=0.7, repetition_penalty=1.3, seed=4)],
    ids=["greedy", "top_p", "penalty"],
)  # fmt: skip
def test_decode_steps_neither_wait_nor_allocate(sampling, seed, rng):
    model, _ = _model("qwen2_bias", seed, "bfloat16", max_seq_len=256)
    prompt = rng.integers(3, 256, 10).tolist()
    dec = model.decoder
    generator = None if sampling.greedy else ops.Generator(sampling.seed)
    dec.prefill(prompt, sampling, generator)
    dec.decode_step(sampling, generator)  # captures the graphs
    gp.synchronize()
    waits, allocs = gp.host_wait_count(), gp.memory.stats()["alloc_count"]
    for _ in range(64):
        dec.decode_step(sampling, generator)
    assert gp.host_wait_count() == waits, "a decode step waited for the GPU"
    assert gp.memory.stats()["alloc_count"] == allocs, "a decode step allocated"
    tokens = dec.history.to_numpy()[10 : 10 + 66].tolist()
    assert all(0 <= t < 256 for t in tokens)
    # The same run through generate (same seed: same draws) gives the same tokens.
    again = model.generate(
        prompt, max_new_tokens=66, temperature=sampling.temperature, top_p=sampling.top_p,
        repetition_penalty=sampling.repetition_penalty, seed=sampling.seed,
    )  # fmt: skip
    assert again.token_ids == tokens


@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graph"])
def test_decode_steps_make_no_plan(graphs, seed, rng):
    """The layers hold their plans: after the first step no op plan cache is even consulted."""
    from pygpukit.ops._plan import plan_caches

    def lookups():
        return sum(c.hits + c.misses for c in plan_caches().values())

    model, _ = _model("qwen3_qknorm", seed, "bfloat16", max_seq_len=256)
    dec, greedy = model.decoder, llm.SamplingParams()
    dec.use_graphs = graphs
    dec.prefill(rng.integers(3, 256, 10).tolist(), greedy, None)
    dec.decode_step(greedy)
    before = lookups()
    for _ in range(16):
        dec.decode_step(greedy)
    gp.synchronize()
    assert lookups() == before


@pytest.mark.parametrize("name", ["llama3_tied", "mistral_window", "qwen3_qknorm"])
@pytest.mark.parametrize(("dtype", "limit"), [("float32", 1e-5), ("bfloat16", 1e-2)])
def test_last_position_only_is_the_last_row(name, dtype, limit, seed, rng):
    """The prefill's trimmed last layer (the last query's attention, then one row through the
    output projection, the MLP and the final norm: GEMV kernels instead of the GEMM) gives the
    full pass's last row, to the rounding of the other summation order; the keys and values of
    every position are stored as the full pass stores them."""
    model, _ = _model(name, seed, dtype)
    m = model._model
    s = 40
    ids = gp.from_numpy(rng.integers(3, 256, (1, s)).astype(np.int32))
    positions = gp.from_numpy(np.arange(s, dtype=np.int32)[None, :])
    stored: dict[bool, list[np.ndarray]] = {True: [], False: []}
    rows = {}
    for trim in (False, True):

        def store(i, k, v, trim=trim):
            stored[trim] += [k.to_numpy(), v.to_numpy()]

        x = m.hidden_states(ids, positions, m.attend_uncached(store), last_position_only=trim)
        rows[trim] = x.to_numpy().astype(np.float64)
    assert rows[True].shape == (1, 1, m.config.hidden_size)
    assert rel_err(rows[True][:, 0], rows[False][:, -1]) < limit
    for a, b in zip(stored[True], stored[False], strict=True):
        np.testing.assert_array_equal(a, b)
