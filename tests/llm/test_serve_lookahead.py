"""The engine's lookahead: decode steps queued on the ids the previous step sampled on the device,
before the host reads them, give exactly the answers of steps planned from the host's tokens —
with requests ending by EOS, stop strings and length mid-batch, blocks filling up, seeded
sampling beside greedy rows, and aborts while a step is in flight."""

from __future__ import annotations

import numpy as np
import pytest
from serve_models import TEST_DTYPE, write_tiny_model

from pygpukit import llm
from pygpukit.llm.engine import Engine, RequestParams
from pygpukit.llm.engine.paged_cache import BLOCK_SIZE, block_bytes
from pygpukit.llm.generate import SamplingParams


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("tiny-lookahead"))
    return llm.load(path, dtype=TEST_DTYPE, max_seq_len=256, progress=False)


def _run(engine: Engine, jobs: list[tuple[list[int], RequestParams]]):
    """Submit every job, step to the end; per job its tokens, text and finish reason."""
    out = [{"tokens": [], "text": "", "reason": None} for _ in jobs]

    def sink_for(i: int):
        def sink(o):
            out[i]["tokens"] += list(o.token_ids)
            out[i]["text"] += o.text
            if o.finish_reason is not None:
                out[i]["reason"] = o.finish_reason

        return sink

    for i, (prompt, params) in enumerate(jobs):
        engine.submit(prompt, params, sink_for(i))
    while engine.step() or engine.has_work():
        pass
    return out


def _engine(model, lookahead: bool, blocks: int = 96) -> Engine:
    per_block = block_bytes(model.config, model.decoder.model.dtype)
    return Engine(model, kv_memory=blocks * per_block, max_batch=16, max_batched_tokens=256,
                  lookahead=lookahead, prefix_caching=False)  # fmt: skip


