"""The serving engine on a tiny random model: continuous batching, chunked prefill, paged and
prefix-cached KV, preemption and per-request sampling all give CausalLM's answers."""

from __future__ import annotations

import numpy as np
import pytest
from serve_models import TEST_DTYPE, write_tiny_model

from pygpukit import llm
from pygpukit.llm.engine import (
    BlockManager,
    Engine,
    QueueFullError,
    RequestParams,
    block_hashes,
)
from pygpukit.llm.engine.paged_cache import BLOCK_SIZE, block_bytes
from pygpukit.llm.generate import SamplingParams

# On the GPU the tiny model runs in bfloat16 (the paged kernels take half types only). The
# default engine's batched step (tensor-core GEMMs of M rows, split decode attention) rounds
# unlike generate's one-row fused kernels: with random weights, whose logits have near-ties, one
# request in a dozen can take another token after ~20 steps (seen on an H200). Token-for-token
# equality there is what Engine(batch_invariant=True) guarantees; the default engine's tests
# that compare tokens with generate on the GPU are expected to fail now and then.
BATCH_VARIANT_ON_GPU = pytest.mark.xfail(
    TEST_DTYPE == "bfloat16",
    reason="the default engine's batched bfloat16 GEMMs round unlike generate's one-row GEMVs "
    "(batch_invariant=True is the exact mode)",
    strict=False,
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("tiny"))
    return llm.load(path, dtype=TEST_DTYPE, max_seq_len=256, progress=False)


def _kv(model, blocks: int) -> int:
    return blocks * block_bytes(model.config, model.decoder.model.dtype)


def _prompts(rng, n: int, lo: int = 3, hi: int = 70) -> list[list[int]]:
    # Token ids of bytes (3..258): random byte strings, lengths spread over several blocks.
    return [rng.integers(3, 259, size=int(rng.integers(lo, hi))).tolist() for _ in range(n)]


def _run_all(engine: Engine, jobs: list[tuple[list[int], RequestParams]]) -> list[list[int]]:
    """Submit every job at once and step the engine until all finish; tokens per job."""
    tokens: list[list[int]] = [[] for _ in jobs]
    finished: list[str | None] = [None] * len(jobs)

    def sink_for(i: int):
        def sink(out):
            tokens[i].extend(out.token_ids)
            if out.finish_reason is not None:
                finished[i] = out.finish_reason

        return sink

    for i, (prompt, params) in enumerate(jobs):
        engine.submit(prompt, params, sink_for(i))
    while engine.step() or engine.has_work():
        pass
    assert all(f in ("stop", "length") for f in finished), finished
    return tokens


# --- block manager -------------------------------------------------------------------------------


def test_block_manager_refcounts_prefixes_and_lru():
    bm = BlockManager(4, BLOCK_SIZE)
    a, b = bm.allocate(), bm.allocate()
    assert (bm.used, bm.available) == (2, 2)
    rng = np.random.default_rng()
    hashes = block_hashes(rng.integers(0, 1000, 2 * BLOCK_SIZE + 5).tolist(), BLOCK_SIZE)
    assert len(hashes) == 2
    bm.register(a, hashes[0])
    bm.register(b, hashes[1])
    assert bm.match_prefix(hashes) == [a, b]
    bm.take([a])  # a second request shares the first block
    bm.release([a, b])
    assert (bm.used, bm.cached) == (1, 1)  # b is cached, a still held
    bm.release([a])
    assert (bm.used, bm.cached, bm.available) == (0, 2, 4)
    # Fresh blocks come from the free list first, then the least recently released cached one:
    # b (released first, as the tail of its request) goes before a.
    fresh = [bm.allocate(), bm.allocate()]
    assert a not in fresh and b not in fresh
    assert bm.allocate() == b
    assert bm.match_prefix(hashes) == [a]  # b's prefix is forgotten, a's survives
    assert bm.allocate() == a and bm.match_prefix(hashes) == []
    with pytest.raises(RuntimeError, match="available"):
        bm.allocate()
    with pytest.raises(RuntimeError, match="released more often"):
        bm.release([a, a])


