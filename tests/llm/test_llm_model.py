"""CausalLM on the current backend: forward against an independent float64 NumPy model, the
cached decode path against forward, sampling, the KV budget, and bad input.

Weights are fresh random draws for each run (the seed is in the report on failure).
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
import pytest
from llm_reference_numpy import CONFIGS, forward, rel_err

import pygpukit as gp
from pygpukit import llm
from pygpukit.llm.random_model import random_weights
from pygpukit.ops._plan import plan_caches
from pygpukit.ops.layers import Attention, GatedMLP, Linear


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """A fresh seed per test, recorded in the report."""
    value = secrets.randbits(32)
    request.node.user_properties.append(("weights_seed", value))
    return value


def _config(name: str, eos: int | None = None) -> dict[str, Any]:
    """A test configuration; no EOS id unless given, so lengths are deterministic."""
    return {**CONFIGS[name], "eos_token_id": eos}


def _model(name: str, seed: int, dtype: str = "float32", **kw: Any) -> tuple[Any, dict]:
    w = random_weights(CONFIGS[name], seed)
    return llm.CausalLM.from_weights(_config(name), w, dtype=dtype, max_seq_len=64, **kw), w


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_forward_matches_numpy_model(name, seed, rng):
    model, w = _model(name, seed)
    ids = rng.integers(3, 256, (2, 16))
    got = model.forward(ids)
    assert got.dtype == np.float32 and got.shape == (2, 16, 256)
    assert rel_err(got.to_numpy(), forward(CONFIGS[name], w, ids)) < 1e-4


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_prefill_reads_the_projection_in_place(name, seed, rng, monkeypatch):
    """Prefill splits and rotates the q/k/v projection in one kernel and writes the keys and
    values straight into the cache (models without q/k norms); the logits, the cache and the
    first token are those of the path that splits and transposes with copies."""
    from pygpukit.llm.models import llama

    model, _ = _model(name, seed)
    ids = rng.integers(3, 256, (2, 9))
    prompt = rng.integers(3, 256, 11).tolist()
    in_place = llama._UncachedAttend.from_projection
    calls: list[int] = []

    def spy(self: Any, i: int, qkv: Any, positions: Any, **options: Any) -> Any:
        calls.append(i)
        return in_place(self, i, qkv, positions, **options)

    results = []
    for split in (spy, None):  # None: the strategy offers no projection path
        monkeypatch.setattr(llama._UncachedAttend, "from_projection", split)
        logits = model.forward(ids).to_numpy()
        first = model.generate(prompt, max_new_tokens=1).token_ids
        cache = model._cache
        kv = [a.to_numpy()[:, :, : len(prompt)] for a in cache.k + cache.v]
        results.append((logits, first, kv))
    layers = model._model.layers
    per_head_norms = layers[0].q_norm is not None  # Qwen3: norms between projection and RoPE
    assert len(calls) == (0 if per_head_norms else 2 * len(layers))
    (l1, t1, kv1), (l0, t0, kv0) = results
    assert rel_err(l1, l0) < 1e-6 and t1 == t0
    for a, b in zip(kv1, kv0, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["llama3_tied", "qwen3_qknorm", "mistral_window"])
def test_last_position_only_is_the_last_row(name, seed, rng):
    """A prefill that wants the next token runs the last layer's attention output, MLP and
    final norm on the last position only: its hidden state is the full pass's last row, and the
    keys and values cached for every position are those of the full pass."""
    model, _ = _model(name, seed)
    m = model._model
    ids = rng.integers(3, 256, (1, 10))
    ids_gpu = gp.from_numpy(ids.astype(np.int32))
    positions = gp.from_numpy(np.arange(10, dtype=np.int32)[None, :])
    stored: dict[bool, list[np.ndarray]] = {True: [], False: []}
    rows = {}
    for trim in (False, True):

        def store(i: int, k: Any, v: Any, trim: bool = trim) -> None:
            stored[trim] += [k.to_numpy(), v.to_numpy()]

        x = m.hidden_states(ids_gpu, positions, m.attend_uncached(store), last_position_only=trim)
        rows[trim] = x.to_numpy()
    assert rows[True].shape == (1, 1, m.config.hidden_size)
    assert rel_err(rows[True][:, 0], rows[False][:, -1]) < 1e-6
    for a, b in zip(stored[True], stored[False], strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["llama3_tied", "qwen3_qknorm"])
def test_forward_bfloat16(name, seed, rng):
    model, w = _model(name, seed, "bfloat16")
    ids = rng.integers(3, 256, (1, 12))
    assert rel_err(model.forward(ids).to_numpy(), forward(CONFIGS[name], w, ids)) < 2e-2


def _greedy_by_forward(model, prompt: list[int], n: int) -> list[int]:
    seq, out = list(prompt), []
    for _ in range(n):
        t = int(model.forward(np.array([seq])).to_numpy()[0, -1].argmax())
        out.append(t)
        seq.append(t)
        if t in model.eos_token_ids:
            break
    return out


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_greedy_decode_equals_forward(name, seed, rng):
    """Prefill + cached decode (a rolling window for Mistral: 8 + 20 tokens > window 8)."""
    model, _ = _model(name, seed)
    prompt = rng.integers(3, 256, 8).tolist()
    got = model.generate(prompt, max_new_tokens=20)
    assert got.token_ids == _greedy_by_forward(model, prompt, 20)
    assert got.finish_reason == ("stop" if got.token_ids[-1] in model.eos_token_ids else "length")
    assert got.stats.prompt_tokens == 8 and got.stats.generated_tokens == len(got.token_ids)
    # A second generation starts afresh: the cache of the first does not leak into it.
    assert model.generate(prompt, max_new_tokens=20).token_ids == got.token_ids


def test_stops_at_eos(seed, rng):
    model, w = _model("llama3_tied", seed)
    prompt = rng.integers(3, 256, 8).tolist()
    free = model.generate(prompt, max_new_tokens=12).token_ids
    eos = free[5]
    first = free.index(eos)
    stopping = llm.CausalLM.from_weights(_config("llama3_tied", eos), w, max_seq_len=64)
    got = stopping.generate(prompt, max_new_tokens=12)
    assert got.token_ids == free[: first + 1] and got.finish_reason == "stop"


def test_sampling_seeds(seed, rng):
    model, _ = _model("qwen2_bias", seed)
    prompt = rng.integers(3, 256, 6).tolist()
    kw = {"max_new_tokens": 16, "temperature": 1.5}
    a = model.generate(prompt, seed=11, **kw).token_ids
    assert model.generate(prompt, seed=11, **kw).token_ids == a
    others = [model.generate(prompt, seed=s, **kw).token_ids for s in (12, 13, 14)]
    assert any(o != a for o in others)
    greedy = model.generate(prompt, max_new_tokens=16).token_ids
    assert model.generate(prompt, top_k=1, seed=5, **kw).token_ids == greedy


def test_repetition_penalty_avoids_seen_tokens(seed, rng):
    model, _ = _model("llama3_tied", seed)
    prompt = rng.integers(3, 256, 6).tolist()
    got = model.generate(prompt, max_new_tokens=24, repetition_penalty=1e6).token_ids
    seen = set(prompt)
    for t in got:
        assert t not in seen
        seen.add(t)


def test_length_limit_and_zero_tokens(seed, rng):
    model, _ = _model("qwen2_yarn", seed)  # max_seq_len 64
    prompt = rng.integers(3, 256, 60).tolist()
    got = model.generate(prompt, max_new_tokens=100)
    assert got.finish_reason in ("length", "stop") and len(got.token_ids) <= 4
    none = model.generate(prompt, max_new_tokens=0)
    assert none.token_ids == [] and none.finish_reason == "length" and none.text == ""


def test_kv_cache_budget(seed):
    w = random_weights(CONFIGS["qwen2_bias"], seed)
    cfg = _config("qwen2_bias")
    # 2 layers x 2 (k, v) x 128 values x 4 bytes = 2 KiB per token.
    model = llm.CausalLM.from_weights(cfg, w, kv_cache_memory="100KiB")
    assert model.max_seq_len == 50
    with pytest.raises(ValueError, match="over the budget"):
        llm.CausalLM.from_weights(cfg, w, max_seq_len=200, kv_cache_memory=100 * 1024)
    # A sliding window needs only its window, whatever the length.
    wm = random_weights(CONFIGS["mistral_window"], seed)
    model = llm.CausalLM.from_weights(CONFIGS["mistral_window"], wm, kv_cache_memory="20KiB")
    assert model.max_seq_len == 256


class _Tokenizer:
    """The tokenizer interface CausalLM uses, over a byte-level vocabulary."""

    eos_token_ids = ()

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        return [3 + (b % 253) for b in text.encode()]

    def decode(self, ids, *, skip_special_tokens: bool = False) -> str:
        return "".join(chr(97 + i % 26) for i in ids if not (skip_special_tokens and i < 3))

    def apply_chat_template(self, messages, add_generation_prompt=True, **kw) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + "<assistant>"

    def detokenizer(self, *, skip_special_tokens=True, context=()):
        from pygpukit.llm.tokenizer import Detokenizer

        return Detokenizer(self, skip_special_tokens=skip_special_tokens, context=context)

    @staticmethod
    def stop_strings(stops):
        from pygpukit.llm.tokenizer import StopStrings

        return StopStrings(stops)


def test_text_stream_chat_and_stop_strings(seed):
    pytest.importorskip("pygpukit.llm.tokenizer")
    w = random_weights(CONFIGS["qwen2_bias"], seed)
    model = llm.CausalLM.from_weights(_config("qwen2_bias"), w, tokenizer=_Tokenizer())
    full = model.generate("hello", max_new_tokens=12)
    tok = _Tokenizer()
    assert full.text == tok.decode(full.token_ids, skip_special_tokens=True)
    assert "".join(model.stream("hello", max_new_tokens=12)) == full.text
    assert model.last_stats is not None and model.last_stats.generated_tokens == 12
    stop = full.text[3:5]
    cut = model.generate("hello", max_new_tokens=12, stop=[stop])
    assert cut.finish_reason == "stop" and cut.text == full.text[: full.text.index(stop)]
    reply = model.chat([{"role": "user", "content": "hi"}], max_new_tokens=5)
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": "hi"}]))
    assert reply.token_ids == model.generate(prompt, max_new_tokens=5).token_ids


# --- bad input ------------------------------------------------------------------------------


def test_unsupported_architecture_lists_supported():
    cfg = {**CONFIGS["qwen2_bias"], "architectures": ["GPT2LMHeadModel"]}
    with pytest.raises(llm.UnsupportedModelError, match=r"LlamaForCausalLM.*Qwen3ForCausalLM"):
        llm.ModelConfig.from_dict(cfg)


def test_shape_contradicting_config(seed):
    w = random_weights(CONFIGS["qwen2_bias"], seed)
    w["model.layers.1.mlp.up_proj.weight"] = np.ones((255, 128), np.float32)
    with pytest.raises(llm.CheckpointError, match=r"up_proj.*\(255, 128\).*\(256, 128\)"):
        llm.CausalLM.from_weights(CONFIGS["qwen2_bias"], w)
    del w["model.layers.1.mlp.up_proj.weight"]
    with pytest.raises(llm.CheckpointError, match=r"up_proj\.weight' is missing"):
        llm.CausalLM.from_weights(CONFIGS["qwen2_bias"], w)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"max_new_tokens": -1}, ValueError, "max_new_tokens must be >= 0"),
        ({"top_p": 0.0}, ValueError, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, ValueError, r"top_p must be in \(0, 1\]"),
        ({"temperature": -0.5}, ValueError, "temperature must be >= 0"),
        ({"temperature": float("nan")}, ValueError, "temperature must be finite"),
        ({"top_k": -2}, ValueError, "top_k must be >= 0"),
        ({"repetition_penalty": 0.0}, ValueError, "repetition_penalty must be > 0"),
        ({"min_p": 2.0}, ValueError, "min_p"),
        ({"max_new_tokens": 2.5}, TypeError, "max_new_tokens must be an int"),
        ({"temprature": 0.5}, TypeError, "unknown generation option.*temprature.*temperature"),
    ],
)
def test_bad_generation_arguments(seed, kwargs, error, match):
    model, _ = _model("qwen2_bias", seed)
    with pytest.raises(error, match=match):
        model.generate([5, 6, 7], **{"max_new_tokens": 4, **kwargs})
    assert len(model.generate([5, 6, 7], max_new_tokens=4).token_ids) == 4  # still usable


def test_generate_stream_and_chat_take_the_same_options(seed, rng):
    """One options definition serves the three calls (and the CLI's keyword arguments)."""
    from pygpukit.llm.generate import GenerationOptions, GenerationRequest

    opts: dict = {
        "max_new_tokens": 7, "temperature": 0.9, "top_k": 20, "top_p": 0.8, "min_p": 0.01,
        "repetition_penalty": 1.1, "seed": int(rng.integers(1 << 30)), "stop": None,
    }  # fmt: skip
    assert set(opts) == set(GenerationOptions.__annotations__)
    request = GenerationRequest.from_options(opts)
    assert request.max_new_tokens == 7 and request.sampling.top_k == 20
    assert GenerationRequest.from_options({}) == GenerationRequest()
    model, _ = _model("qwen2_bias", seed, tokenizer=_Tokenizer())
    prompt = rng.integers(3, 256, 5).tolist()
    generated = model.generate(prompt, **opts)
    assert len(generated.token_ids) == 7
    assert "".join(model.stream(prompt, **opts)) == generated.text
    messages = [{"role": "user", "content": "hi"}]
    replied = model.chat(messages, **opts)
    assert "".join(model.chat(messages, stream=True, **opts)) == replied.text


def test_prompt_longer_than_max_seq_len(seed):
    model, _ = _model("qwen2_bias", seed)
    with pytest.raises(ValueError, match="the prompt has 70 tokens, max_seq_len is 64"):
        model.generate(list(range(3, 73)), max_new_tokens=4)
    with pytest.raises(ValueError, match="exceed max_seq_len"):
        model.forward([list(range(3, 73))])
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 256\)"):
        model.generate([5, 300], max_new_tokens=4)


