"""Reference logits and greedy continuations from Hugging Face transformers, for tests/llm.

Run on a machine with PyTorch and transformers installed (CI has neither)::

    python tools/llm_reference.py --out tests/llm/references [--smollm2-gguf PATH]

For each small random configuration in ``CONFIGS`` (one per model family and feature: llama3
RoPE scaling with tied embeddings, Qwen2 attention bias, Qwen3 q/k norm with an explicit head
dim, Mistral's sliding window shorter than the sequence, YaRN scaling), the weights are drawn by
``pygpukit.llm.random_model`` from a seed, so the tests regenerate them bit for bit and only
``<name>.json`` (config, seed, token ids) and ``<name>.npz`` (float32 logits, greedy ids) are
stored. With ``--smollm2-gguf`` the real SmolLM2-135M-Instruct GGUF is loaded by transformers
(``gguf_file=``) and the argmax and top logits of a fixed prompt are stored as well.

transformers runs in float32 on the CPU (``--device cuda`` to use the GPU; TF32 is turned off),
eager attention, and greedy decoding by a plain argmax loop over full forwards (the model
function itself, with no cache in between).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for package in ("runtime", "ops", "llm"):
    sys.path.insert(0, str(ROOT / "packages" / f"pygpukit-{package}" / "src"))

sys.path.insert(0, str(ROOT / "tests" / "llm"))
from llm_reference_numpy import CONFIGS as _FAMILIES  # noqa: E402  (the tests' configurations)

#: name -> (seed, config.json contents): every configuration the tests compare against.
SEEDS = {"llama3_tied": 1001, "qwen2_bias": 1002, "qwen3_qknorm": 1003, "mistral_window": 1004,
         "qwen2_yarn": 1005}  # fmt: skip
CONFIGS: dict[str, tuple[int, dict[str, Any]]] = {n: (SEEDS[n], c) for n, c in _FAMILIES.items()}

#: Forward: a batch of 2 sequences of 16 tokens; greedy: 32 new tokens after an 8-token prompt.
FORWARD_SHAPE = (2, 16)
PROMPT_LEN, NEW_TOKENS = 8, 32
SMOLLM2_PROMPT = "The capital of France is Paris. The capital of Germany is"
SMOLLM2_TOP = 256  # logits kept per position: the top ones, with their token ids


def _token_ids(seed: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + 7)
    forward_ids = rng.integers(3, vocab, size=FORWARD_SHAPE, dtype=np.int64)
    prompt_ids = rng.integers(3, vocab, size=(1, PROMPT_LEN), dtype=np.int64)
    return forward_ids, prompt_ids


def _hf_model(cfg: dict[str, Any], seed: int, device: str) -> Any:
    import torch
    import transformers

    from pygpukit.llm.random_model import random_weights

    # A deep copy: transformers adds keys to the nested rope_scaling dict it is given (rope_theta),
    # and the stored config must be the one the tests build.
    config = transformers.AutoConfig.for_model(**copy.deepcopy(cfg))
    config._attn_implementation = "eager"
    arch = getattr(transformers, cfg["architectures"][0])
    model = arch(config).to(torch.float32).eval()
    state = {k: torch.from_numpy(v) for k, v in random_weights(cfg, seed, "float32").items()}
    if cfg.get("tie_word_embeddings"):
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [m for m in missing if "rotary_emb" not in m]
    if missing or unexpected:
        raise RuntimeError(
            f"weights do not match the model: missing {missing}, unexpected {unexpected}"
        )
    return model.to(device)


def _greedy(model: Any, prompt: Any, steps: int) -> np.ndarray:
    import torch

    ids = prompt
    with torch.no_grad():
        for _ in range(steps):
            nxt = model(ids).logits[:, -1].argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
    return ids[:, prompt.shape[1] :].cpu().numpy().astype(np.int32)


def reference(name: str, out: Path, device: str) -> None:
    """Write ``<name>.json`` and ``<name>.npz`` for the configuration ``name``."""
    import torch

    seed, cfg = CONFIGS[name]
    model = _hf_model(cfg, seed, device)
    forward_ids, prompt_ids = _token_ids(seed, cfg["vocab_size"])
    with torch.no_grad():
        logits = model(torch.from_numpy(forward_ids).to(device)).logits.float().cpu().numpy()
    greedy = _greedy(model, torch.from_numpy(prompt_ids).to(device), NEW_TOKENS)
    meta = {
        "seed": seed,
        "config": cfg,
        "forward_ids": forward_ids.tolist(),
        "prompt_ids": prompt_ids.tolist(),
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
    }
    (out / f"{name}.json").write_text(json.dumps(meta, indent=1))
    np.savez_compressed(out / f"{name}.npz", logits=logits.astype(np.float32), greedy=greedy)
    print(f"{name}: logits {logits.shape}, greedy {greedy[0, :8].tolist()}...")


def smollm2_reference(gguf: Path, out: Path, device: str) -> None:
    """Argmax and top logits of SMOLLM2_PROMPT from transformers loading the GGUF itself."""
    import torch
    import transformers

    folder, file = str(gguf.parent), gguf.name
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=file)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=file, torch_dtype=torch.float32
    )
    model = model.to(device).eval()
    ids = tok(SMOLLM2_PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        logits = model(ids.to(device)).logits[0].float().cpu()
    top = torch.topk(logits, SMOLLM2_TOP, dim=-1)
    np.savez_compressed(
        out / "smollm2_gguf.npz",
        input_ids=ids[0].numpy().astype(np.int32),
        argmax=logits.argmax(-1).numpy().astype(np.int32),
        top_ids=top.indices.numpy().astype(np.int32),
        top_logits=top.values.numpy().astype(np.float32),
    )
    print(f"smollm2: {ids.shape[1]} tokens, argmax {logits.argmax(-1).tolist()}")


def main(argv: list[str] | None = None) -> int:
    """Write every reference file into ``--out``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "llm" / "references")
    parser.add_argument("--device", default="cpu", help="torch device (default: cpu)")
    parser.add_argument("--only", nargs="*", choices=sorted(CONFIGS), help="a subset of configs")
    parser.add_argument("--smollm2-gguf", type=Path, help="SmolLM2-135M-Instruct .gguf file")
    args = parser.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    for name in args.only or CONFIGS:
        reference(name, args.out, args.device)
    if args.smollm2_gguf is not None:
        smollm2_reference(args.smollm2_gguf, args.out, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
