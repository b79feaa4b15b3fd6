"""Random-weight checkpoints from a seed: the same bytes on every machine, for tests and benchmarks.

The weights of a Hugging Face-style causal LM are drawn with NumPy's ``default_rng(seed)`` in a
fixed tensor order, so a test can regenerate exactly the checkpoint that a reference run (PyTorch
/ transformers, on another machine) was given: only the seed and the config need to be stored.
:func:`write_checkpoint` writes a model directory (``config.json`` + ``model.safetensors``) that
``pygpukit.llm.load`` and ``transformers.AutoModelForCausalLM.from_pretrained`` both read.

Scales keep the logits of a small random model spread out but not dominated by one token (rows
of the embedding and linear weights of norm about 1, norms around 1), so greedy continuations
neither hinge on ties nor repeat one token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from pygpukit import dtypes
from pygpukit.safetensors import write_safetensors

__all__ = [
    "random_weights",
    "tensor_shapes",
    "write_checkpoint",
    "write_tokenizer",
]

#: ChatML, the template of SmolLM2 and Qwen: what write_tokenizer gives its tokenizer.
CHATML_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def _head_dim(cfg: Mapping[str, Any]) -> int:
    explicit = cfg.get("head_dim")
    return int(explicit) if explicit else int(cfg["hidden_size"]) // int(cfg["num_attention_heads"])


def tensor_shapes(cfg: Mapping[str, Any]) -> Iterator[tuple[str, tuple[int, ...], str]]:
    """``(HF name, shape, kind)`` of every tensor of a Llama-family checkpoint, in a fixed order.

    ``kind`` is ``"embed"``, ``"linear"``, ``"bias"`` or ``"norm"`` (it picks the scale).
    Bias tensors exist for Qwen2 (``model_type`` qwen2) or ``attention_bias``; q/k norms for
    Qwen3; ``lm_head.weight`` unless ``tie_word_embeddings``.
    """
    h, v = int(cfg["hidden_size"]), int(cfg["vocab_size"])
    inter = int(cfg["intermediate_size"])
    hq, hkv = (
        int(cfg["num_attention_heads"]),
        int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"]),
    )
    d = _head_dim(cfg)
    arch = (cfg.get("architectures") or ["LlamaForCausalLM"])[0]
    bias = arch == "Qwen2ForCausalLM" or bool(cfg.get("attention_bias", False))
    qk_norm = arch == "Qwen3ForCausalLM"
    yield "model.embed_tokens.weight", (v, h), "embed"
    for i in range(int(cfg["num_hidden_layers"])):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (h,), "norm"
        for name, rows in (("q", hq * d), ("k", hkv * d), ("v", hkv * d)):
            yield p + f"self_attn.{name}_proj.weight", (rows, h), "linear"
            if bias:
                yield p + f"self_attn.{name}_proj.bias", (rows,), "bias"
        yield p + "self_attn.o_proj.weight", (h, hq * d), "linear"
        if bool(cfg.get("attention_bias", False)) and arch != "Qwen2ForCausalLM":
            yield p + "self_attn.o_proj.bias", (h,), "bias"
        if qk_norm:
            yield p + "self_attn.q_norm.weight", (d,), "norm"
            yield p + "self_attn.k_norm.weight", (d,), "norm"
        yield p + "post_attention_layernorm.weight", (h,), "norm"
        yield p + "mlp.gate_proj.weight", (inter, h), "linear"
        yield p + "mlp.up_proj.weight", (inter, h), "linear"
        yield p + "mlp.down_proj.weight", (h, inter), "linear"
    yield "model.norm.weight", (h,), "norm"
    if not cfg.get("tie_word_embeddings", False):
        yield "lm_head.weight", (v, h), "linear"


def _draw(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    x = rng.standard_normal(shape, dtype=np.float32)
    if kind == "norm":
        return 1.0 + np.float32(0.1) * x
    if kind == "bias":
        return np.float32(0.1) * x
    return x * np.float32(1.0 / np.sqrt(shape[-1]))  # linear and embedding rows


def random_weights(
    cfg: Mapping[str, Any], seed: int, dtype: Any = "float32"
) -> dict[str, np.ndarray]:
    """Every tensor of the checkpoint ``cfg`` describes, drawn from ``default_rng(seed)``.

    Drawn in float32 in :func:`tensor_shapes` order, then rounded to ``dtype``. The same
    ``cfg`` and ``seed`` give the same arrays on every machine (NumPy's PCG64 and ziggurat
    normals are platform-independent).
    """
    rng = np.random.default_rng(seed)
    dt = dtypes.normalize(dtype)
    return {name: _draw(rng, shape, kind).astype(dt) for name, shape, kind in tensor_shapes(cfg)}


def write_tokenizer(path: str | os.PathLike[str]) -> None:
    """Write a byte-level ``tokenizer.json`` (256 byte tokens + ChatML specials) and its config.

    Ids 0-2 are ``<|endoftext|>``, ``<|im_start|>`` and ``<|im_end|>`` (the EOS), ids 3-258
    the bytes; no merges, so any text round-trips. Pairs with a ``vocab_size`` of at least 259.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(_SPECIAL)}
    vocab.update({ch: len(_SPECIAL) + i for i, ch in enumerate(sorted(alphabet))})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(list(_SPECIAL))
    tok.save(os.path.join(path, "tokenizer.json"))
    config = {"eos_token": "<|im_end|>", "bos_token": None, "pad_token": "<|endoftext|>",
              "chat_template": CHATML_TEMPLATE}  # fmt: skip
    with open(os.path.join(path, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)


def write_checkpoint(
    path: str | os.PathLike[str],
    cfg: Mapping[str, Any],
    seed: int = 0,
    dtype: Any = "float32",
    *,
    weights: Mapping[str, np.ndarray] | None = None,
    tokenizer: bool = False,
) -> str:
    """Write a model directory (``config.json`` + ``model.safetensors``) with random weights.

    ``weights`` overrides the drawn tensors (for example, to write a deliberately broken
    checkpoint); ``tokenizer=True`` adds :func:`write_tokenizer`'s files. Returns the path.
    """
    os.makedirs(path, exist_ok=True)
    tensors = dict(weights) if weights is not None else random_weights(cfg, seed, dtype)
    dt = dtypes.normalize(dtype)
    config = dict(cfg)
    config.setdefault("torch_dtype", "bfloat16" if dt == dtypes.bfloat16 else str(dt))
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    write_safetensors(os.path.join(path, "model.safetensors"), tensors)
    if tokenizer:
        write_tokenizer(path)
    return os.fspath(path)
