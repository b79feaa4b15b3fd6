"""The OpenAI request bodies: checked field by field into what the engine takes.

Unknown fields are ignored, as OpenAI's API ignores them; a known field with a wrong type or
value is an :class:`APIError` (HTTP 400) naming the field and the accepted values. Extensions
vLLM also takes (``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``) are accepted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engine import MAX_LOGPROBS, RequestParams
from ..generate import SamplingParams

__all__ = ["APIError", "ParsedRequest", "parse_chat", "parse_completion"]

#: Stop strings per request at most (OpenAI's limit).
MAX_STOP = 4


class APIError(Exception):
    """An error answered as OpenAI does: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = (
            status, message, type, param, code)  # fmt: skip
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON error body."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}  # fmt: skip


def _bad(param: str, message: str) -> APIError:
    return APIError(400, f"'{param}': {message}", param=param, code="invalid_value")


def _number(body: Mapping[str, Any], name: str, default: float, lo: float, hi: float,
            lo_open: bool = False) -> float:  # fmt: skip
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(name, f"must be a number, got {value!r}")
    if value < lo or value > hi or (lo_open and value == lo):
        left = "(" if lo_open else "["
        raise _bad(name, f"must be in {left}{lo}, {hi}], got {value!r}")
    return float(value)


def _int(body: Mapping[str, Any], name: str, lo: int, hi: int | None = None) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"must be an integer, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise _bad(name, f"must be {bound}, got {value}")
    return value


def _bool(body: Mapping[str, Any], name: str) -> bool:
    value = body.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _bad(name, f"must be true or false, got {value!r}")
    return value


@dataclass(frozen=True)
class ParsedRequest:
    """A checked request: the model name, the prompt (text or ids) and the engine settings.

    ``max_tokens`` None means "up to the context"; the app resolves it once the prompt is
    tokenized.
    """

    model: str
    prompt: str | list[int]
    max_tokens: int | None
    sampling: SamplingParams
    stop: tuple[str, ...]
    logprobs: int | None
    stream: bool
    include_usage: bool
    ignore_eos: bool

    def params(self, max_tokens: int) -> RequestParams:
        """The engine's :class:`RequestParams` with the resolved ``max_tokens``."""
        return RequestParams(max_tokens=max_tokens, sampling=self.sampling, stop=self.stop,
                             logprobs=self.logprobs, ignore_eos=self.ignore_eos)  # fmt: skip


def _common(body: Any, max_tokens_default: int | None) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "is required: the name of a model GET /v1/models lists")
    n = _int(body, "n", 1)
    if n is not None and n != 1:
        raise _bad("n", f"only n=1 is supported, got {n}")
    for name in ("presence_penalty", "frequency_penalty"):
        if _number(body, name, 0.0, -2.0, 2.0) != 0.0:
            raise _bad(name, "is not supported (use repetition_penalty); leave it at 0")
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(stop)
    else:
        raise _bad("stop", f"must be a string or a list of strings, got {stop!r}")
    if len(stops) > MAX_STOP:
        raise _bad("stop", f"at most {MAX_STOP} stop strings, got {len(stops)}")
    max_tokens = _int(body, "max_tokens", 1)
    if max_tokens is None:
        max_tokens = _int(body, "max_completion_tokens", 1)
    seed = _int(body, "seed", -(2**63), 2**64 - 1)
    try:
        sampling = SamplingParams(
            temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
            top_k=_int(body, "top_k", -1) or 0,  # -1 (vLLM's "off") and 0 keep every token
            top_p=_number(body, "top_p", 1.0, 0.0, 1.0, lo_open=True),
            min_p=_number(body, "min_p", 0.0, 0.0, 1.0),
            repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.0, 10.0, lo_open=True),
            seed=None if seed is None else seed % 2**64,
        )
    except (TypeError, ValueError) as exc:
        raise APIError(400, str(exc), code="invalid_value") from None
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("stream_options", 'must be an object such as {"include_usage": true}')
    return {
        "model": model,
        "max_tokens": max_tokens if max_tokens is not None else max_tokens_default,
        "sampling": sampling,
        "stop": stops,
        "stream": _bool(body, "stream"),
        "include_usage": bool(options and _bool(options, "include_usage")),
        "ignore_eos": _bool(body, "ignore_eos"),
    }


def _content(message: Mapping[str, Any], i: int) -> str:
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise _bad(f"messages[{i}].content", "only text parts are supported")
            if not isinstance(part.get("text"), str):
                raise _bad(f"messages[{i}].content", "a text part needs a 'text' string")
            parts.append(part["text"])
        return "".join(parts)
    raise _bad(f"messages[{i}].content", f"must be a string or a list of parts, got {content!r}")


def parse_chat(body: Any) -> tuple[ParsedRequest, list[dict[str, str]]]:
    """A ``/v1/chat/completions`` body: the request and its messages (role and text)."""
    common = _common(body, None)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "is required: a non-empty list of {role, content} objects")
    checked = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _bad(f"messages[{i}]", "must be an object with a 'role' string")
        if m["role"] not in ("system", "user", "assistant", "developer", "tool"):
            raise _bad(f"messages[{i}].role", f"unknown role {m['role']!r}")
        checked.append({"role": m["role"], "content": _content(m, i)})
    top = _int(body, "top_logprobs", 0, MAX_LOGPROBS)
    logprobs = _bool(body, "logprobs")
    if top is not None and not logprobs:
        raise _bad("top_logprobs", "needs 'logprobs': true")
    parsed = ParsedRequest(prompt="", logprobs=(top or 0) if logprobs else None, **common)
    return parsed, checked


def parse_completion(body: Any) -> ParsedRequest:
    """A ``/v1/completions`` body (``max_tokens`` defaults to 16, as OpenAI's)."""
    common = _common(body, 16)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise _bad("prompt", "must be a string or a non-empty list of token ids (one prompt)")
    elif not isinstance(prompt, str) or not prompt:
        raise _bad("prompt", "is required: a non-empty string or a list of token ids")
    if _bool(body, "echo"):
        raise _bad("echo", "is not supported; leave it false")
    if body.get("suffix") is not None:
        raise _bad("suffix", "is not supported")
    logprobs = _int(body, "logprobs", 0, MAX_LOGPROBS)
    return ParsedRequest(prompt=prompt, logprobs=logprobs, **common)