def test_block_hashes_cover_the_whole_prefix():
    rng = np.random.default_rng()
    t = rng.integers(0, 1000, 3 * BLOCK_SIZE).tolist()
    u = list(t)
    u[0] += 1  # differs in the first block only
    ht, hu = block_hashes(t, BLOCK_SIZE), block_hashes(u, BLOCK_SIZE)
    assert all(x != y for x, y in zip(ht, hu, strict=True))  # later blocks differ too
    assert block_hashes(t[: 2 * BLOCK_SIZE + 3], BLOCK_SIZE) == ht[:2]


# --- the engine ----------------------------------------------------------------------------------


@pytest.mark.parametrize("invariant", [pytest.param(False, marks=BATCH_VARIANT_ON_GPU), True])
def test_concurrent_greedy_equals_generate_with_chunks_and_preemption(tiny, tiny_bf16, invariant):
    """Batch-invariant: prompts whole (over the 40-token budget: alone), a preempted request
    recomputed as first computed (prompt whole, then its tokens one a step)."""
    if invariant:
        tiny = tiny_bf16
    rng = np.random.default_rng()
    prompts = _prompts(rng, 12, 3, 60)
    prompts[0] = _prompts(rng, 1, 55, 56)[0]  # over the budget of 40 tokens
    max_tokens = [int(rng.integers(20, 40)) for _ in prompts]
    refs = [
        tiny.generate(p, max_new_tokens=m).token_ids
        for p, m in zip(prompts, max_tokens, strict=False)
    ]
    # 14 blocks of 16 tokens cannot hold 12 requests of up to 99 tokens: requests wait for
    # admission, and those admitted outgrow the cache, so some are preempted and recomputed;
    # prefill comes in chunks of at most 40 tokens.
    engine = Engine(tiny, kv_memory=_kv(tiny, 14), max_batch=8, max_batched_tokens=40,
                    batch_invariant=invariant)  # fmt: skip
    steps: list[list[tuple[int, int, int, bool]]] = []  # (prompt length, start, count, sample)
    after_step = engine.planner.after_step

    def recorded(plan):  # every step that ran, planned from the host or queued ahead
        steps.append([(len(c.request.prompt_ids), c.start, c.count, c.sample)
                      for c in plan.chunks])  # fmt: skip
        return after_step(plan)

    engine.planner.after_step = recorded
    got = _run_all(
        engine,
        [(p, RequestParams(max_tokens=m)) for p, m in zip(prompts, max_tokens, strict=False)],
    )
    assert got == refs
    assert engine.metrics.preemptions > 0
    assert engine.metrics.steps > max(max_tokens)  # interleaved, not one request at a time
    chunks = [c for step in steps for c in step]
    if invariant:  # whole prompts (some over the budget of 40), then one token a step
        assert all(c[1:3] == (0, c[0]) or (c[1] >= c[0] and c[2] == 1) for c in chunks)
        assert any(c[1] == 0 and c[2] > 40 for c in chunks)
        assert any(c[1] > 0 and not c[3] for c in chunks)  # a preempted request's known tokens
        assert all(sum(c[1] == 0 for c in step) <= 1 or sum(c[2] for c in step) <= 40
                   for step in steps)  # fmt: skip
    else:
        assert any(c[2] > 1 and c[1] > 0 for c in chunks)  # a prompt continued in a chunk
    assert engine.blocks.used == 0 and engine.stats()["running"] == 0


