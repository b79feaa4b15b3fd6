"""The engine's bucketed decode steps: padded to a batch-size bucket (replayed as CUDA graphs on
the GPU), they give the flattened step's logits for the real rows, whatever the padding."""

from __future__ import annotations

import numpy as np
import pytest
from serve_models import TEST_DTYPE, write_tiny_model

from pygpukit import llm
from pygpukit.llm.engine import Engine, RequestParams
from pygpukit.llm.engine.decode_graphs import (
    BATCH_BUCKETS,
    MIXED_ROW_BUCKETS,
    DecodeGraphs,
    _PagedAttend,
    batch_bucket,
    row_bucket,
    table_width,
)
from pygpukit.llm.engine.paged_cache import BLOCK_SIZE, block_bytes
from pygpukit.llm.engine.runner import ScheduledChunk, build_inputs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("tiny-graphs"))
    return llm.load(path, dtype=TEST_DTYPE, max_seq_len=256, progress=False)


def test_buckets_and_table_widths():
    assert BATCH_BUCKETS == (1, 16, 32, 64)
    assert [batch_bucket(n) for n in (1, 2, 9, 16, 17, 33, 64)] == [1, 16, 16, 16, 32, 64, 64]
    assert batch_bucket(BATCH_BUCKETS[-1] + 1) is None
    assert [table_width(b) for b in (1, 16, 17, 33, 100)] == [16, 16, 32, 64, 128]
    assert [row_bucket(n) for n in (2, 16, 17, 65, 129, 256)] == [16, 16, 32, 128, 256, 256]
    assert row_bucket(MIXED_ROW_BUCKETS[-1] + 1) is None


def test_bucketed_decode_logits_equal_the_flattened_step(tiny):
    """Every step is computed twice (flattened, then padded) and compared: decode-only ones and
    mixed ones (prompt chunks expanded into rows beside the decode rows)."""
    per_block = block_bytes(tiny.config, tiny.decoder.model.dtype)
    # No lookahead: the flattened step needs every row's token on the host.
    engine = Engine(
        tiny, kv_memory=64 * per_block, max_batch=16, max_batched_tokens=64, lookahead=False
    )
    # The scratch block of the padding rows is the cache's last one, never handed out.
    assert engine.cache.num_blocks == engine.blocks.num_blocks + 1
    decode, compared, mixed = engine.decode.logits, [], []

    def checked(chunks):
        flat = engine.runner.logits(build_inputs(chunks, BLOCK_SIZE)).to_numpy()
        padded = decode(chunks).to_numpy()
        assert padded.shape == (len(chunks), tiny.config.vocab_size)
        padded = padded[[i for i, c in enumerate(chunks) if c.sample]]  # the runner's rows
        mixed.append(any(c.count > 1 for c in chunks) and any(c.count == 1 for c in chunks))
        if TEST_DTYPE == "float32":
            np.testing.assert_allclose(padded, flat, rtol=1e-5, atol=1e-5)
        else:  # bfloat16: GEMMs of another M round differently
            assert np.abs(padded - flat).max() <= 0.05 * np.abs(flat).max()
        compared.append(len(chunks))
        return decode(chunks)  # the keys and values written again are the same

    engine.decode.logits = checked
    rng = np.random.default_rng()
    # 11 requests, short prompts (all in within 3 steps; at least 66 tokens, so some ride
    # beside the first prompts' decode rows), answers 3 tokens apart (the longest 10 more):
    # they finish one after another, from 11 rows (bucket 16) down to 1.
    lengths = 6 + 3 * rng.permutation(11)
    lengths[lengths.argmax()] += 10
    outs: dict[int, list[int]] = {}
    for i, n in enumerate(lengths.tolist()):
        prompt = rng.integers(3, 259, int(rng.integers(6, 13))).tolist()
        params = RequestParams(max_tokens=n, ignore_eos=True)
        engine.submit(prompt, params, lambda o, i=i: outs.setdefault(i, []).extend(o.token_ids))
    while engine.step() or engine.has_work():
        pass
    assert set(compared) >= set(range(1, 12)) and {batch_bucket(n) for n in compared} == {1, 16}
    assert any(mixed)  # a later prompt rode beside decode rows
    assert [len(outs[i]) for i in range(11)] == lengths.tolist()
    assert engine.blocks.used == 0


