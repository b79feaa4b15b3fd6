"""The engine's flattened step: prompt chunks that start their request attend by flash prefill
over their own keys and values, the other rows by paged decode attention; both give the logits
of paged decode attention over every row."""

from __future__ import annotations

import numpy as np
import pytest
from serve_models import TEST_DTYPE, write_tiny_model

from pygpukit import llm
from pygpukit.llm.engine import Engine, RequestParams
from pygpukit.llm.engine.paged_cache import block_bytes
from pygpukit.llm.engine.runner import build_inputs


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("tiny-runner"))
    return llm.load(path, dtype=TEST_DTYPE, max_seq_len=256, progress=False)


def test_fresh_chunks_by_flash_prefill_equal_paged_decode_attention(tiny):
    per_block = block_bytes(tiny.config, tiny.decoder.model.dtype)
    # Chunks of at most 48 tokens: long prompts continue over steps (not fresh then), new ones
    # join behind running requests' decode tokens.
    # Every step planned from the host (no token ids from the device), prompt chunks on the
    # flattened path tested here.
    engine = Engine(
        tiny, kv_memory=64 * per_block, max_batch=8, max_batched_tokens=48, lookahead=False
    )
    engine.decode.mixed = False
    runner, mixed = engine.runner, []
    assert runner.flash_prefill
    real = runner.logits

    def checked(inputs):
        runner.flash_prefill = False
        paged = real(inputs).to_numpy()
        runner.flash_prefill = True
        got = real(inputs)
        flash = got.to_numpy()
        if TEST_DTYPE == "float32":
            np.testing.assert_allclose(flash, paged, rtol=1e-4, atol=1e-4)
        else:
            assert np.abs(flash - paged).max() <= 0.05 * np.abs(paged).max()
        if inputs.fresh and inputs.fresh_from > 0:
            mixed.append(inputs.fresh)
        return got

    runner.logits = checked
    rng = np.random.default_rng()
    outs: dict[int, list[int]] = {}
    for i in range(8):
        prompt = rng.integers(3, 259, int(rng.integers(2, 70))).tolist()
        engine.submit(prompt, RequestParams(max_tokens=int(rng.integers(3, 9)), ignore_eos=True),
                      lambda o, i=i: outs.setdefault(i, []).extend(o.token_ids))  # fmt: skip
    while engine.step() or engine.has_work():
        pass
    assert mixed  # steps with decode or continued rows first and fresh chunks behind them
    assert len(outs) == 8 and engine.blocks.used == 0


def test_build_inputs_marks_the_trailing_fresh_chunks(tiny):
    from pygpukit.llm.engine.request import Request
    from pygpukit.llm.engine.runner import ScheduledChunk

    def req(n: int, blocks: list[int]) -> Request:
        r = Request("r", list(range(3, 3 + n)), RequestParams(), lambda o: None, frozenset())
        r.blocks = blocks
        return r

    a, b, c = req(20, [0, 1]), req(5, [2]), req(9, [3])
    chunks = [ScheduledChunk(a, 19, 1, True), ScheduledChunk(b, 0, 5, True),
              ScheduledChunk(c, 0, 9, True)]  # fmt: skip
    inputs = build_inputs(chunks, 16)
    assert inputs.fresh == ((1, 5), (6, 9)) and inputs.fresh_from == 1
    # A fresh chunk followed by a continued one is not trailing: decode attention for it.
    inputs = build_inputs([chunks[1], chunks[0]], 16)
    assert inputs.fresh == () and inputs.fresh_from == 6


def test_fresh_groups_merge_consecutive_chunks_of_one_length():
    from pygpukit.llm.engine.runner import fresh_groups

    assert fresh_groups(()) == ()
    assert fresh_groups(((3, 8), (11, 8), (19, 8))) == ((3, 8, 3),)
    assert fresh_groups(((0, 8), (8, 5), (13, 5), (18, 8))) == ((0, 8, 1), (8, 5, 2), (18, 8, 1))


def test_equal_length_prompts_attend_as_one_batch_like_paged_decode_attention(tiny):
    per_block = block_bytes(tiny.config, tiny.decoder.model.dtype)
    engine = Engine(tiny, kv_memory=64 * per_block, max_batch=8, max_batched_tokens=256)
    engine.decode.mixed = False  # steps with prompt chunks on the flattened path tested here
    runner, groups = engine.runner, []
    real = runner.logits

    def checked(inputs):
        runner.flash_prefill = False
        paged = real(inputs).to_numpy()
        runner.flash_prefill = True
        got = real(inputs)
        flash = got.to_numpy()
        if TEST_DTYPE == "float32":
            np.testing.assert_allclose(flash, paged, rtol=1e-4, atol=1e-4)
        else:
            assert np.abs(flash - paged).max() <= 0.05 * np.abs(paged).max()
        groups.extend(inputs.fresh_groups)
        return got

    runner.logits = checked
    rng = np.random.default_rng()
    length = int(rng.integers(9, 40))
    outs: dict[int, list[int]] = {}
    for i in range(5):  # four of one length, then one shorter: two groups in one step
        n = length if i < 4 else length - 3
        params = RequestParams(max_tokens=3, ignore_eos=True)
        engine.submit(rng.integers(3, 259, n).tolist(), params,
                      lambda o, i=i: outs.setdefault(i, []).extend(o.token_ids))  # fmt: skip
    while engine.step() or engine.has_work():
        pass
    assert groups[:2] == [(0, length, 4), (4 * length, length - 3, 1)]
    assert len(outs) == 5 and all(len(t) == 3 for t in outs.values())