@BATCH_VARIANT_ON_GPU
def test_prefill_capped_beside_decode_rows_keeps_greedy_answers(tiny):
    """Prompts arriving while others decode are prefilled ``prefill_chunk`` tokens a step
    (every decode row still runs); the answers are generate's."""
    rng = np.random.default_rng()
    cap = int(rng.integers(5, 12))
    prompts = _prompts(rng, 4, 24, 40)
    refs = [tiny.generate(p, max_new_tokens=8).token_ids for p in prompts]
    engine = Engine(tiny, kv_memory=_kv(tiny, 64), max_batch=8, max_batched_tokens=48,
                    prefill_chunk=cap)  # fmt: skip
    steps: list[tuple[int, int]] = []  # (decode rows, prompt tokens)
    after_step = engine.planner.after_step

    def recorded(plan):
        # Every step that ran, planned from the host or queued ahead. A row whose token is its
        # request's last one to compute decodes (a prompt's last token too: it costs a step
        # what a decode row costs).
        decode = [c for c in plan.chunks if c.count == 1 and c.sample]
        steps.append((len(decode), sum(c.count for c in plan.chunks) - len(decode)))
        return after_step(plan)

    engine.planner.after_step = recorded
    assert _run_all(engine, [(p, RequestParams(max_tokens=8)) for p in prompts]) == refs
    assert steps[0] == (0, 48)  # nothing decodes yet: the whole budget
    assert all(prompt <= cap for rows, prompt in steps if rows)
    assert sum(prompt for rows, prompt in steps if rows) > 0  # prompts rode beside decode rows
    assert engine.blocks.used == 0


def _invariant_tiny(path_factory):
    # bfloat16 on every backend: the batch-invariant step runs the fused one-token kernels'
    # twins, which take half types (the CPU backend runs their references).
    path = write_tiny_model(path_factory.mktemp("tiny_bf16"))
    return llm.load(path, dtype="bfloat16", max_seq_len=256, progress=False)


@pytest.fixture(scope="module")
def tiny_bf16(tmp_path_factory):
    return _invariant_tiny(tmp_path_factory)


def test_batch_invariant_greedy_equals_generate_at_every_batch_size(tiny_bf16):
    """40 requests of mixed lengths and lengths of answer, joining and leaving: the decode
    batch crosses the 1, 16, 32 and 64 buckets, and every answer is generate's, token for
    token (bitwise logits on the GPU: the same kernels' arithmetic per row)."""
    model = tiny_bf16
    rng = np.random.default_rng()
    prompts = _prompts(rng, 40, 1, 90)
    max_tokens = [int(rng.integers(1, 48)) for _ in prompts]
    refs = [model.generate(p, max_new_tokens=m).token_ids
            for p, m in zip(prompts, max_tokens, strict=True)]  # fmt: skip
    engine = Engine(model, kv_memory=_kv(model, 400), max_batch=64, max_batched_tokens=96,
                    batch_invariant=True)  # fmt: skip
    jobs = [(p, RequestParams(max_tokens=m)) for p, m in zip(prompts, max_tokens, strict=True)]
    got = _run_all(engine, jobs[:30])  # prompts join over several steps (budget 96)
    assert got == refs[:30]
    # The rest one at a time: bucket 1 only.
    for (p, params), ref in zip(jobs[30:], refs[30:], strict=True):
        assert list(engine.generate(p, params).token_ids) == ref
    buckets = {b for b, _, _ in engine.decode.shapes()}
    assert {1, 16, 32} <= buckets
    assert engine.blocks.used == 0 and engine.metrics.prefix_hit_blocks == 0


