"""The load generator's own HTTP client against a scripted server: tokens counted per event
(events split across chunks, several in one chunk), keep-alive between a client's requests,
and the errors it must not count as tokens (a refused request, an error event)."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import threading

import pytest

from pygpukit.llm.serve.loadgen import _run, load_arguments, main, run_load


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _serve(replies: list[list[bytes]], status: int = 200) -> tuple[asyncio.Server, list]:
    """A server answering each request with the next reply's chunks (keep-alive).

    Also returns what it saw: a ``{"connection": True}`` per connection and each request's
    body, in order.
    """
    seen: list[dict] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append({"connection": True})
        while replies:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))  # fmt: skip
            seen.append(json.loads(await reader.readexactly(length)))
            if status != 200:
                body = b'{"error": {"message": "the queue is full"}}'
                writer.write(b"HTTP/1.1 %d Too Many\r\ncontent-length: %d\r\n\r\n%s"
                             % (status, len(body), body))  # fmt: skip
                await writer.drain()
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                         b"transfer-encoding: chunked\r\n\r\n")  # fmt: skip
            for piece in replies.pop(0):
                writer.write(_chunk(piece))
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0), seen


def _url(server: asyncio.Server) -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


def test_tokens_are_counted_per_event_over_one_kept_alive_connection():
    async def main():
        first = [
            b'data: {"t": 1}\n\ndata: {"t"',
            b": 2}\n\n",
            b'data: {"t": 3}\n\ndata: [DONE]\n\n',
        ]
        second = [b'data: {"t": 1}\n\n', b'data: {"t": 2}\n\ndata: [DONE]\n\n']
        server, seen = await _serve([first, second])
        async with server:
            result = await _run(_url(server), "m", 1, 2, 4, 3, 50, seed=0)
        return result, seen

    result, seen = asyncio.run(main())
    assert result.requests == 2 and result.output_tokens == 5
    assert len(result.ttft_s) == 2 and len(result.itl_s) == 3  # one gap per later token
    # The second event of the first reply completed in the chunk that also held the first's
    # tail: the two arrive together.
    assert all(gap >= 0 for gap in result.itl_s) and all(t > 0 for t in result.ttft_s)
    # One connection, then both requests on it.
    assert seen[0] == {"connection": True} and len(seen) == 3
    assert [s["max_tokens"] for s in seen[1:]] == [3, 3] and len(seen[1]["prompt"]) == 4


@pytest.mark.parametrize(
    ("status", "reply", "message"),
    [
        (429, [], "the server answered 429"),
        (200, [b'data: {"t": 1}\n\n', b'data: {"error": {"message": "boom"}}\n\n'], "boom"),
    ],
)
def test_errors_are_raised_not_counted(status, reply, message):
    async def main():
        server, _ = await _serve([reply], status)
        async with server:
            await _run(_url(server), "m", 1, 1, 4, 3, 50, seed=0)

    with pytest.raises(RuntimeError, match=message):
        asyncio.run(main())


def test_load_arguments_are_run_loads_keywords():
    # Every option of the shared parser reaches run_load under its own name, so a tool that
    # builds its client from load_arguments can pass vars(namespace) straight through.
    parser = argparse.ArgumentParser()
    load_arguments(parser, clients=5)
    a = vars(parser.parse_args(["http://127.0.0.1:1", "m", "--seed", "7"]))
    assert set(a) == set(inspect.signature(run_load).parameters)
    assert (a["clients"], a["seed"], a["requests_per_client"]) == (5, 7, 2)


def test_command_line_runs_the_load_it_was_given(capsys):
    reply = [b'data: {"t": 1}\n\n', b'data: {"t": 2}\n\ndata: [DONE]\n\n']
    replies = [list(reply) for _ in range(3)]
    loop = asyncio.new_event_loop()
    server, seen = loop.run_until_complete(_serve(replies))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        argv = [_url(server), "tiny", "--clients", "1", "--requests-per-client", "3",
                "--prompt-tokens", "6", "--output-tokens", "2", "--vocab", "40",
                "--json"]  # fmt: skip
        assert main(argv) == 0
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        server.close()
        loop.close()
    out = json.loads(capsys.readouterr().out)
    assert out["requests"] == 3 and out["output_tokens"] == 6
    bodies = [s for s in seen if "prompt" in s]
    assert [b["model"] for b in bodies] == ["tiny"] * 3
    assert all(len(b["prompt"]) == 6 and max(b["prompt"]) < 40 for b in bodies)
