"""The OpenAI-compatible HTTP API over one engine per model (FastAPI).

Routes: ``POST /v1/chat/completions`` and ``/v1/completions`` (server-sent events with
``"stream": true``), ``GET /v1/models``, ``/health`` and ``/metrics`` (Prometheus text).
Each request is tokenized here and handed to its model's :class:`~pygpukit.llm.engine.Engine`;
the engine thread pushes its outputs into the request's asyncio queue. A client that
disconnects has its request aborted (its KV blocks are freed at the engine's next step); a full
queue is a 429 with ``Retry-After``; errors have OpenAI's body.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..engine import Engine, EngineClosedError, QueueFullError, RequestOutput, render_prometheus
from ..errors import TokenizerError
from .protocol import APIError, ParsedRequest, parse_chat, parse_completion

__all__ = ["create_app"]

#: Seconds between checks that a non-streaming client is still connected.
_DISCONNECT_POLL_S = 0.25

#: Times a stream of a model without a latency promise lets the event loop run other work
#: first while a protected model's outputs wait to be written (see _Server.protected_first).
_MAX_YIELDS = 8

#: The event loop steps aside for a protected engine's host work (host turns) for at most
#: this long at a time, and not again for as long after: it serves every model's clients, so
#: a protected model's long host phase (a prefill) must not stall it.
_LOOP_YIELD_S = 1e-3


def _json_body(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the body is not valid JSON ({exc})", code="invalid_json") from None


class _Outbox:
    """Hands engine outputs to their requests' asyncio queues, one loop wake-up per batch.

    An engine step makes an output for every running request (64 at a time); waking the event
    loop once per output would cost a self-pipe write and a loop turn each. Outputs are queued
    here under a lock instead, and the first one of a batch schedules one callback that
    delivers them all, in order.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._lock = threading.Lock()
        self._items: list[tuple[asyncio.Queue[RequestOutput], RequestOutput]] = []
        self._scheduled = False
        #: An output of a protected model (host turns) is here, not delivered yet.
        self.protected_waiting = False

    def put(
        self, queue: asyncio.Queue[RequestOutput], out: RequestOutput, *, protected: bool = False
    ) -> None:
        """Queue ``out`` for ``queue`` (any thread); ``protected``: a protected model's."""
        with self._lock:
            self._items.append((queue, out))
            if protected:
                self.protected_waiting = True
            if self._scheduled:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is left to read it
            self.loop.call_soon_threadsafe(self._deliver)

    def _deliver(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
            self.protected_waiting = False
        for queue, out in items:
            queue.put_nowait(out)


class _Server:
    """The app's state: the engines by model name, counters, the shutdown flag."""

    def __init__(self, engines: Mapping[str, Engine], grace_s: float) -> None:
        self.engines = dict(engines)
        self.grace_s = grace_s
        self.created = int(time.time())
        self.http_errors: dict[int, int] = {}
        self.closing = False
        self._outboxes: dict[asyncio.AbstractEventLoop, _Outbox] = {}
        #: The output queues of the running requests of protected models (host turns, see
        #: pygpukit.llm.engine.host_priority): the other models' streams let them go first.
        self.protected_queues: set[asyncio.Queue[RequestOutput]] = set()
        self._loop_yielded = 0.0  # when the event loop last stepped aside (perf_counter)

    def loop_yield(self, engine: Engine) -> None:
        """Step aside for a protected engine's due host work, on the event loop.

        Called before writing a stream of ``engine`` (a model without a latency promise):
        waits at most ``_LOOP_YIELD_S``, then not again for as long.
        """
        if time.perf_counter() - self._loop_yielded < _LOOP_YIELD_S:
            return
        if engine.yield_host(_LOOP_YIELD_S):
            self._loop_yielded = time.perf_counter()

    async def protected_first(self, box: _Outbox) -> None:
        """Let the event loop write a protected model's waiting outputs first.

        Called by a stream of another model before it writes: while such outputs wait (in
        the outbox or in a protected request's queue), the stream goes to the back of the
        loop's queue of ready work, at most ``_MAX_YIELDS`` times.
        """
        for _ in range(_MAX_YIELDS):
            if not (box.protected_waiting or any(not q.empty() for q in self.protected_queues)):
                return
            await asyncio.sleep(0)

    def outbox(self) -> _Outbox:
        """The running loop's :class:`_Outbox` (made at its first use)."""
        loop = asyncio.get_running_loop()
        box = self._outboxes.get(loop)
        if box is None:
            box = self._outboxes[loop] = _Outbox(loop)
        return box

    def engine(self, name: str) -> Engine:
        engine = self.engines.get(name)
        if engine is None:
            raise APIError(404, f"the model {name!r} does not exist; this server has "
                           f"{sorted(self.engines)}", type="not_found_error", param="model",
                           code="model_not_found")  # fmt: skip
        return engine

    def error(self, exc: APIError) -> JSONResponse:
        self.http_errors[exc.status] = self.http_errors.get(exc.status, 0) + 1
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def _token_text(engine: Engine, token: int) -> str:
    tok = engine.tokenizer
    return tok.decode([token], skip_special_tokens=False) if tok is not None else ""


def _chat_logprobs(engine: Engine, outputs: list[RequestOutput]) -> dict[str, Any] | None:
    entries = []
    for out in outputs:
        for lp in out.logprobs:
            text = _token_text(engine, lp.token_id)
            top = [{"token": (t := _token_text(engine, i)), "logprob": v,
                    "bytes": list(t.encode())} for i, v in lp.top]  # fmt: skip
            entries.append({"token": text, "logprob": lp.logprob, "bytes": list(text.encode()),
                            "top_logprobs": top})  # fmt: skip
    return {"content": entries} if entries else None


def _completion_logprobs(
    engine: Engine, outputs: list[RequestOutput], offset: int
) -> dict[str, Any] | None:
    tokens, values, tops, offsets = [], [], [], []
    for out in outputs:
        for lp in out.logprobs:
            text = _token_text(engine, lp.token_id)
            tokens.append(text)
            values.append(lp.logprob)
            tops.append({_token_text(engine, i): v for i, v in lp.top})
            offsets.append(offset)
            offset += len(text)
    if not tokens:
        return None
    return {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops,
            "text_offset": offsets}  # fmt: skip


class _ChunkText:
    """The JSON of a streamed chunk without log-probabilities, from a prefix made once.

    A server at 64 clients writes a chunk per token per client; building and encoding the
    whole dict each time is most of that chunk's cost. The object's fixed fields (``head``)
    are encoded once, the text and finish reason per chunk; ``field`` names the text's place
    (``"text"`` for completions, the delta's ``"content"`` for chat).
    """

    def __init__(self, head: dict[str, Any], chat: bool) -> None:
        prefix = json.dumps(head)[:-1]
        if chat:
            self._open = prefix + ', "choices": [{"index": 0, "delta": {"content": '
            self._empty = prefix + ', "choices": [{"index": 0, "delta": {}'
            self._close = ', "logprobs": null, "finish_reason": '
        else:
            self._open = prefix + ', "choices": [{"index": 0, "text": '
            self._empty = ""
            self._close = ', "logprobs": null, "finish_reason": '
        self._chat = chat

    def __call__(self, out: RequestOutput) -> str:
        """The chunk's JSON text (equal to ``json.dumps`` of the chunk's dict)."""
        reason = json.dumps(out.finish_reason)
        if self._chat:
            if not out.text:
                return f"{self._empty}{self._close}{reason}}}]}}"
            return f"{self._open}{json.dumps(out.text)}}}{self._close}{reason}}}]}}"
        return f"{self._open}{json.dumps(out.text)}{self._close}{reason}}}]}}"


def _usage(last: RequestOutput) -> dict[str, Any]:
    return {
        "prompt_tokens": last.prompt_tokens,
        "completion_tokens": last.completion_tokens,
        "total_tokens": last.prompt_tokens + last.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": last.cached_tokens},
    }


def create_app(engines: Mapping[str, Engine], *, grace_s: float = 30.0) -> FastAPI:
    """The FastAPI app serving ``engines`` (model name -> engine).

    The engines' threads start with the app and stop when it shuts down, after giving running
    requests up to ``grace_s`` seconds to finish.
    """
    server = _Server(engines, grace_s)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        for engine in server.engines.values():
            engine.start()
        yield
        server.closing = True
        loop = asyncio.get_running_loop()
        stops = [
            loop.run_in_executor(
                None, functools.partial(e.shutdown, wait_for_requests=server.grace_s)
            )
            for e in server.engines.values()
        ]
        await asyncio.gather(*stops)

    app = FastAPI(title="PyGPUkit OpenAI-compatible server", lifespan=lifespan)
    app.state.server = server

    @app.exception_handler(APIError)
    async def api_error(request: Request, exc: APIError) -> JSONResponse:
        return server.error(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return server.error(APIError(exc.status_code, str(exc.detail), type=kind))

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return server.error(APIError(500, f"internal error: {type(exc).__name__}: {exc}",
                                     type="server_error"))  # fmt: skip

    async def submit(
        engine: Engine, parsed: ParsedRequest, ids: list[int]
    ) -> tuple[str, asyncio.Queue[RequestOutput]]:
        if server.closing:
            raise APIError(503, "the server is shutting down", type="server_error")
        try:
            engine.check_prompt(ids)
        except ValueError as exc:
            raise APIError(
                400, str(exc), param="messages", code="context_length_exceeded"
            ) from None
        room = engine.max_model_len - len(ids)
        max_tokens = parsed.max_tokens if parsed.max_tokens is not None else room
        if max_tokens > room:
            raise APIError(
                400, f"max_tokens is {max_tokens} but the prompt has {len(ids)} tokens and the "
                f"context is {engine.max_model_len}: at most {room} can be generated",
                param="max_tokens", code="context_length_exceeded",
            )  # fmt: skip
        queue: asyncio.Queue[RequestOutput] = asyncio.Queue()
        sink = functools.partial(server.outbox().put, queue, protected=engine.protected)

        try:
            rid = engine.submit(ids, parsed.params(max_tokens), sink,
                                request_id=f"{uuid.uuid4().hex}")  # fmt: skip
        except QueueFullError as exc:
            raise APIError(
                429,
                str(exc),
                type="rate_limit_error",
                code="queue_full",
                headers={"Retry-After": str(max(1, round(exc.retry_after)))},
            ) from None
        except EngineClosedError as exc:
            raise APIError(503, str(exc), type="server_error") from None
        except ValueError as exc:
            raise APIError(400, str(exc), code="invalid_value") from None
        if engine.protected:
            server.protected_queues.add(queue)  # until its reader ends (stream, collect)
        return rid, queue

    async def collect(
        request: Request, engine: Engine, rid: str, queue: asyncio.Queue[RequestOutput]
    ) -> list[RequestOutput]:
        outputs: list[RequestOutput] = []
        try:
            while True:
                try:
                    out = await asyncio.wait_for(queue.get(), _DISCONNECT_POLL_S)
                except TimeoutError:
                    if await request.is_disconnected():
                        engine.abort(rid)
                        return outputs
                    continue
                outputs.append(out)
                if out.finish_reason is not None:
                    return outputs
        except BaseException:
            engine.abort(rid)
            raise
        finally:
            server.protected_queues.discard(queue)

    def failed(last: RequestOutput) -> APIError | None:
        if last.finish_reason == "error":
            return APIError(500, f"generation failed: {last.error}", type="server_error")
        return None

    async def stream(
        engine: Engine, rid: str, queue: asyncio.Queue[RequestOutput], first: dict[str, Any] | None,
        chunk: Any, include_usage: bool,
    ) -> AsyncIterator[str]:  # fmt: skip
        done = False
        box = server.outbox()
        try:
            if first is not None:
                yield f"data: {json.dumps(first)}\n\n"
            while not done:
                # Every output already here goes out in one write (a client that fell behind
                # catches up in one send, not one per token): still one event per token.
                outs = [await queue.get()]
                while not queue.empty():
                    outs.append(queue.get_nowait())
                if not engine.protected and server.protected_queues:
                    # A model without a latency promise writes after the protected models'
                    # host work (engine/host_priority.py) and their waiting outputs.
                    server.loop_yield(engine)
                    await server.protected_first(box)
                events = []
                for out in outs:
                    if (err := failed(out)) is not None:
                        events.append(f"data: {json.dumps(err.body())}\n\n")
                        done = True
                        break
                    body = chunk(out)
                    text = body if isinstance(body, str) else json.dumps(body)
                    events.append(f"data: {text}\n\n")
                    if out.finish_reason is not None:
                        done = True
                        if include_usage:
                            events.append(f"data: {json.dumps(chunk(out, usage=True))}\n\n")
                        break
                if done:
                    events.append("data: [DONE]\n\n")
                yield "".join(events)
        finally:
            server.protected_queues.discard(queue)
            if not done:  # the client went away (or the app is cancelling us): free the blocks
                engine.abort(rid)

    def sse(body: AsyncIterator[str]) -> StreamingResponse:
        return StreamingResponse(body, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache"})  # fmt: skip

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(request: Request) -> Response:
        parsed, messages = parse_chat(_json_body(await request.body()))
        engine = server.engine(parsed.model)
        tok = engine.tokenizer
        if tok is None:
            raise APIError(400, f"the model {parsed.model!r} has no tokenizer (no chat template)")
        try:
            text = tok.apply_chat_template(messages, add_generation_prompt=True)
        except TokenizerError as exc:
            raise APIError(400, f"the chat template failed: {exc}", param="messages") from None
        ids = tok.encode(text, add_special_tokens=False)
        rid, queue = await submit(engine, parsed, ids)
        cid, created = f"chatcmpl-{rid}", int(time.time())
        head = {"id": cid, "created": created, "model": parsed.model}
        if parsed.stream:
            plain = _ChunkText({**head, "object": "chat.completion.chunk"}, chat=True)

            def chunk(out: RequestOutput, usage: bool = False) -> dict[str, Any] | str:
                if usage:
                    return {**head, "object": "chat.completion.chunk", "choices": [],
                            "usage": _usage(out)}  # fmt: skip
                if not out.logprobs:
                    return plain(out)
                choice = {"index": 0, "delta": {"content": out.text} if out.text else {},
                          "logprobs": _chat_logprobs(engine, [out]),
                          "finish_reason": out.finish_reason}  # fmt: skip
                return {**head, "object": "chat.completion.chunk", "choices": [choice]}

            first = {**head, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                 "finish_reason": None}]}  # fmt: skip
            return sse(stream(engine, rid, queue, first, chunk, parsed.include_usage))
        outputs = await collect(request, engine, rid, queue)
        if not outputs or outputs[-1].finish_reason is None:
            return Response(status_code=499)  # the client is gone; nobody reads this
        if (err := failed(outputs[-1])) is not None:
            raise err
        message = {"role": "assistant", "content": "".join(o.text for o in outputs)}
        return JSONResponse(
            {
                **head,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": _chat_logprobs(engine, outputs),
                        "finish_reason": outputs[-1].finish_reason,
                    }
                ],
                "usage": _usage(outputs[-1]),
            }
        )

    @app.post("/v1/completions", response_model=None)
    async def completions(request: Request) -> Response:
        parsed = parse_completion(_json_body(await request.body()))
        engine = server.engine(parsed.model)
        try:
            ids = engine.prompt_ids(parsed.prompt)
        except ValueError as exc:
            raise APIError(400, str(exc), param="prompt", code="invalid_value") from None
        rid, queue = await submit(engine, parsed, ids)
        cid, created = f"cmpl-{rid}", int(time.time())
        head = {"id": cid, "object": "text_completion", "created": created, "model": parsed.model}
        if parsed.stream:
            offset = [0]

            plain = _ChunkText(head, chat=False)

            def chunk(out: RequestOutput, usage: bool = False) -> dict[str, Any] | str:
                if usage:
                    return {**head, "choices": [], "usage": _usage(out)}
                if not out.logprobs:
                    return plain(out)
                lps = _completion_logprobs(engine, [out], offset[0])
                offset[0] += sum(len(t) for t in (lps or {}).get("tokens", []))
                return {**head, "choices": [{"index": 0, "text": out.text, "logprobs": lps,
                                             "finish_reason": out.finish_reason}]}  # fmt: skip

            return sse(stream(engine, rid, queue, None, chunk, parsed.include_usage))
        outputs = await collect(request, engine, rid, queue)
        if not outputs or outputs[-1].finish_reason is None:
            return Response(status_code=499)
        if (err := failed(outputs[-1])) is not None:
            raise err
        return JSONResponse(
            {
                **head,
                "choices": [
                    {
                        "index": 0,
                        "text": "".join(o.text for o in outputs),
                        "logprobs": _completion_logprobs(engine, outputs, 0),
                        "finish_reason": outputs[-1].finish_reason,
                    }
                ],
                "usage": _usage(outputs[-1]),
            }
        )

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [
            {"id": name, "object": "model", "created": server.created, "owned_by": "pygpukit",
             "max_model_len": e.max_model_len} for name, e in server.engines.items()]}  # fmt: skip

    @app.get("/health", response_model=None)
    async def health() -> Response:
        body = {"status": "shutting_down" if server.closing else "ok",
                "models": {name: e.stats() for name, e in server.engines.items()}}  # fmt: skip
        return JSONResponse(body, status_code=503 if server.closing else 200)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        text = render_prometheus([(name, e.metrics) for name, e in server.engines.items()])
        lines = ["# HELP pygpukit_serve_http_errors_total HTTP error responses, by status",
                 "# TYPE pygpukit_serve_http_errors_total counter"]  # fmt: skip
        lines += [f'pygpukit_serve_http_errors_total{{status="{s}"}} {n}'
                  for s, n in sorted(server.http_errors.items())]  # fmt: skip
        return PlainTextResponse(text + "\n".join(lines) + "\n",
                                 media_type="text/plain; version=0.0.4")  # fmt: skip

    return app
