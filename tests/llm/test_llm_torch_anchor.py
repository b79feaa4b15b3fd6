"""The benchmark's PyTorch anchor decoder decodes what pygpukit.llm decodes.

Greedy continuations of small random float32 models of each family (llama3 RoPE with tied
embeddings, Qwen2 bias, Qwen3 q/k norm with an explicit head dim, Mistral with a window shorter
than the sequence) from the anchor (eager, CPU tensors) against ``model.generate`` on the
current backend; batches of different prompts against one ``generate`` per prompt. Skipped
without PyTorch (CI has none; the GPU machine does).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from pygpukit import llm
from pygpukit.llm.config import ModelConfig
from pygpukit.llm.random_model import write_checkpoint

pytest.importorskip("torch")

from pygpukit.llm.torch_anchor import TorchAnchor

BASE = {
    "vocab_size": 97,
    "hidden_size": 256,
    "intermediate_size": 160,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
}
FAMILIES = {
    "llama3-tied": {
        "architectures": ["LlamaForCausalLM"],
        "tie_word_embeddings": True,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    },
    "qwen2-bias": {"architectures": ["Qwen2ForCausalLM"], "rope_theta": 1e6},
    "qwen3-qknorm": {"architectures": ["Qwen3ForCausalLM"], "head_dim": 96},
    "mistral-window": {"architectures": ["MistralForCausalLM"], "sliding_window": 7},
    "llama-freq-factors": {
        "architectures": ["LlamaForCausalLM"],
        "rope_freq_factors": [1.0 + 0.25 * i for i in range(32)],  # head_dim 64: 32 factors
    },
    "qwen2-yarn": {
        "architectures": ["Qwen2ForCausalLM"],
        "rope_scaling": {
            "rope_type": "yarn",
            "factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    },
}


def _folder(tmp_path: pathlib.Path, family: str, seed: int) -> tuple[str, dict]:
    cfg = {**BASE, **FAMILIES[family]}
    return write_checkpoint(tmp_path / family, cfg, seed=seed), cfg


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_anchor_matches_pygpukit_greedy(tmp_path, family, rng):
    folder, cfg = _folder(tmp_path, family, seed=int(rng.integers(1 << 30)))
    model = llm.load(folder, dtype="float32", max_seq_len=64, progress=False)
    anchor = TorchAnchor.from_checkpoint(
        folder, ModelConfig.from_dict(cfg), max_batch=3, max_seq_len=64, device="cpu",
        dtype="float32",
    )  # fmt: skip
    prompts = rng.integers(3, cfg["vocab_size"], size=(3, 11))
    new = 12
    got = anchor.generate(prompts, new)
    assert got.shape == (3, new)
    for row, prompt in zip(got, prompts, strict=True):
        want = model.generate(prompt.tolist(), max_new_tokens=new).token_ids
        assert row.tolist() == want
    # The history also holds the prompts, and a second, shorter batch reuses the cache.
    np.testing.assert_array_equal(anchor.tokens(3, 0, 11), prompts)
    again = anchor.generate(prompts[1:2, :5], 4)
    assert again[0].tolist() == model.generate(prompts[1, :5].tolist(), max_new_tokens=4).token_ids


def test_anchor_prefill_and_steps_compose(tmp_path, rng):
    """prefill + decode(b, n) queue the same tokens as generate."""
    folder, cfg = _folder(tmp_path, "qwen2-bias", seed=int(rng.integers(1 << 30)))
    anchor = TorchAnchor.from_checkpoint(
        folder, ModelConfig.from_dict(cfg), max_batch=2, max_seq_len=32, device="cpu",
        dtype="float32",
    )  # fmt: skip
    prompts = rng.integers(3, cfg["vocab_size"], size=(2, 6))
    whole = anchor.generate(prompts, 5)
    anchor.prefill(prompts)
    anchor.decode(2, 2)
    anchor.decode(2, 2)
    np.testing.assert_array_equal(anchor.tokens(2, 6, 5), whole)


def test_anchor_rejects_bad_requests(tmp_path, rng):
    folder, cfg = _folder(tmp_path, "llama3-tied", seed=1)
    anchor = TorchAnchor.from_checkpoint(
        folder, ModelConfig.from_dict(cfg), max_batch=2, max_seq_len=16, device="cpu",
        dtype="float32",
    )  # fmt: skip
    with pytest.raises(ValueError, match="1 <= B <= 2"):
        anchor.prefill(np.ones((3, 4), np.int64))
    with pytest.raises(ValueError, match="max_new_tokens"):
        anchor.generate(np.ones((1, 10), np.int64), 7)
    broken = json.loads((pathlib.Path(folder) / "config.json").read_text())
    broken["hidden_size"] = 32
    with pytest.raises(llm.CheckpointError):
        TorchAnchor.from_checkpoint(folder, ModelConfig.from_dict(broken), device="cpu")
