"""The step planner's stall-free prefill: while requests decode, a step's prompt tokens are
capped at ``prefill_chunk`` and every decode row still runs; with nothing decoding, prompts
take the whole step budget. Pure host logic: random arrivals, no model."""

from __future__ import annotations

import numpy as np
import pytest

from pygpukit.llm.engine import BlockManager, RequestParams
from pygpukit.llm.engine.planner import StepPlan, StepPlanner
from pygpukit.llm.engine.request import Request, RequestStatus

BLOCK = 16


def _request(rng: np.random.Generator, i: int, lo: int, hi: int, new: int) -> Request:
    prompt = rng.integers(3, 1000, int(rng.integers(lo, hi))).tolist()
    return Request(f"r{i}", prompt, RequestParams(max_tokens=new), lambda out: None, frozenset())


def _finish_step(planner: StepPlanner, plan: StepPlan, rng: np.random.Generator) -> list[Request]:
    """What the engine does after a step: computed counts, one sampled token a sampled chunk,
    finished requests out of the batch. Returns those that finished."""
    planner.after_step(plan)
    done = []
    for chunk in plan.chunks:
        r = chunk.request
        if chunk.sample and r.add(int(rng.integers(3, 1000))) is not None:
            planner.remove(r)
            r.status = RequestStatus.FINISHED
            done.append(r)
    return done


def _simulate(planner: StepPlanner, rng: np.random.Generator, arrivals: list[list[Request]]):
    """Run steps until every request of ``arrivals`` (step i's new requests) finishes.

    Yields ``(decoding rows before the step, prompt tokens left before the step, plan)``.
    """
    everyone = [r for wave in arrivals for r in wave]
    step = 0
    while any(r.status is not RequestStatus.FINISHED for r in everyone):
        if step < len(arrivals):
            planner.waiting.extend(arrivals[step])
        decoding = [r for r in planner.running if len(r.tokens) - r.num_computed == 1]
        prefilling = [r for r in planner.running if r not in decoding]
        prompt_left = sum(len(r.tokens) - r.num_computed for r in prefilling)
        prompt_left += sum(len(r.tokens) for r in planner.waiting)
        plan = planner.plan()
        yield decoding, prompt_left, plan
        _finish_step(planner, plan, rng)
        step += 1
        assert step < 10_000, "the planner stopped making progress"


def _prompt_tokens(plan: StepPlan, decoding: list[Request]) -> int:
    return sum(c.count for c in plan.chunks if c.request not in decoding)


@pytest.mark.parametrize("cap", [1, 24, 100])
def test_prefill_is_capped_while_requests_decode_and_whole_when_none_do(cap):
    rng = np.random.default_rng()
    budget = int(rng.integers(300, 600))
    planner = StepPlanner(BlockManager(4096, BLOCK), max_batch=64, max_batched_tokens=budget,
                          prefill_chunk=cap)  # fmt: skip
    # A burst on an idle planner (more prompt tokens than one step takes, the first prompt
    # whole in it), then arrivals now and then while the first ones decode.
    arrivals = [[_request(rng, i, 150, 250, int(rng.integers(2, 30))) for i in range(6)]]
    arrivals += [[_request(rng, 100 + i, 1, 90, int(rng.integers(2, 30)))]
                 if rng.random() < 0.3 else [] for i in range(60)]  # fmt: skip
    capped = whole = 0
    for decoding, prompt_left, plan in _simulate(planner, rng, arrivals):
        rows = {c.request: c for c in plan.chunks}
        # Every decoding request gets its token: prefill never stalls a stream.
        assert all(r in rows and rows[r].count == 1 for r in decoding)
        assert sum(c.count for c in plan.chunks) <= budget
        prompt = _prompt_tokens(plan, decoding)
        if decoding:
            assert prompt == min(cap, budget - len(decoding), prompt_left)
            capped += prompt_left > cap
        else:
            assert prompt == min(budget, prompt_left)
            whole += prompt_left > cap
    assert capped and whole  # both cases were met


def test_prompts_go_on_in_order_across_capped_steps():
    """A prompt split by the cap continues where its last chunk ended, and only its last
    chunk samples."""
    rng = np.random.default_rng()
    planner = StepPlanner(BlockManager(1024, BLOCK), max_batch=16, max_batched_tokens=512,
                          prefill_chunk=int(rng.integers(5, 20)))  # fmt: skip
    first = _request(rng, 0, 3, 8, 200)  # decodes all along
    later = [_request(rng, i, 60, 120, 3) for i in range(1, 4)]
    computed = {r: 0 for r in [first, *later]}
    for _, _, plan in _simulate(planner, rng, [[first], [], *[[r] for r in later]]):
        for c in plan.chunks:
            assert c.start == computed[c.request]
            computed[c.request] = c.start + c.count
            assert c.sample == (c.start + c.count == len(c.request.tokens))
    assert all(r.status is RequestStatus.FINISHED for r in computed)