def test_text_without_tokenizer_and_chat_without_role(seed):
    model, _ = _model("qwen2_bias", seed)
    with pytest.raises(llm.TokenizerError, match="has none"):
        model.generate("hello")
    with pytest.raises(llm.TokenizerError, match="has none"):
        model.chat([{"role": "user", "content": "hi"}])
    with_tok = llm.CausalLM.from_weights(
        _config("qwen2_bias"), random_weights(CONFIGS["qwen2_bias"], seed), tokenizer=_Tokenizer()
    )
    with pytest.raises(llm.TokenizerError, match="message 1 has no 'role'"):
        with_tok.chat([{"role": "user", "content": "hi"}, {"content": "no role"}])


def test_weights_are_read_only(seed):
    model, _ = _model("qwen2_bias", seed)
    for weight in model._model.weights():
        with pytest.raises(gp.ReadOnlyArrayError):
            weight.fill(0.0)
    assert len(model.generate([4, 5], max_new_tokens=3).token_ids) == 3


def test_public_names():
    assert llm.CausalTransformerModel is llm.CausalLM
    assert llm.load_model_from_safetensors is llm.load
    assert set(llm.ARCHITECTURES) == {
        "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"
    }  # fmt: skip


def test_step_logits_are_unrounded_float32(seed, rng):
    # A decode or prefill step's logits: float32 sums of the bf16 head product, not bf16 values
    # (rounded, close top logits tie and the argmax picks the lower id).
    model, _ = _model("llama3_tied", seed, "bfloat16")
    m = model._model
    x = gp.from_numpy(rng.standard_normal((1, m.config.hidden_size)).astype(gp.bfloat16))
    got = m.logits(x)
    assert got.dtype == np.float32 and got.shape == (1, m.config.vocab_size)
    exact = x.to_numpy().astype(np.float64) @ m.lm_head.weight.to_numpy().astype(np.float64).T
    assert rel_err(got.to_numpy(), exact) < 1e-6
    values = got.to_numpy()
    assert np.mean(values != values.astype(gp.bfloat16).astype(np.float32)) > 0.5


