"""The OpenAI-compatible server as a subprocess, with the tiny random model: the official
``openai`` client, 32 concurrent streams, prefix-cache hits, preemption, and bad input."""

from __future__ import annotations

import asyncio
import json
import re
import time

import numpy as np
import pytest
from serve_models import TEST_DTYPE, write_tiny_model
from serve_server import run_server

openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

from pygpukit import llm  # noqa: E402

MAX_LEN = 256
#: 64 KV blocks (16 KiB each for the tiny model in float32, 8 KiB in bfloat16): 32 concurrent
#: requests outgrow them, so some are preempted and recomputed.
KV_MEMORY = "1MiB" if TEST_DTYPE == "float32" else "512KiB"
#: On the GPU (bfloat16) the server runs batch-invariant: its batched bfloat16 step then rounds
#: every row as generate's one-token step does, so concurrent answers equal the sequential
#: ones token for token. That mode computes prompts whole (no prefix cache): the prefix-cache
#: hits are checked where the default engine is exact, the CPU backend (float32).
INVARIANT = TEST_DTYPE == "bfloat16"


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("tiny-serve"))


@pytest.fixture(scope="module")
def tiny(tiny_path):
    return llm.load(tiny_path, dtype=TEST_DTYPE, max_seq_len=MAX_LEN, progress=False)


@pytest.fixture(scope="module")
def server(tiny_path):
    with run_server([f"tiny={tiny_path}"], "--dtype", TEST_DTYPE, "--max-model-len",
                    str(MAX_LEN), "--kv-memory", KV_MEMORY, "--max-batch", "16",
                    "--max-queue", "64", "--max-batched-tokens", "96",
                    *(["--batch-invariant"] if INVARIANT else [])) as s:  # fmt: skip
        yield s


def _metric(text: str, name: str) -> float:
    m = re.search(rf"^pygpukit_serve_{name}\{{[^}}]*\}} (\S+)$", text, re.M)
    assert m, f"{name} not in /metrics"
    return float(m.group(1))


def _health(url: str) -> dict:
    return httpx.get(f"{url}/health").json()["models"]["tiny"]


def _wait_idle(url: str) -> dict:
    """The engine's counts once nothing runs or waits (requests end a step after their last
    token is read, so poll; the generous bound only keeps a hung engine from hanging the run,
    a loaded machine may take seconds)."""
    deadline = time.monotonic() + 60
    while True:
        h = _health(url)
        if h["running"] == 0 and h["waiting"] == 0:
            return h
        if time.monotonic() > deadline:
            raise AssertionError(f"the engine is still busy after 60 s: {h}")
        time.sleep(0.05)


def _generate_past_eos(model, prompt: str, max_tokens: int):
    """``model.generate`` as the server's ``ignore_eos`` runs: no id ends the answer."""
    saved = model.eos_token_ids
    model.eos_token_ids = frozenset()
    try:
        return model.generate(prompt, max_new_tokens=max_tokens)
    finally:
        model.eos_token_ids = saved


def _random_text(rng, lo: int, hi: int) -> str:
    return "".join(chr(c) for c in rng.integers(97, 123, int(rng.integers(lo, hi))))


def test_models_health_and_the_client_round_trip(server, tiny):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert "ready in" in server.log()
    prompt = "the quick brown fox"
    ref = tiny.generate(prompt, max_new_tokens=8)
    out = client.completions.create(model="tiny", prompt=prompt, max_tokens=8, temperature=0)
    assert out.choices[0].text == ref.text and out.choices[0].finish_reason == ref.finish_reason
    assert out.usage.completion_tokens == len(ref.token_ids)
    assert out.usage.prompt_tokens == len(tiny.tokenizer.encode(prompt))
    messages = [{"role": "user", "content": "hello"}]
    ref = tiny.chat(messages, max_new_tokens=6)
    out = client.chat.completions.create(model="tiny", messages=messages, max_tokens=6,
                                         temperature=0, logprobs=True, top_logprobs=3)  # fmt: skip
    assert out.choices[0].message.content == ref.text
    lps = out.choices[0].logprobs.content
    assert len(lps) == len(ref.token_ids) and all(len(t.top_logprobs) == 3 for t in lps)
    assert all(t.logprob == t.top_logprobs[0].logprob for t in lps)  # greedy: the best one


