"""Random corruptions of valid checkpoint files: only typed errors, never a crash or a hang.

Bytes are flipped or files cut at random places (fresh seeds each run); opening and loading the
result must either succeed or raise a ``pygpukit.llm.errors.LLMError``: a ``struct.error``, an
``IndexError`` or a NumPy error escaping the parser would be a bug in the checks.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from ggml_reference import quantize
from llm_files import gguf_bytes, safetensors_bytes

from pygpukit.llm.errors import LLMError
from pygpukit.llm.loading import open_checkpoint

TRIALS = 40


def _safetensors(rng) -> bytes:
    return safetensors_bytes(
        {
            "model.embed_tokens.weight": rng.standard_normal((5, 8)).astype(np.float16),
            "model.norm.weight": rng.standard_normal(8).astype(np.float32),
        }
    )


def _gguf(rng) -> bytes:
    meta = {
        "general.architecture": "llama",
        "llama.embedding_length": 32,
        "llama.feed_forward_length": 64,
        "llama.block_count": 1,
        "llama.attention.head_count": 2,
        "tokenizer.ggml.tokens": ["a", "b", "ab"],
    }
    w = rng.standard_normal((4, 32)).astype(np.float32)
    tensors = [
        ("output_norm.weight", (32,), "F32", w[0].tobytes()),
        ("token_embd.weight", (4, 32), "Q4_1", quantize(w, "Q4_1").tobytes()),
    ]
    return gguf_bytes(meta, tensors)


def _mutate(rng, data: bytes) -> bytes:
    raw = bytearray(data)
    if rng.random() < 0.3:
        return bytes(raw[: int(rng.integers(0, len(raw)))])
    # Corrupt the first few hundred bytes most: that is where the headers are.
    for _ in range(int(rng.integers(1, 4))):
        at = int(rng.integers(0, min(len(raw), 400)))
        raw[at] = int(rng.integers(0, 256))
    return bytes(raw)


@pytest.mark.parametrize("kind", ["safetensors", "gguf"])
def test_corrupt_files_raise_only_typed_errors(tmp_path, rng, kind):
    make = _safetensors if kind == "safetensors" else _gguf
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
    target = folder / "model.safetensors" if kind == "safetensors" else tmp_path / "m.gguf"
    path = folder if kind == "safetensors" else target
    outcomes = {"ok": 0, "error": 0}
    for _ in range(TRIALS):
        target.write_bytes(_mutate(rng, make(rng)))
        try:
            with open_checkpoint(path) as ck:
                ck.load("float32", progress=False)
            outcomes["ok"] += 1
        except LLMError:
            outcomes["error"] += 1
    assert outcomes["error"] > 0  # the corruptions are detected, not silently loaded
