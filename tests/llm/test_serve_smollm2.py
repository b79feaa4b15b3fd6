"""The official ``openai`` client against ``pygpukit serve`` with the real SmolLM2-135M-Instruct:
chat and completion, streamed and not, each equal to CausalLM's greedy answer; a few
concurrent chats sharing a system prompt (prefix-cache hits, blocks freed after)."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from serve_server import run_server

import pygpukit as gp
from pygpukit import llm

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

# float32 on the CPU backend (NumPy has no fast bfloat16 product), bfloat16 on the GPU.
DTYPE = "bfloat16" if gp.backend_name() == "cuda" else "float32"
MAX_LEN = 256
#: On the GPU the server runs batch-invariant: in bfloat16 only that mode rounds every row as
#: CausalLM's one-token step does, so that its greedy answers equal chat/generate token for
#: token. It has no prefix cache (prompts are computed whole): the hits are checked on the CPU.
INVARIANT = DTYPE == "bfloat16"


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return llm.load(smollm2_path, dtype=DTYPE, max_seq_len=MAX_LEN, progress=False)


@pytest.fixture(scope="module")
def server(smollm2_path):
    with run_server([f"smol={smollm2_path}"], "--dtype", DTYPE, "--max-model-len",
                    str(MAX_LEN), "--kv-memory", "64MiB",
                    *(["--batch-invariant"] if INVARIANT else [])) as s:  # fmt: skip
        yield s


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def test_chat_streamed_and_not_equals_causallm(server, smollm2):
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ref = smollm2.chat(messages, max_new_tokens=12)
    client = _client(server)
    out = client.chat.completions.create(model="smol", messages=messages, max_tokens=12,
                                         temperature=0)  # fmt: skip
    assert out.choices[0].message.content == ref.text and "Paris" in ref.text
    assert out.choices[0].finish_reason == ref.finish_reason
    assert out.usage.completion_tokens == len(ref.token_ids)
    stream = client.chat.completions.create(model="smol", messages=messages, max_tokens=12,
                                            temperature=0, stream=True)  # fmt: skip
    assert "".join(c.choices[0].delta.content or "" for c in stream) == ref.text


def test_completion_streamed_and_not_equals_causallm(server, smollm2):
    prompt = "The three primary colors are"
    ref = smollm2.generate(prompt, max_new_tokens=8)
    client = _client(server)
    out = client.completions.create(model="smol", prompt=prompt, max_tokens=8, temperature=0)
    assert out.choices[0].text == ref.text
    stream = client.completions.create(model="smol", prompt=prompt, max_tokens=8,
                                       temperature=0, stream=True)  # fmt: skip
    assert "".join(c.choices[0].text for c in stream) == ref.text


def test_concurrent_chats_with_a_shared_system_prompt(server, smollm2):
    system = {"role": "system", "content": "You are a helpful assistant who answers briefly, "
              "in one short sentence, without any preamble or follow-up question."}  # fmt: skip
    questions = ["What color is the sky?", "Name a fruit.", "What is 2 + 2?"]
    convs = [[system, {"role": "user", "content": q}] for q in questions]
    refs = [smollm2.chat(c, max_new_tokens=8).text for c in convs]

    async def everyone():
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused",
                                      max_retries=0) as client:  # fmt: skip

            async def one(messages):
                stream = await client.chat.completions.create(
                    model="smol", messages=messages, max_tokens=8, temperature=0, stream=True
                )
                return "".join([c.choices[0].delta.content or "" async for c in stream])

            return await asyncio.gather(*(one(c) for c in convs))

    assert asyncio.run(everyone()) == refs
    metrics = httpx.get(f"{server.url}/metrics").text
    hits = re.search(r"^pygpukit_serve_prefix_cache_hits_total\{[^}]*\} (\S+)$", metrics, re.M)
    assert hits and (float(hits.group(1)) == 0 if INVARIANT else float(hits.group(1)) > 0)
    # Requests end a step after their last token is read: poll (bounded only against a hang).
    deadline = time.monotonic() + 60
    h = httpx.get(f"{server.url}/health").json()["models"]["smol"]
    while h["running"] != 0 and time.monotonic() < deadline:
        time.sleep(0.05)
        h = httpx.get(f"{server.url}/health").json()["models"]["smol"]
    assert h["kv_blocks_used"] == 0 and h["running"] == 0
