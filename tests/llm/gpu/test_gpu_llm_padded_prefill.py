"""The padded prefill's captured graphs on the GPU: every prefill of a length (eager at the
first, captured at the second, replayed after) gives the unpadded prefill's tokens and logits."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from llm_reference_numpy import CONFIGS, rel_err

import pygpukit as gp
from pygpukit import llm
from pygpukit.llm.generate import SamplingParams
from pygpukit.llm.padded_prefill import PAD_MULTIPLE, PaddedPrefill
from pygpukit.llm.random_model import random_weights

pytestmark = pytest.mark.gpu


def _model(name: str, dtype: str) -> llm.CausalLM:
    w = random_weights(CONFIGS[name], secrets.randbits(31))
    cfg = {**CONFIGS[name], "eos_token_id": None}
    return llm.CausalLM.from_weights(cfg, w, dtype=dtype, max_seq_len=3 * PAD_MULTIPLE)


def _prefill_logits(model: llm.CausalLM, prompt: list[int]) -> np.ndarray:
    """The float32 logits the prefill sampled its first token from."""
    dec = model.decoder
    seen: list[np.ndarray] = []
    sample = dec._sample

    def keep(logits, p, gen):
        seen.append(logits.to_numpy())
        sample(logits, p, gen)

    dec._sample = keep  # type: ignore[method-assign]
    try:
        dec.prefill(prompt, SamplingParams(), None)
    finally:
        del dec._sample
    return seen[0]


#: bfloat16 logits of the padded prefill against the unpadded one: the GEMMs' row counts differ,
#: so cuBLASLt may pick other algorithms and round differently.
_LIMIT = 2e-2


@pytest.mark.parametrize("name", ["llama3_tied", "qwen2_bias", "qwen3_qknorm"])
def test_eager_capture_and_replay_match_the_unpadded_prefill(name, rng):
    model = _model(name, "bfloat16")
    dec = model.decoder
    for length in (int(rng.integers(1, PAD_MULTIPLE)), 2 * PAD_MULTIPLE):
        prompt = rng.integers(3, 256, length).tolist()
        want = _prefill_logits(model, prompt)
        dec.padded = PaddedPrefill(dec.model, dec.cache, capture=True)
        try:
            for _ in range(3):  # eager, captured, replayed
                assert rel_err(_prefill_logits(model, prompt), want) < _LIMIT
            assert dec.padded._lengths[dec.padded.padded_length(length)].graph is not None
        finally:
            dec.padded = None
    gp.synchronize()


def test_another_prompt_of_the_length_replays_with_its_own_ids(rng):
    """The graph reads the ids from its input buffer: a new prompt is not the captured one."""
    model = _model("qwen2_bias", "bfloat16")
    dec = model.decoder
    length = int(rng.integers(PAD_MULTIPLE + 1, 2 * PAD_MULTIPLE))
    prompts = [rng.integers(3, 256, length).tolist() for _ in range(3)]
    wants = [_prefill_logits(model, p) for p in prompts]
    dec.padded = PaddedPrefill(dec.model, dec.cache, capture=True)
    for _ in range(2):
        for p, want in zip(prompts, wants, strict=True):
            assert rel_err(_prefill_logits(model, p), want) < _LIMIT
    assert len(dec.padded._lengths) == 1 and dec.padded._lengths[2 * PAD_MULTIPLE].graph


def test_float32_models_prefill_eagerly_with_the_option_on(rng):
    """float32 prefill attention uploads its mask at each call: such a model is not captured."""
    model = _model("qwen2_bias", "float32")
    dec = model.decoder
    prompt = rng.integers(3, 256, int(rng.integers(1, PAD_MULTIPLE))).tolist()
    want = model.generate(prompt, max_new_tokens=4).token_ids
    dec.padded = PaddedPrefill(dec.model, dec.cache, capture=True)
    for _ in range(3):
        assert model.generate(prompt, max_new_tokens=4).token_ids == want
    assert not dec.padded._lengths
