"""The serving engine on the GPU: the real SmolLM2 in bfloat16, 16 concurrent requests with
chunked prefill, prefix sharing and preemption, each equal to CausalLM's greedy answer; the
paged cache charged to a scheduler partition and its blocks all returned."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import llm
from pygpukit.llm.engine import Engine, RequestParams
from pygpukit.llm.engine.paged_cache import block_bytes

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return llm.load(smollm2_path, dtype="bfloat16", max_seq_len=512, progress=False)


def _prompts(smollm2) -> list[list[int]]:
    """Eight chats sharing a system prompt and eight random prompts of 20 to 300 tokens."""
    tok = smollm2.tokenizer
    system = {"role": "system", "content": "You answer in one short sentence."}
    questions = ["What is the capital of France?", "Name a primary color.", "What is 3 + 4?",
                 "Who wrote Hamlet?", "What is water made of?", "Name a planet.",
                 "What do bees make?", "How many legs has a spider?"]  # fmt: skip
    prompts = [tok.encode(tok.apply_chat_template([system, {"role": "user", "content": q}],
                                                  add_generation_prompt=True),
                          add_special_tokens=False) for q in questions]  # fmt: skip
    rng = np.random.default_rng()
    prompts += [rng.integers(100, 40000, int(rng.integers(20, 300))).tolist() for _ in range(8)]
    return prompts


# Seen on an H200 with the real model: the default engine's batched step (16-row tensor-core
# GEMMs) rounds unlike generate's one-row fused GEMVs, and one answer in eight took another
# token after 16 equal ones. Token-for-token equality is the batch-invariant mode's (below).
@pytest.mark.xfail(
    reason="the default engine's batched bfloat16 GEMMs round unlike generate's one-row GEMVs "
    "(batch_invariant=True is the exact mode)",
    strict=False,
)
def test_concurrent_greedy_answers_equal_generate(smollm2):
    prompts = _prompts(smollm2)
    refs = [smollm2.generate(p, max_new_tokens=24).token_ids for p in prompts]
    per_block = block_bytes(smollm2.config, smollm2.decoder.model.dtype)
    # 40 blocks: fewer than the 16 requests need at once, so some wait and some are preempted.
    engine = Engine(smollm2, kv_memory=40 * per_block, max_batch=16, max_batched_tokens=128)
    got: list[list[int]] = [[] for _ in prompts]
    for i, p in enumerate(prompts):
        engine.submit(p, RequestParams(max_tokens=24), lambda o, i=i: got[i].extend(o.token_ids))
    while engine.step() or engine.has_work():
        pass
    assert got == refs
    assert engine.metrics.prefix_hit_blocks > 0
    assert engine.blocks.used == 0


def test_batch_invariant_greedy_answers_equal_generate(smollm2):
    """16 requests, 48 tokens each, through the batch-invariant engine with too few KV blocks
    (some wait, some are preempted and recomputed): every answer is generate's, token for
    token (generate's fused step with its one-launch attention: a 512-token cache)."""
    assert smollm2.decoder.fused is not None and smollm2.decoder.fused.single_pass
    prompts = _prompts(smollm2)
    refs = [smollm2.generate(p, max_new_tokens=48).token_ids for p in prompts]
    per_block = block_bytes(smollm2.config, smollm2.decoder.model.dtype)
    engine = Engine(smollm2, kv_memory=40 * per_block, max_batch=16, max_batched_tokens=128,
                    batch_invariant=True)  # fmt: skip
    got: list[list[int]] = [[] for _ in prompts]
    for i, p in enumerate(prompts):
        engine.submit(p, RequestParams(max_tokens=48), lambda o, i=i: got[i].extend(o.token_ids))
    while engine.step() or engine.has_work():
        pass
    assert got == refs
    assert engine.metrics.preemptions > 0
    assert engine.blocks.used == 0


def test_the_cache_is_charged_to_the_partition(smollm2):
    from pygpukit.scheduler import PartitionLimits, Scheduler

    with Scheduler(total_memory="2GiB") as sched:
        part = sched.create_partition("serve", limits=PartitionLimits().memory("512MiB"))
        before = part.usage()["memory_allocated"]
        engine = Engine(smollm2, kv_memory="64MiB", partition=part)
        assert part.usage()["memory_allocated"] - before >= engine.cache.nbytes
        out = engine.generate([1, 2, 3, 4], RequestParams(max_tokens=4))
        assert len(out.token_ids) == 4
        del engine
        gp.synchronize()


def test_graph_replayed_decode_equals_the_eager_padded_step(smollm2):
    """The same padded decode steps, replayed as CUDA graphs and run eagerly: same tokens."""
    rng = np.random.default_rng()
    prompts = [rng.integers(100, 40000, int(rng.integers(5, 200))).tolist() for _ in range(21)]
    answers = []
    for graphs in (True, False):
        engine = Engine(smollm2, kv_memory="256MiB", max_batch=32, cuda_graphs=graphs)
        got: list[list[int]] = [[] for _ in prompts]
        for i, p in enumerate(prompts):
            params = RequestParams(max_tokens=int(10 + i), ignore_eos=True)
            engine.submit(p, params, lambda o, out=got[i]: out.extend(o.token_ids))
        while engine.step() or engine.has_work():
            pass
        assert (engine.decode.replays > 0) == graphs
        assert all(captured == graphs for _, _, captured in engine.decode.shapes())
        answers.append(got)
    assert answers[0] == answers[1]
