"""The real SmolLM2-135M-Instruct (Q4_1 GGUF) answers a question, greedily, on this backend."""

from __future__ import annotations

import pygpukit as gp
from pygpukit import llm


def test_capital_of_france(smollm2_path):
    # float32 on the CPU backend (NumPy has no fast bfloat16 product), bfloat16 on the GPU.
    dtype = "bfloat16" if gp.backend_name() == "cuda" else "float32"
    model = llm.load(smollm2_path, dtype=dtype, max_seq_len=128, progress=False)
    question = [{"role": "user", "content": "What is the capital of France?"}]
    reply = model.chat(question, max_new_tokens=32)
    assert "Paris" in reply.text
    assert reply.finish_reason == "stop"
    assert reply.token_ids[-1] == model.tokenizer.token_to_id("<|im_end|>")
    assert "<|im_end|>" not in reply.text and reply.text.strip().endswith(".")
    if gp.backend_name() == "cuda":  # the CPU run is slow enough already; streaming is tested
        streamed = "".join(model.chat(question, stream=True, max_new_tokens=32))
        assert streamed == reply.text


def test_forward_matches_transformers_on_the_gguf(smollm2_path):
    """Argmax at every position equal to transformers' (which loaded the same GGUF), top logits
    within 0.6 in bfloat16; the reference comes from tools/llm_reference.py --smollm2-gguf."""
    import pathlib

    import numpy as np
    import pytest

    ref_path = pathlib.Path(__file__).parent / "references" / "smollm2_gguf.npz"
    if not ref_path.is_file():
        pytest.skip(
            "no transformers reference for the SmolLM2 GGUF yet: run `python "
            "tools/llm_reference.py --out tests/llm/references --smollm2-gguf PATH`"
        )
    with np.load(ref_path) as ref:
        ids, argmax, top_ids, top_logits = (
            ref["input_ids"], ref["argmax"], ref["top_ids"], ref["top_logits"]
        )  # fmt: skip
    model = llm.load(smollm2_path, dtype="bfloat16", max_seq_len=128, progress=False)
    logits = model.forward(ids[None, :]).to_numpy()[0]
    assert np.array_equal(logits.argmax(-1), argmax)
    ours = np.take_along_axis(logits, top_ids, axis=-1)
    assert np.abs(ours - top_logits).max() <= 0.6