def test_32_concurrent_streams_equal_their_sequential_answers(server, tiny):
    rng = np.random.default_rng()
    system = "You are a terse assistant. " * 4  # shared: a prefix-cache hit for every chat
    jobs = []
    for i in range(32):
        kind = "chat" if i % 2 else "completion"
        text = _random_text(rng, 2, 60)
        sampling = {"temperature": 0.0} if i % 4 < 2 else {
            "temperature": float(rng.uniform(0.5, 1.2)), "top_p": 0.9,
            "seed": int(rng.integers(0, 2**31))}  # fmt: skip
        jobs.append((kind, text, int(rng.integers(4, 20)), sampling))

    def reference(kind, text, max_tokens, sampling):
        if kind == "chat":
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": text}]
            return tiny.chat(msgs, max_new_tokens=max_tokens, **sampling).text
        return tiny.generate(text, max_new_tokens=max_tokens, **sampling).text

    refs = [reference(*job) for job in jobs]
    before = httpx.get(f"{server.url}/metrics").text

    async def one(client, kind, text, max_tokens, sampling):
        if kind == "chat":
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": text}]
            stream = await client.chat.completions.create(
                model="tiny", messages=msgs, max_tokens=max_tokens, stream=True, **sampling
            )
            return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        stream = await client.completions.create(
            model="tiny", prompt=text, max_tokens=max_tokens, stream=True, **sampling
        )
        return "".join([c.choices[0].text async for c in stream if c.choices])

    async def everyone():
        async with openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused",
                                      max_retries=0) as client:  # fmt: skip
            return await asyncio.gather(*(one(client, *job) for job in jobs))

    got = asyncio.run(everyone())
    assert got == refs
    after = httpx.get(f"{server.url}/metrics").text
    hits = _metric(after, "prefix_cache_hits_total") - _metric(before, "prefix_cache_hits_total")
    assert hits == 0 if INVARIANT else hits > 0
    assert _wait_idle(server.url)["kv_blocks_used"] == 0
    assert _metric(httpx.get(f"{server.url}/metrics").text, "kv_blocks_used") == 0


def test_kv_memory_running_out_mid_generation_preempts_then_completes(server, tiny):
    # Five 100-token prompts fit the 64 blocks (7 each) and are admitted together; grown by 140
    # tokens each they would need 75: some are preempted, recomputed, and still answer right.
    rng = np.random.default_rng()
    prompts = [_random_text(rng, 100, 101) for _ in range(5)]
    refs = [_generate_past_eos(tiny, p, 140) for p in prompts]
    before = _metric(httpx.get(f"{server.url}/metrics").text, "preemptions_total")

    async def everyone():
        async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
            return await asyncio.gather(*(client.post("/v1/completions", json={
                **_COMP, "prompt": p, "max_tokens": 140, "temperature": 0, "ignore_eos": True})
                for p in prompts))  # fmt: skip

    answers = asyncio.run(everyone())
    assert [r.json()["choices"][0]["text"] for r in answers] == [ref.text for ref in refs]
    after = _metric(httpx.get(f"{server.url}/metrics").text, "preemptions_total")
    assert after > before
    assert _wait_idle(server.url)["kv_blocks_used"] == 0


# --- bad input: each answered with an OpenAI error, the server still right afterwards ----------

_CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
_COMP = {"model": "tiny", "prompt": "hi"}
BAD = [
    ("malformed JSON", "/v1/chat/completions", b'{"model": "tiny", "messages": [', 400),
    ("a JSON array body", "/v1/completions", b"[1, 2]", 400),
    ("unknown model", "/v1/completions", {**_COMP, "model": "nope"}, 404),
    ("prompt longer than the context", "/v1/completions", {**_COMP, "prompt": "x" * 400}, 400),
    ("max_tokens 0", "/v1/completions", {**_COMP, "max_tokens": 0}, 400),
    ("max_tokens -5", "/v1/chat/completions", {**_CHAT, "max_tokens": -5}, 400),
    ("max_tokens huge", "/v1/chat/completions", {**_CHAT, "max_tokens": 10**9}, 400),
    ("max_tokens a string", "/v1/completions", {**_COMP, "max_tokens": "10"}, 400),
    ("temperature -1", "/v1/completions", {**_COMP, "temperature": -1}, 400),
    ("top_p 0", "/v1/completions", {**_COMP, "top_p": 0}, 400),
    ("top_p 1.5", "/v1/chat/completions", {**_CHAT, "top_p": 1.5}, 400),
    ("top_k -3", "/v1/completions", {**_COMP, "top_k": -3}, 400),
    ("min_p 2", "/v1/completions", {**_COMP, "min_p": 2}, 400),
    ("seed a float", "/v1/completions", {**_COMP, "seed": 1.5}, 400),
    ("top_logprobs 6", "/v1/chat/completions", {**_CHAT, "logprobs": True, "top_logprobs": 6}, 400),
    ("logprobs 6", "/v1/completions", {**_COMP, "logprobs": 6}, 400),
    ("n 2", "/v1/chat/completions", {**_CHAT, "n": 2}, 400),
    ("stop a number", "/v1/completions", {**_COMP, "stop": 3}, 400),
    ("five stop strings", "/v1/completions", {**_COMP, "stop": list("abcde")}, 400),
    ("frequency_penalty", "/v1/completions", {**_COMP, "frequency_penalty": 1.0}, 400),
    ("no messages", "/v1/chat/completions", {"model": "tiny"}, 400),
    ("a message without a role", "/v1/chat/completions",
     {"model": "tiny", "messages": [{"content": "hi"}]}, 400),
    ("an image part", "/v1/chat/completions", {"model": "tiny", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, 400),
    ("empty prompt", "/v1/completions", {**_COMP, "prompt": ""}, 400),
    ("token id out of range", "/v1/completions", {**_COMP, "prompt": [5, 100000]}, 400),
    ("no model", "/v1/completions", {"prompt": "hi"}, 400),
    ("stream not a bool", "/v1/completions", {**_COMP, "stream": "yes"}, 400),
]  # fmt: skip


@pytest.mark.parametrize(("case", "path", "body", "status"), BAD, ids=[b[0] for b in BAD])
def test_bad_requests_get_openai_errors_and_leave_the_server_right(
    server, tiny, case, path, body, status
):
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(f"{server.url}{path}", content=raw,
                   headers={"Content-Type": "application/json"}, timeout=60)  # fmt: skip
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    ref = tiny.generate("abc", max_new_tokens=3)
    ok = httpx.post(f"{server.url}/v1/completions", timeout=60,
                    json={**_COMP, "prompt": "abc", "max_tokens": 3, "temperature": 0})  # fmt: skip
    assert ok.status_code == 200 and ok.json()["choices"][0]["text"] == ref.text


def test_unknown_fields_routes_and_methods(server, tiny):
    ref = tiny.generate("abc", max_new_tokens=3)
    r = httpx.post(f"{server.url}/v1/completions", json={
        **_COMP, "prompt": "abc", "max_tokens": 3, "temperature": 0, "user": "me",
        "frobnicate": {"x": 1}}, timeout=60)  # fmt: skip
    assert r.status_code == 200 and r.json()["choices"][0]["text"] == ref.text
    r = httpx.get(f"{server.url}/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.get(f"{server.url}/v1/completions")
    assert r.status_code == 405 and "error" in r.json()
    assert _metric(httpx.get(f"{server.url}/metrics").text, "kv_blocks_used") >= 0


def test_a_client_disconnecting_mid_stream_frees_its_blocks(server, tiny):
    body = {**_COMP, "prompt": "a long answer please", "max_tokens": 200, "stream": True,
            "ignore_eos": True, "temperature": 0}  # fmt: skip
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        assert _health(server.url)["kv_blocks_used"] > 0
    h = _wait_idle(server.url)
    assert h["kv_blocks_used"] == 0
    text = httpx.get(f"{server.url}/metrics").text
    assert re.search(r'requests_total\{model="tiny",outcome="abort"\} [1-9]', text)
    ref = tiny.generate("abc", max_new_tokens=3)
    ok = httpx.post(f"{server.url}/v1/completions", timeout=60,
                    json={**_COMP, "prompt": "abc", "max_tokens": 3, "temperature": 0})  # fmt: skip
    assert ok.json()["choices"][0]["text"] == ref.text


# --- a full queue, then SIGTERM, on a server with one batch slot and two queue places ----------


def test_full_queue_is_429_and_sigterm_is_graceful(tiny_path, tiny):
    with run_server([f"tiny={tiny_path}"], "--dtype", TEST_DTYPE, "--max-model-len",
                    str(MAX_LEN), "--max-batch", "1", "--max-queue", "2", "--kv-memory",
                    KV_MEMORY, *(["--batch-invariant"] if INVARIANT else [])) as srv:  # fmt: skip
        long_body = {**_COMP, "prompt": "go on", "max_tokens": 150, "stream": True,
                     "ignore_eos": True, "temperature": 0}  # fmt: skip
        ref_long = _generate_past_eos(tiny, "go on", 150)

        async def scenario():
            async with httpx.AsyncClient(base_url=srv.url, timeout=120) as client:

                async def stream_all():
                    pieces = []
                    async with client.stream("POST", "/v1/completions", json=long_body) as r:
                        async for line in r.aiter_lines():
                            if line.startswith("data: ") and line != "data: [DONE]":
                                pieces.append(json.loads(line[6:])["choices"][0])
                            elif line == "data: [DONE]":
                                pieces.append("DONE")
                    return pieces

                running = asyncio.create_task(stream_all())
                while (await client.get("/health")).json()["models"]["tiny"]["running"] < 1:
                    await asyncio.sleep(0.05)
                queued = [asyncio.create_task(client.post("/v1/completions", json={
                    **_COMP, "prompt": p, "max_tokens": 3, "temperature": 0}))
                    for p in ("abc", "xyz")]  # fmt: skip
                while (await client.get("/health")).json()["models"]["tiny"]["waiting"] < 2:
                    await asyncio.sleep(0.05)
                rejected = await client.post("/v1/completions", json={**_COMP, "max_tokens": 2})
                assert rejected.status_code == 429
                assert int(rejected.headers["Retry-After"]) >= 1
                assert rejected.json()["error"]["code"] == "queue_full"
                done = await asyncio.gather(*queued)  # nothing admitted is lost
                for r, p in zip(done, ("abc", "xyz"), strict=True):
                    assert r.json()["choices"][0]["text"] == tiny.generate(p, max_new_tokens=3).text
                # SIGTERM while the long stream runs: it still ends properly, then the server
                # exits.
                srv.process.terminate()
                return await running

        pieces = asyncio.run(scenario())
        assert pieces[-1] == "DONE" and pieces[-2]["finish_reason"] == "length"
        assert "".join(p["text"] for p in pieces[:-1]) == ref_long.text
        assert srv.process.wait(60) == 0