def _plan_lookups() -> int:
    """Lookups (hits and misses) every op's plan cache has served."""
    return sum(c.hits + c.misses for c in plan_caches().values())


@pytest.mark.parametrize("name", ["qwen3_qknorm", "mistral_window"])
def test_decode_steps_make_no_plan(name, seed, rng):
    """The decoder is built from ops layers: after the first step, a step plans nothing."""
    model, _ = _model(name, seed, "bfloat16")
    m = model._model
    assert isinstance(m.lm_head, Linear) and isinstance(m.attention, Attention)
    assert all(isinstance(layer.mlp, GatedMLP) for layer in m.layers)
    assert m.layers[0].qkv.splits == (m.config.q_size, m.config.kv_size, m.config.kv_size)
    dec, greedy = model.decoder, llm.SamplingParams()
    dec.use_graphs = False  # the eager step (the GPU replays it as a graph)
    dec.prefill(rng.integers(3, 256, 9).tolist(), greedy, None)
    dec.decode_step(greedy)
    before = _plan_lookups()
    for _ in range(12):  # past Mistral's window of 8: the rolling cache wraps around
        dec.decode_step(greedy)
    assert _plan_lookups() == before
    tokens = dec.history.to_numpy()[9:22]
    assert ((tokens >= 0) & (tokens < 256)).all()
