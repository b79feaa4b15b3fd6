"""Model implementations by Hugging Face architecture name.

``ARCHITECTURES`` maps ``config.json``'s ``architectures[0]`` to the class that runs it: one
decoder serves the whole Llama family, its differences being flags of
:class:`~pygpukit.llm.config.ModelConfig`.
"""

from __future__ import annotations

from .llama import LlamaModel, checkpoint_tensors

__all__ = ["ARCHITECTURES", "LlamaModel", "checkpoint_tensors"]

#: architecture name -> model class.
ARCHITECTURES: dict[str, type[LlamaModel]] = {
    "LlamaForCausalLM": LlamaModel,
    "MistralForCausalLM": LlamaModel,
    "Qwen2ForCausalLM": LlamaModel,
    "Qwen3ForCausalLM": LlamaModel,
}