def test_decode_steps_take_the_bucketed_path_and_keep_answers(tiny):
    rng = np.random.default_rng()
    prompts = [rng.integers(3, 259, int(rng.integers(3, 50))).tolist() for _ in range(5)]
    refs = [tiny.generate(p, max_new_tokens=12).token_ids for p in prompts]
    engine = Engine(tiny, kv_memory=64 * block_bytes(tiny.config, tiny.decoder.model.dtype))
    got: list[list[int]] = [[] for _ in prompts]
    for i, p in enumerate(prompts):
        engine.submit(p, RequestParams(max_tokens=12), lambda o, i=i: got[i].extend(o.token_ids))
    while engine.step() or engine.has_work():
        pass
    if TEST_DTYPE == "float32":  # bfloat16 GEMMs of a batch round unlike one-row GEMVs
        assert got == refs
    steps = engine.decode.replays + engine.decode.eager_steps
    assert steps >= 10  # every step after the prompts is decode-only
    if engine.decode.use_graphs:
        assert engine.decode.replays > 0
    else:
        assert engine.decode.replays == 0


def test_a_logprobs_request_in_a_bucketed_step(tiny):
    """Log-probabilities come from the padded step's rows: those of the model's forward."""
    rng = np.random.default_rng()
    prompts = [rng.integers(3, 259, 9).tolist() for _ in range(3)]
    engine = Engine(tiny, kv_memory=32 * block_bytes(tiny.config, tiny.decoder.model.dtype))
    outs: dict[int, list] = {}
    for i, p in enumerate(prompts):
        params = RequestParams(max_tokens=4, logprobs=3 if i == 1 else None, ignore_eos=True)
        engine.submit(p, params, lambda o, i=i: outs.setdefault(i, []).append(o))
    while engine.step() or engine.has_work():
        pass
    assert engine.decode.replays + engine.decode.eager_steps >= 3
    tokens = [t for o in outs[1] for t in o.token_ids]
    lps = [lp for o in outs[1] for lp in o.logprobs]
    logits = tiny.forward(np.asarray(prompts[1] + tokens)).to_numpy()[0].astype(np.float64)
    for i, lp in enumerate(lps):
        row = logits[len(prompts[1]) - 1 + i]
        ref = row - row.max() - np.log(np.exp(row - row.max()).sum())
        tol = 1e-4 if TEST_DTYPE == "float32" else 5e-2
        assert abs(lp.logprob - ref[lp.token_id]) < tol and len(lp.top) == 3


@pytest.mark.gpu
def test_fused_qkv_step_equals_the_split_step_bit_for_bit(tiny, monkeypatch):
    """The step's q/k/v straight from the projection (``ops.rope_kv_paged_write``, one kernel a
    layer) gives the logits and cache rows of the split + RoPE + paged-write path, bit for bit:
    the default engine's greedy answers do not move, for the prompt step (a mixed step of two
    prompt chunks) and the decode steps alike. (GPU only: on the CPU backend both paths are
    NumPy, compared at the op level in tests/ops/test_ops_rope_kv_paged.py.)"""
    per_block = block_bytes(tiny.config, tiny.decoder.model.dtype)
    engine = Engine(
        tiny, kv_memory=32 * per_block, max_batch=16, max_batched_tokens=64, lookahead=False
    )
    eager = DecodeGraphs(engine.decode.model, engine.cache, engine.decode.scratch, use_graphs=False)
    decode, compared = engine.decode.logits, []

    def bits(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a).view(np.uint8)

    def checked(chunks, **kwargs):
        fused = bits(eager.logits(chunks).to_numpy())
        cache = [bits(k.to_numpy()) for k in engine.cache.k + engine.cache.v]
        with monkeypatch.context() as m:
            m.delattr(_PagedAttend, "from_projection")  # back to split + RoPE + paged write
            split = bits(eager.logits(chunks).to_numpy())
        np.testing.assert_array_equal(fused, split)
        for before, k in zip(cache, engine.cache.k + engine.cache.v, strict=True):
            np.testing.assert_array_equal(before, bits(k.to_numpy()))  # rewritten the same
        compared.append(len(chunks))
        return decode(chunks, **kwargs)

    engine.decode.logits = checked
    rng = np.random.default_rng()
    for n in (2, 3):
        prompt = rng.integers(3, 259, int(rng.integers(3, 20))).tolist()
        engine.submit(prompt, RequestParams(max_tokens=n, ignore_eos=True), lambda o: None)
    while engine.step() or engine.has_work():
        pass
    assert compared == [2, 2, 1]  # both prompts in one mixed step, then two decode steps