# On the GPU (bfloat16) a request that EOS ends keeps its row one step longer with lookahead:
# a last lone request can then run a step in the 16-row bucket (tensor-core GEMMs) where the
# planned step runs the one-row GEMV, which rounds differently. Rows of one bucket are equal.
@pytest.mark.xfail(
    TEST_DTYPE == "bfloat16",
    reason="the 1-row and 16-row buckets round differently (no batch-invariant kernels yet)",
    strict=False,
)
def test_lookahead_gives_the_answers_of_host_planned_steps(tiny, monkeypatch):
    rng = np.random.default_rng()
    prompts = [rng.integers(3, 259, int(rng.integers(5, 40))).tolist() for _ in range(10)]
    lengths = [int(rng.integers(10, 45)) for _ in prompts]
    # An "EOS" id that some greedy answers reach mid-way: a token of one answer made first.
    first = [(p, RequestParams(max_tokens=n, ignore_eos=True))
             for p, n in zip(prompts, lengths, strict=True)]  # fmt: skip
    plain = _run(_engine(tiny, False), first)
    eos = plain[0]["tokens"][len(plain[0]["tokens"]) // 2]
    monkeypatch.setattr(tiny, "eos_token_ids", frozenset({eos}))
    stop = plain[1]["text"][4:6] or None
    jobs = []
    for i, (p, n) in enumerate(zip(prompts, lengths, strict=True)):
        sampling = SamplingParams(temperature=0.9, top_p=0.9, seed=i) if i % 4 == 3 else None
        params = RequestParams(max_tokens=n, stop=(stop,) if i == 1 and stop else (),
                               sampling=sampling or SamplingParams())  # fmt: skip
        jobs.append((p, params))
    off = _engine(tiny, False)
    on = _engine(tiny, True)
    want, got = _run(off, jobs), _run(on, jobs)
    assert got == want
    assert off.lookahead_steps == 0 and on.lookahead_steps > sum(lengths) // (4 * len(prompts))
    assert any(r["reason"] == "stop" for r in want)  # some ended before their length
    assert on.blocks.used == 0 and not on.has_work()
    # Lookahead steps took the bucketed decode path like the others.
    assert on.decode.replays + on.decode.eager_steps == off.decode.replays + off.decode.eager_steps


def test_lookahead_across_block_boundaries_and_a_full_cache(tiny):
    rng = np.random.default_rng()
    # Prompts ending just before a block boundary: the first decode steps need a new block.
    prompts = [rng.integers(3, 259, BLOCK_SIZE * k - 1).tolist() for k in (1, 2, 3)]
    jobs = [(p, RequestParams(max_tokens=2 * BLOCK_SIZE + 3, ignore_eos=True)) for p in prompts]
    # 12 blocks: fewer than the three answers need at their ends, so lookahead meets an empty
    # free list and the planner preempts instead.
    want = _run(_engine(tiny, False, blocks=12), jobs)
    on = _engine(tiny, True, blocks=12)
    assert _run(on, jobs) == want
    assert on.lookahead_steps > 0 and on.metrics.preemptions > 0
    assert on.blocks.used == 0


def test_an_abort_while_a_step_is_in_flight(tiny):
    rng = np.random.default_rng()
    engine = _engine(tiny, True)
    outs: dict[str, list] = {}

    def sink(o):
        outs.setdefault(o.request_id, []).append(o)

    params = RequestParams(max_tokens=40, ignore_eos=True)
    ids = [engine.submit(rng.integers(3, 259, 9).tolist(), params, sink) for _ in range(3)]
    while engine.lookahead_steps < 3:
        engine.step()
    engine.abort(ids[1])
    while engine.step() or engine.has_work():
        pass
    assert outs[ids[1]][-1].finish_reason == "abort"
    assert [o.finish_reason for o in outs[ids[0]]][-1] == "length"
    assert sum(len(o.token_ids) for o in outs[ids[2]]) == 40
    assert engine.blocks.used == 0


# On the GPU (bfloat16) the new requests join one step later with lookahead (the step they
# would join is already queued), so the steps' row counts differ from the host-planned run's.
@pytest.mark.xfail(
    TEST_DTYPE == "bfloat16",
    reason="batches of other sizes round differently (no batch-invariant kernels here)",
    strict=False,
)
@pytest.mark.parametrize("mixed_graphs", [True, False], ids=["bucketed", "flattened"])
def test_requests_arriving_while_others_decode_join_a_step_queued_ahead(tiny, mixed_graphs):
    """New prompts ride in a step queued ahead on the device-side ids (decode rows first; the
    bucketed mixed step, or the flattened path), capped by the prefill chunk; the answers are
    those of host-planned steps, and the step after them is queued ahead too."""
    rng = np.random.default_rng()
    first = [rng.integers(3, 259, int(rng.integers(5, 20))).tolist() for _ in range(3)]
    later = [rng.integers(3, 259, int(rng.integers(5, 30))).tolist() for _ in range(4)]
    later[0] = rng.integers(3, 259, 30).tolist()  # longer than the cap: it goes on ahead
    params = RequestParams(max_tokens=12, ignore_eos=True)

    def run(engine: Engine) -> tuple[list[list[int]], list[tuple[int, int]]]:
        tokens: list[list[int]] = [[] for _ in first + later]
        mixed: list[tuple[int, int]] = []  # (decode rows, prompt tokens) of mixed lookahead steps
        going_on.clear()
        runner, decode = engine.runner.logits, engine.decode.logits

        def flattened(inputs, *, token_ids=None):
            if token_ids is not None:
                mixed.append((int(token_ids.shape[0]), len(inputs.ids) - token_ids.shape[0]))
            return runner(inputs, token_ids=token_ids)

        def bucketed(chunks, *, token_ids=None, **kwargs):
            rows = sum(c.count for c in chunks)
            if token_ids is not None and rows > len(chunks):
                mixed.append((int(token_ids.shape[0]), rows - token_ids.shape[0]))
                going_on.extend(0 < c.start < len(c.request.prompt_ids) for c in chunks)
            return decode(chunks, token_ids=token_ids, **kwargs)

        engine.runner.logits = flattened
        engine.decode.logits = bucketed
        engine.decode.mixed = mixed_graphs
        for i, p in enumerate(first):
            engine.submit(p, params, lambda o, i=i: tokens[i].extend(o.token_ids))
        for _ in range(3):  # the first prompts, then they decode
            engine.step()
        for i, p in enumerate(later, start=len(first)):
            engine.submit(p, params, lambda o, i=i: tokens[i].extend(o.token_ids))
            engine.step()
        while engine.step() or engine.has_work():
            pass
        return tokens, mixed

    per_block = block_bytes(tiny.config, tiny.decoder.model.dtype)
    cap = int(rng.integers(4, 12))
    going_on: list[bool] = []  # per chunk of a mixed step queued ahead: a prompt's next chunk

    def engine(lookahead: bool) -> Engine:
        return Engine(tiny, kv_memory=96 * per_block, max_batch=16, max_batched_tokens=256,
                      prefill_chunk=cap, lookahead=lookahead, prefix_caching=False)  # fmt: skip

    want, _ = run(engine(False))
    on = engine(True)
    got, mixed = run(on)
    assert got == want and all(len(t) == 12 for t in got)
    assert mixed and all(rows > 0 and 0 < prompt <= cap for rows, prompt in mixed)
    if mixed_graphs:  # the bucketed steps show their chunks: prompts went on ahead
        assert any(going_on)
    assert on.blocks.used == 0