def test_batch_invariant_answers_do_not_depend_on_the_neighbours(tiny_bf16):
    """The same request alone and among 63 others (random lengths, sampled and greedy):
    the same tokens and the same logprobs, bit for bit."""
    model = tiny_bf16
    rng = np.random.default_rng()
    probe = _prompts(rng, 1, 20, 40)[0]
    params = RequestParams(max_tokens=24, logprobs=2, ignore_eos=True)
    alone = Engine(model, kv_memory=_kv(model, 16), batch_invariant=True).generate(probe, params)
    engine = Engine(model, kv_memory=_kv(model, 600), max_batch=64, max_batched_tokens=512,
                    batch_invariant=True)  # fmt: skip
    outs: list = []
    others = [
        (
            p,
            RequestParams(
                max_tokens=int(rng.integers(8, 40)),
                ignore_eos=True,
                sampling=SamplingParams(temperature=0.8, seed=int(s)),
            ),
        )
        for p, s in zip(_prompts(rng, 63, 1, 80), rng.integers(0, 2**31, 63), strict=True)
    ]
    for p, prm in others[:40]:
        engine.submit(p, prm, lambda o: None)
    engine.submit(probe, params, outs.append)
    for p, prm in others[40:]:
        engine.submit(p, prm, lambda o: None)
    while engine.step() or engine.has_work():
        pass
    tokens = [t for o in outs for t in o.token_ids]
    assert tokens == list(alone.token_ids)
    lps = [(lp.token_id, lp.logprob, lp.top) for o in outs for lp in o.logprobs]
    assert lps == [(lp.token_id, lp.logprob, lp.top) for lp in alone.logprobs]
    assert 64 in {b for b, _, _ in engine.decode.shapes()}


def test_batch_invariant_mode_schedules_prompts_whole_and_refuses_prefix_caching(tiny_bf16):
    model = tiny_bf16
    with pytest.raises(ValueError, match="prefix"):
        Engine(model, kv_memory=_kv(model, 8), batch_invariant=True, prefix_caching=True)
    engine = Engine(model, kv_memory=_kv(model, 64), max_batched_tokens=16, batch_invariant=True)
    rng = np.random.default_rng()
    long_prompt, short = _prompts(rng, 1, 40, 41)[0], [5, 6, 7]
    ref = model.generate(long_prompt, max_new_tokens=4).token_ids
    got = _run_all(engine, [(long_prompt, RequestParams(max_tokens=4)),
                            (short, RequestParams(max_tokens=4))])  # fmt: skip
    assert got[0] == ref  # 40 tokens over a budget of 16: prefilled whole, alone
    assert got[1] == model.generate(short, max_new_tokens=4).token_ids


@BATCH_VARIANT_ON_GPU  # the default engine (prefix caching): a suffix's GEMMs of another M
def test_prefix_cache_shares_blocks_and_keeps_answers(tiny):
    rng = np.random.default_rng()
    system = rng.integers(3, 259, 3 * BLOCK_SIZE + 5).tolist()
    prompts = [system + q for q in _prompts(rng, 4, 2, 12)]
    refs = [tiny.generate(p, max_new_tokens=6).token_ids for p in prompts]
    engine = Engine(tiny, kv_memory=_kv(tiny, 64), max_batched_tokens=256)
    first = engine.generate(prompts[0], RequestParams(max_tokens=6))
    assert list(first.token_ids) == refs[0] and first.cached_tokens == 0
    got = _run_all(engine, [(p, RequestParams(max_tokens=6)) for p in prompts[1:]])
    assert got == refs[1:]
    assert engine.metrics.prefix_hit_blocks == 3 * 3  # three shared blocks, three requests
    # A prompt that is entirely cached still computes its last token (for its logits).
    again = engine.generate(prompts[0][: 3 * BLOCK_SIZE], RequestParams(max_tokens=3))
    assert list(again.token_ids) == tiny.generate(prompts[0][:48], max_new_tokens=3).token_ids
    assert again.cached_tokens == 2 * BLOCK_SIZE
    assert engine.blocks.used == 0 and engine.blocks.cached > 0


