"""pygpukit.llm: run causal LLMs from Hugging Face SafeTensors directories and GGUF files.

Distributed as ``pygpukit-llm`` (``pip install "pygpukit[llm]"``)::

    from pygpukit import llm

    model = llm.load("path/to/SmolLM2-135M-Instruct")      # or a .gguf file
    print(model.chat([{"role": "user", "content": "Hi!"}]).text)

Supported architectures: ``ARCHITECTURES`` (Llama 2/3/3.1/3.2, SmolLM/SmolLM2, Qwen2/2.5,
Qwen3, Mistral). Guide: docs/llm.md.
"""

from __future__ import annotations

from .config import ModelConfig
from .errors import CheckpointError, LLMError, TokenizerError, UnsupportedModelError
from .generate import Generation, GenerationOptions, GenerationStats, SamplingParams
from .model import CausalLM, load
from .models import ARCHITECTURES

#: The original project's names for the same things.
CausalTransformerModel = CausalLM
load_model_from_safetensors = load

__all__ = [
    "ARCHITECTURES",
    "CausalLM",
    "CausalTransformerModel",
    "CheckpointError",
    "Generation",
    "GenerationOptions",
    "GenerationStats",
    "LLMError",
    "ModelConfig",
    "SamplingParams",
    "TokenizerError",
    "UnsupportedModelError",
    "load",
    "load_model_from_safetensors",
]
