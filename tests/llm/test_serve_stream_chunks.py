"""Streamed chunks made from a pre-encoded prefix are the JSON of the chunk dicts that OpenAI's
format (and the server's dict path, used with log-probabilities) gives."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("fastapi")

from pygpukit.llm.engine import RequestOutput
from pygpukit.llm.serve.app import _ChunkText


def _texts(rng) -> list[str]:
    pool = ['"', "\\", "\n", "\t", "é", "日本", "\u2028", "😀", "a", " ", "{", "}", "</s>", "\x00"]
    return [""] + ["".join(rng.choice(pool, int(rng.integers(1, 8)))) for _ in range(40)]


@pytest.mark.parametrize("chat", [False, True])
def test_chunk_text_is_the_chunk_dicts_json(chat):
    rng = np.random.default_rng()
    head = {"id": f"x-{rng.integers(1 << 30)}", "created": int(rng.integers(1 << 31)),
            "model": "m\"odel"}  # fmt: skip
    if chat:
        head["object"] = "chat.completion.chunk"
    else:
        head["object"] = "text_completion"
    make = _ChunkText(head, chat=chat)
    for text in _texts(rng):
        for reason in (None, "stop", "length"):
            out = RequestOutput("r", text, (1,), (), reason)
            if chat:
                choice = {"index": 0, "delta": {"content": text} if text else {},
                          "logprobs": None, "finish_reason": reason}  # fmt: skip
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": reason}
            want = {**head, "choices": [choice]}
            got = make(out)
            assert json.loads(got) == want
            assert list(json.loads(got)) == list(want)  # the same key order as the dict
