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