@pytest.mark.parametrize("invariant", [pytest.param(False, marks=BATCH_VARIANT_ON_GPU), True])
def test_seeded_sampling_matches_generate_whatever_the_batch(tiny, tiny_bf16, invariant):
    if invariant:
        tiny = tiny_bf16
    rng = np.random.default_rng()
    prompts = _prompts(rng, 4)
    seeds = rng.integers(0, 2**32, 4).tolist()
    kw = [dict(temperature=0.9, top_p=0.95, seed=seeds[0]), dict(temperature=1.3, top_k=20,
          seed=seeds[1]), dict(temperature=0.7, min_p=0.05, seed=seeds[2]),
          dict(temperature=0.0, repetition_penalty=1.3, seed=seeds[3])]  # fmt: skip
    refs = [
        tiny.generate(p, max_new_tokens=10, **k).token_ids
        for p, k in zip(prompts, kw, strict=False)
    ]
    engine = Engine(tiny, kv_memory=_kv(tiny, 64), max_batched_tokens=32,
                    batch_invariant=invariant)  # fmt: skip
    jobs = [(p, RequestParams(max_tokens=10, sampling=SamplingParams(**k)))
            for p, k in zip(prompts, kw, strict=False)]  # fmt: skip
    jobs.append((prompts[0], RequestParams(max_tokens=10)))  # a greedy neighbour
    got = _run_all(engine, jobs)
    assert got[:4] == refs


def test_text_stop_strings_and_eos_match_generate(tiny):
    engine = Engine(tiny, kv_memory=_kv(tiny, 32))
    ref = tiny.generate("hello there", max_new_tokens=30)
    out = engine.generate("hello there", RequestParams(max_tokens=30))
    assert (out.text, list(out.token_ids), out.finish_reason) == (
        ref.text, ref.token_ids, ref.finish_reason)  # fmt: skip
    stop = ref.text[3:5] if len(ref.text) >= 5 else ref.text[-1:]
    ref_s = tiny.generate("hello there", max_new_tokens=30, stop=[stop])
    out_s = engine.generate("hello there", RequestParams(max_tokens=30, stop=(stop,)))
    assert (out_s.text, out_s.finish_reason) == (ref_s.text, "stop")
    assert stop not in out_s.text


def test_logprobs_are_those_of_the_model(tiny):
    rng = np.random.default_rng()
    prompt = _prompts(rng, 1, 5, 20)[0]
    engine = Engine(tiny, kv_memory=_kv(tiny, 16))
    out = engine.generate(prompt, RequestParams(max_tokens=3, logprobs=5))
    ids = prompt + list(out.token_ids)
    logits = tiny.forward(np.asarray(ids)).to_numpy()[0].astype(np.float64)
    for i, lp in enumerate(out.logprobs):
        row = logits[len(prompt) - 1 + i]
        ref = row - row.max() - np.log(np.exp(row - row.max()).sum())
        assert lp.token_id == out.token_ids[i]
        assert TEST_DTYPE != "float32" or lp.token_id == int(ref.argmax())
        if TEST_DTYPE == "float32":  # bfloat16 rounds differently in forward's attention
            assert abs(lp.logprob - ref[lp.token_id]) < 1e-4
            assert [t for t, _ in lp.top] == np.argsort(-ref, kind="stable")[:5].tolist()
        else:
            assert abs(lp.logprob - ref[lp.token_id]) < 5e-2 and len(lp.top) == 5


