"""A tiny random-weight chat model (byte-level tokenizer, ChatML) for the engine and server tests.

Small enough that the CPU backend runs dozens of concurrent requests in seconds; its weights
come from a seed, so every test process that writes it gets the same model.
"""

from __future__ import annotations

import os
from typing import Any

import pygpukit as gp
from pygpukit.llm.random_model import write_checkpoint

#: The tiny model's dtype in the tests: float32 on the CPU backend; bfloat16 on the GPU, whose
#: paged attention kernels take float16/bfloat16 only.
TEST_DTYPE = "bfloat16" if gp.backend_name() == "cuda" else "float32"

#: Llama-shaped, head dim 64 (the smallest the attention kernels take), vocab 320 (the 259
#: tokens of write_tokenizer's byte-level vocabulary and some more).
TINY_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 320,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "rope_theta": 10000.0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def write_tiny_model(path: str | os.PathLike[str], seed: int = 1234) -> str:
    """Write the tiny model (config, safetensors, tokenizer) into ``path``; returns it."""
    return write_checkpoint(path, TINY_CONFIG, seed=seed, dtype="float32", tokenizer=True)