def test_which_steps_the_bucketed_path_takes(tiny):
    """Decode-only steps of up to 64 requests; with prompt chunks, up to 256 token rows (more
    run on the flattened path), and none when mixed steps are off."""
    per_block = block_bytes(tiny.config, tiny.decoder.model.dtype)
    decode = Engine(tiny, kv_memory=8 * per_block).decode
    rng = np.random.default_rng()

    def step(*counts: int) -> list[ScheduledChunk]:
        return [ScheduledChunk(None, 0, c, sample=True) for c in counts]  # type: ignore[arg-type]

    n = int(rng.integers(1, 10))
    assert decode.accepts(step(*[1] * 64)) and not decode.accepts(step(*[1] * 65))
    assert decode.accepts(step(*[1] * n, 256 - n)) and not decode.accepts(step(*[1] * n, 257 - n))
    assert not decode.accepts(step(*[2] * 65)) and not decode.accepts([])
    decode.mixed = False
    assert decode.accepts(step(*[1] * n)) and not decode.accepts(step(*[1] * n, 2))


def test_a_bucketed_step_reads_nothing_back_to_the_host(tiny, monkeypatch):
    """What a CUDA graph captures must not copy to the host: a capture refuses it (a take that
    checked its indices on the host made every mixed step run eagerly). Each padded forward,
    decode-only and mixed, runs here with host reads made to fail."""
    from pygpukit.array import GPUArray

    per_block = block_bytes(tiny.config, tiny.decoder.model.dtype)
    engine = Engine(tiny, kv_memory=64 * per_block, max_batch=8, max_batched_tokens=64)
    forward, seen = engine.decode._forward, []

    def no_host_reads(*args, **kwargs):
        raise AssertionError("a padded step copied an array to the host")

    def guarded(shape):
        seen.append(shape.samples)
        with monkeypatch.context() as m:
            m.setattr(GPUArray, "to_numpy", no_host_reads)
            return forward(shape)

    engine.decode._forward = guarded
    rng = np.random.default_rng()
    outs: list[list[int]] = [[] for _ in range(6)]
    for i in range(6):  # the first three decode while the others' prompts come in beside them
        prompt = rng.integers(3, 259, int(rng.integers(6, 30))).tolist()
        params = RequestParams(max_tokens=5, ignore_eos=True)
        engine.submit(prompt, params, lambda o, out=outs[i]: out.extend(o.token_ids))
        if i >= 2:
            engine.step()
    while engine.step() or engine.has_work():
        pass
    assert 0 in seen and any(seen)  # decode-only and mixed steps both ran guarded
    assert all(len(o) == 5 for o in outs) and engine.blocks.used == 0


@pytest.mark.gpu
def test_mixed_steps_replay_captured_graphs_with_the_eager_steps_tokens(tiny):
    """Prompts arriving while others decode (a small prefill cap: many steps carry a prompt
    chunk beside decode rows), on the GPU: every mixed shape is captured and replayed, steps are
    queued ahead through them, and the tokens are those of the same padded steps run eagerly."""
    per_block = block_bytes(tiny.config, tiny.decoder.model.dtype)
    rng = np.random.default_rng()
    prompts = [rng.integers(3, 259, int(rng.integers(8, 60))).tolist() for _ in range(16)]
    cap = int(rng.integers(16, 40))
    answers = []
    for graphs in (True, False):
        engine = Engine(tiny, kv_memory=128 * per_block, max_batch=16, max_batched_tokens=128,
                        prefill_chunk=cap, cuda_graphs=graphs)  # fmt: skip
        got: list[list[int]] = [[] for _ in prompts]
        for i, p in enumerate(prompts):
            params = RequestParams(max_tokens=8 + i, ignore_eos=True)
            engine.submit(p, params, lambda o, out=got[i]: out.extend(o.token_ids))
            if i >= 3:
                engine.step()
        while engine.step() or engine.has_work():
            pass
        d = engine.decode
        assert d.mixed_eager_steps + d.mixed_replays > 0 and (d.mixed_replays > 0) == graphs
        if graphs:
            assert d.mixed_shapes() and all(captured for *_, captured in d.mixed_shapes())
            assert engine.lookahead_steps > 0
        assert engine.blocks.used == 0
        answers.append(got)
    assert answers[0] == answers[1]
    assert [len(a) for a in answers[0]] == [8 + i for i in range(len(prompts))]
