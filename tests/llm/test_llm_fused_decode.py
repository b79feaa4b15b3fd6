"""The fused decode step (four GEMVs and the attention a layer) against the unfused step.

On the current backend (the CPU here, CUDA on a GPU machine): the same model, the same cache
state, the step's logits both ways, and greedy generations both ways. Models the fused step does
not take (float32, q/k norm) keep the unfused one.
"""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from llm_reference_numpy import CONFIGS, rel_err

import pygpukit as gp
from pygpukit import llm
from pygpukit.llm.models import llama_decode
from pygpukit.llm.random_model import random_weights

FUSED = ["llama3_tied", "qwen2_bias", "mistral_window", "qwen2_yarn"]
TOL = {"float16": 5e-3, "bfloat16": 2e-2}


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    value = secrets.randbits(32)
    request.node.user_properties.append(("weights_seed", value))
    return value


def _model(name: str, seed: int, dtype: str) -> llm.CausalLM:
    cfg = {**CONFIGS[name], "eos_token_id": None}
    return llm.CausalLM.from_weights(cfg, random_weights(CONFIGS[name], seed), dtype=dtype,
                                     max_seq_len=48)  # fmt: skip


@pytest.mark.parametrize(
    ("name", "dtype"), [("qwen3_qknorm", "bfloat16"), ("llama3_tied", "float32")]
)
def test_float32_and_qk_norm_models_keep_the_unfused_step(name, dtype, seed):
    dec = _model(name, seed, dtype).decoder
    assert dec.fused is None and not dec.use_fused


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("name", FUSED)
def test_step_logits_match_the_unfused_step(name, dtype, seed, rng):
    dec = _model(name, seed, dtype).decoder
    assert dec.fused is not None and dec.use_fused
    greedy = llm.SamplingParams()
    dec.use_graphs = False
    dec.prefill(rng.integers(3, 256, 11).tolist(), greedy, None)
    for _ in range(3):  # a few fused steps first: the cache holds what they wrote
        dec.decode_step(greedy)
    fused = dec._step_logits().to_numpy().copy()
    dec.use_fused = False
    unfused = dec._step_logits().to_numpy()
    assert fused.shape == unfused.shape == (1, 256) and fused.dtype == np.float32
    assert rel_err(fused, unfused) < TOL[dtype]


@pytest.mark.parametrize("name", ["llama3_tied", "mistral_window"])
def test_single_pass_attention_step_matches(name, seed, rng):
    """The step with the one-launch attention gives the split attention's logits."""
    dec = _model(name, seed, "bfloat16").decoder
    assert dec.fused is not None and dec.fused.single_pass  # the default for a short cache
    greedy = llm.SamplingParams()
    dec.use_graphs = False
    dec.prefill(rng.integers(3, 256, 13).tolist(), greedy, None)
    dec.fused.single_pass = False
    split = dec._step_logits().to_numpy().copy()
    dec.fused.single_pass = True
    single = dec._step_logits().to_numpy()
    assert rel_err(single, split) < TOL["bfloat16"]


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("name", FUSED)
def test_greedy_tokens_match_the_unfused_step(name, dtype, seed, rng):
    """Past Mistral's window of 8 (the rolling cache wraps), graphs on the GPU."""
    model = _model(name, seed, dtype)
    prompt = rng.integers(3, 256, 9).tolist()
    fused = model.generate(prompt, max_new_tokens=14).token_ids
    model.decoder.use_fused = False
    unfused = model.generate(prompt, max_new_tokens=14).token_ids
    if gp.backend_name() != "cuda":
        assert fused == unfused
    else:  # the norm's sum of squares is ordered differently on the GPU: a near tie may flip
        assert np.mean(np.array(fused) == np.array(unfused)) >= 0.5


def test_sampling_and_stats_use_the_fused_step(seed, rng):
    """Sampled generation (logits graph + sampling + advance) runs over the fused step too."""
    model = _model("llama3_tied", seed, "bfloat16")
    prompt = rng.integers(3, 256, 5).tolist()
    a = model.generate(prompt, max_new_tokens=8, temperature=0.8, seed=3).token_ids
    b = model.generate(prompt, max_new_tokens=8, temperature=0.8, seed=3).token_ids
    assert a == b and len(a) == 8 and all(0 <= t < 256 for t in a)
    hist = model.decoder.history.to_numpy()
    np.testing.assert_array_equal(hist[:5], prompt)
    np.testing.assert_array_equal(hist[5:13], a)
    assert int(model.decoder.lens.to_numpy()[0]) == min(13, model.max_seq_len)


@pytest.mark.parametrize("name", ["llama3_tied", "qwen2_bias"])
def test_greedy_head_and_folded_embedding_keep_the_tokens(name, seed, rng, monkeypatch):
    """The step whose head also picks the token and advances the state, and whose first GEMV
    gathers the embedding row, gives the tokens of the step with an embedding kernel, float32
    logits, argmax and decode_advance: exactly (the logits are the same bits)."""
    model = _model(name, seed, "bfloat16")
    dec = model.decoder
    assert dec.fused is not None and dec.fused.has_greedy and dec.fused.folds_embedding
    prompt = rng.integers(3, 256, 7).tolist()
    fused = model.generate(prompt, max_new_tokens=12).token_ids
    monkeypatch.setattr(llama_decode, "FOLD_EMBEDDING", False)
    dec.fused = llama_decode.FusedDecodeStep(dec.model, dec.cache, dec.token, dec.pos, dec.lens)
    dec._graphs.clear()
    assert not dec.fused.has_greedy and not dec.fused.folds_embedding
    plain = model.generate(prompt, max_new_tokens=12).token_ids
    assert fused == plain
    with pytest.raises(RuntimeError, match="next_token"):
        dec.fused.greedy()