def test_without_a_cap_prompts_take_what_the_decode_rows_leave():
    rng = np.random.default_rng()
    budget = int(rng.integers(100, 200))
    planner = StepPlanner(BlockManager(256, BLOCK), max_batch=8, max_batched_tokens=budget)
    first = _request(rng, 0, 3, 8, 50)
    planner.waiting.append(first)
    _finish_step(planner, planner.plan(), rng)  # its prompt; it decodes from now on
    long = _request(rng, 1, 300, 400, 2)
    planner.waiting.append(long)
    plan = planner.plan()
    assert [(c.request, c.count) for c in plan.chunks] == [(first, 1), (long, budget - 1)]


def test_whole_prompts_ignore_the_cap():
    """Batch-invariant planning computes every prompt in one chunk, cap or not."""
    rng = np.random.default_rng()
    planner = StepPlanner(BlockManager(256, BLOCK), max_batch=8, max_batched_tokens=256,
                          prefill_chunk=8, whole_prompts=True)  # fmt: skip
    first = _request(rng, 0, 3, 8, 50)
    planner.waiting.append(first)
    _finish_step(planner, planner.plan(), rng)
    second = _request(rng, 1, 30, 100, 2)
    planner.waiting.append(second)
    plan = planner.plan()
    assert [(c.request, c.count) for c in plan.chunks] == [
        (first, 1),
        (second, len(second.prompt_ids)),
    ]


def test_held_prompts_wait_at_most_the_hold_and_never_on_an_idle_batch():
    """``prefill_hold``: while requests decode, a lone waiting prompt that does not fill the
    chunk waits up to that many steps; enough prompt tokens, or a batch with nothing
    decoding, are admitted at once."""
    rng = np.random.default_rng()
    hold = int(rng.integers(1, 4))
    planner = StepPlanner(BlockManager(1024, BLOCK), max_batch=16, max_batched_tokens=512,
                          prefill_chunk=64)  # fmt: skip
    planner.prefill_hold = hold
    alone = _request(rng, 0, 10, 20, 100)
    planner.waiting.append(alone)
    plan = planner.plan()  # nothing decodes: admitted at once
    assert [c.request for c in plan.chunks] == [alone]
    _finish_step(planner, plan, rng)
    small = _request(rng, 1, 10, 20, 3)
    planner.waiting.append(small)
    for _ in range(hold):  # held: 10-19 tokens of a 64-token chunk
        plan = planner.plan()
        assert [c.request for c in plan.chunks] == [alone]
        _finish_step(planner, plan, rng)
    plan = planner.plan()
    assert [c.request for c in plan.chunks] == [alone, small]
    _finish_step(planner, plan, rng)
    big = _request(rng, 2, 70, 90, 3)  # fills the chunk: no wait
    planner.waiting.append(big)
    plan = planner.plan()
    assert big in [c.request for c in plan.chunks]


def test_prompts_going_on_ahead_keep_the_cap_and_never_overdraw_blocks(rng):
    """A step planned ahead of the host: a prompt left half done goes on within the cap (its
    chunk as ``plan`` makes it), admissions get what the cap leaves (and can be given back),
    and a shortage of free blocks takes nothing."""
    blocks = BlockManager(16, BLOCK)
    cap = int(rng.integers(20, 40))
    planner = StepPlanner(blocks, max_batch=8, max_batched_tokens=40, prefill_chunk=cap)
    # Over 80 tokens: after chunks of 40 and ``cap`` (at most 79 positions, 5 blocks), the
    # prompt's rest always needs a block more, which the shortage below must refuse.
    long = _request(rng, 0, 81, 90, 4)
    planner.waiting.append(long)
    first = planner.plan()  # nothing decodes: the budget is the limit
    assert [(c.start, c.count, c.sample) for c in first.chunks] == [(0, 40, False)]
    planner.after_step(first)
    # One decode row beside it: the prompt goes on, capped.
    going = planner.continue_prompts(1, [(long, 40)])
    assert going is not None and [(c.request, c.start, c.count) for c in going] == [(long, 40, cap)]
    assert len(long.blocks) * BLOCK >= 40 + cap and not going[0].sample
    newcomer = _request(rng, 9, 10, 20, 4)
    planner.waiting.append(newcomer)
    assert not planner.plan_admissions(1, cap).chunks  # the cap is spent
    admitted = planner.plan_admissions(1, cap - 5).chunks
    assert [(c.request, c.count) for c in admitted] == [(newcomer, 5)]
    planner.unadmit(admitted)
    assert list(planner.waiting) == [newcomer] and newcomer.blocks == []
    assert newcomer.status is RequestStatus.WAITING and newcomer not in planner.running
    hog = [blocks.allocate() for _ in range(blocks.available)]  # none left for the next chunk
    held = list(long.blocks)
    assert planner.continue_prompts(1, [(long, 40 + cap)]) is None
    assert long.blocks == held
    blocks.release(hog)
