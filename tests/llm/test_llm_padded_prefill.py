"""The padded prefill (``pygpukit.llm.padded_prefill``) run eagerly: the same tokens and logits
as the unpadded prefill, and the lengths it pads to (the GPU tests replay its graphs)."""

from __future__ import annotations

import numpy as np
import pytest
from llm_reference_numpy import CONFIGS, rel_err

import pygpukit as gp
from pygpukit import llm
from pygpukit.llm.padded_prefill import PAD_MULTIPLE, PaddedPrefill
from pygpukit.llm.random_model import random_weights


def _model(name: str, rng: np.random.Generator, max_seq_len: int = 160) -> llm.CausalLM:
    w = random_weights(CONFIGS[name], int(rng.integers(2**31)))
    cfg = {**CONFIGS[name], "eos_token_id": None}
    return llm.CausalLM.from_weights(cfg, w, max_seq_len=max_seq_len)


def _padded(model: llm.CausalLM) -> PaddedPrefill:
    dec = model.decoder
    return PaddedPrefill(dec.model, dec.cache, capture=False)


@pytest.mark.parametrize("name", ["llama3_tied", "qwen3_qknorm"])
def test_padded_prompt_gives_the_unpadded_tokens(name, rng):
    model = _model(name, rng)
    length = int(rng.integers(2, PAD_MULTIPLE))  # never a multiple: padding rows exist
    prompt = rng.integers(3, 256, length).tolist()
    want = model.generate(prompt, max_new_tokens=4).token_ids
    model.decoder.padded = _padded(model)
    assert model.generate(prompt, max_new_tokens=4).token_ids == want


def test_last_row_is_that_rows_hidden_state(rng):
    """``last_row`` keeps the row it names, not the last: padding after it changes nothing."""
    model = _model("qwen2_bias", rng)
    m = model.decoder.model
    s, n = 21, 32
    ids = np.zeros((1, n), np.int32)
    ids[0, :s] = rng.integers(3, 256, s)
    positions = gp.from_numpy(np.arange(n, dtype=np.int32).reshape(1, n))
    row = gp.from_numpy(np.array([s - 1], np.int32))
    got = m.hidden_states(gp.from_numpy(ids), positions, m.attend_uncached(), last_row=row)
    ref = m.hidden_states(
        gp.from_numpy(ids[:, :s]), positions[:, :s], m.attend_uncached(), last_position_only=True
    )
    assert got.shape == ref.shape == (1, 1, CONFIGS["qwen2_bias"]["hidden_size"])
    assert rel_err(got.to_numpy(), ref.to_numpy()) < 1e-5


def test_padded_lengths(rng):
    model = _model("qwen2_bias", rng, max_seq_len=2 * PAD_MULTIPLE + 8)
    padded = _padded(model)
    assert padded.padded_length(1) == PAD_MULTIPLE
    assert padded.padded_length(PAD_MULTIPLE) == PAD_MULTIPLE
    assert padded.padded_length(PAD_MULTIPLE + 1) == 2 * PAD_MULTIPLE
    assert padded.padded_length(2 * PAD_MULTIPLE + 1) is None  # past the cache's slots
    window = _model("mistral_window", rng)
    assert _padded(window).padded_length(5) is None  # a sliding window runs unpadded
    dec = model.decoder  # float32: its prefill attention uploads a mask, no graph can hold it
    assert PaddedPrefill(dec.model, dec.cache, capture=True).padded_length(5) is None