def test_admission_queue_limit_abort_and_bad_prompts(tiny):
    engine = Engine(tiny, kv_memory=_kv(tiny, 8), max_queue=2, max_batch=1)
    outs: dict[str, list] = {}

    def sink(out):
        outs.setdefault(out.request_id, []).append(out)

    rng = np.random.default_rng()
    # No EOS: a random prompt's answer may start with the EOS id, and a request that ended
    # by itself cannot be aborted (its last output would say "stop").
    long = RequestParams(max_tokens=50, ignore_eos=True)
    a = engine.submit(_prompts(rng, 1)[0], long, sink)
    b = engine.submit(_prompts(rng, 1)[0], long, sink)
    with pytest.raises(QueueFullError, match="max-queue"):
        engine.submit([5, 6], RequestParams(max_tokens=5), sink)
    engine.step()
    engine.step()
    assert engine.blocks.used > 0 and engine.stats()["running"] == 1  # max_batch 1: b waits
    engine.abort(a)
    engine.abort(b)
    engine.step()
    assert outs[a][-1].finish_reason == "abort" and outs[b][-1].finish_reason == "abort"
    assert engine.blocks.used == 0 and not engine.has_work()
    with pytest.raises(ValueError, match="context"):
        engine.submit([7] * 300, RequestParams(), sink)
    with pytest.raises(ValueError, match="KV cache holds"):
        engine.submit([7] * 200, RequestParams(), sink)
    with pytest.raises(ValueError, match="empty"):
        engine.submit([], RequestParams(), sink)
    with pytest.raises(ValueError, match="token ids"):
        engine.submit([400], RequestParams(), sink)
    with pytest.raises(ValueError, match="max_tokens"):
        RequestParams(max_tokens=0)
    with pytest.raises(ValueError, match="logprobs"):
        RequestParams(logprobs=6)


def test_a_lone_request_that_outgrows_the_cache_ends_with_length(tiny):
    engine = Engine(tiny, kv_memory=_kv(tiny, 2))
    out = engine.generate([9] * 20, RequestParams(max_tokens=100, ignore_eos=True))
    assert out.finish_reason == "length" and len(out.token_ids) == 2 * BLOCK_SIZE - 20 + 1
    assert engine.blocks.used == 0


@pytest.mark.parametrize("invariant", [pytest.param(False, marks=BATCH_VARIANT_ON_GPU), True])
def test_engine_thread_and_partition(tiny, tiny_bf16, invariant):
    if invariant:
        tiny = tiny_bf16
    from pygpukit.scheduler import PartitionLimits, Scheduler

    with Scheduler(total_memory="256MiB") as sched:
        part = sched.create_partition("chat", limits=PartitionLimits().memory("64MiB"))
        engine = Engine(tiny, kv_memory=_kv(tiny, 16), partition=part,
                        batch_invariant=invariant)  # fmt: skip
        assert part.usage()["memory_allocated"] >= engine.cache.nbytes
        engine.start()
        ref = tiny.generate([11, 12, 13], max_new_tokens=5).token_ids
        assert list(engine.generate([11, 12, 13], RequestParams(max_tokens=5)).token_ids) == ref
        engine.shutdown()
        with pytest.raises(llm.LLMError, match="shut down"):
            engine.submit([1], RequestParams(), lambda out: None)


def test_prefill_warm_up_runs_each_power_of_two_step_and_gives_every_block_back(tiny):
    engine = Engine(tiny, kv_memory=_kv(tiny, 64), max_batched_tokens=256)
    steps: list[int] = []
    engine.step_observer = lambda times: steps.append(times.batch_tokens)
    engine.warm_up_prefill(seed=int(np.random.default_rng().integers(1 << 20)))
    assert {1 << k for k in range(9)} <= set(steps)  # 1, 2, 4, ... 256 prompt tokens a step
    assert engine.blocks.used == 0 and engine.stats()["running"] == 0
    prompt = np.random.default_rng().integers(3, 259, 20).tolist()
    out = engine.generate(prompt, RequestParams(max_tokens=5))
    assert list(out.token_ids) == tiny.generate(prompt, max_new_tokens=5).token_ids


def test_prefill_warm_up_stays_within_the_queue_and_batch_limits(tiny):
    engine = Engine(tiny, kv_memory=_kv(tiny, 64), max_batched_tokens=512, max_batch=1, max_queue=2)
    steps: list[int] = []
    engine.step_observer = lambda times: steps.append(times.batch_tokens)
    engine.warm_up_prefill()  # a 512-token step needs 3 prompts of this 256-token model: skipped
    assert max(steps) <= tiny.max_seq_len and engine.blocks.used == 0
