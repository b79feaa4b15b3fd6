"""A load generator for the server: ``clients`` concurrent streams of completions.

Each client sends its requests one after the other (a closed loop, as a chat user waits for an
answer), streaming, with random token-id prompts of ``prompt_tokens`` and ``ignore_eos`` so
every answer is ``output_tokens`` long. Used by the ``serve`` benchmark suite; also runnable::

    python -m pygpukit.llm.serve.loadgen http://127.0.0.1:8000 MODEL --clients 16
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import numpy as np

__all__ = ["LoadResult", "load_arguments", "run_load"]


@dataclass(frozen=True)
class LoadResult:
    """What a load run measured (seconds; tokens per second over the whole run)."""

    requests: int
    output_tokens: int
    wall_s: float
    ttft_s: tuple[float, ...]
    itl_s: tuple[float, ...]

    @property
    def output_tokens_per_s(self) -> float:
        """Generated tokens per second, all clients together."""
        return self.output_tokens / self.wall_s if self.wall_s > 0 else 0.0

    @classmethod
    def from_json(cls, text: str) -> LoadResult:
        """The result that ``loadgen --json`` printed."""
        d = json.loads(text)
        return cls(int(d["requests"]), int(d["output_tokens"]), float(d["wall_s"]),
                   tuple(d["ttft_s"]), tuple(d["itl_s"]))  # fmt: skip

    @classmethod
    def pooled(cls, results: Sequence[LoadResult]) -> LoadResult:
        """Several runs as one: their counts, wall times and latency samples together."""
        return cls(
            sum(r.requests for r in results), sum(r.output_tokens for r in results),
            sum(r.wall_s for r in results), tuple(t for r in results for t in r.ttft_s),
            tuple(t for r in results for t in r.itl_s),
        )  # fmt: skip

    def percentile(self, which: str, q: float) -> float:
        """The ``q``-th percentile (0-100) of ``ttft`` or ``itl``, in seconds."""
        values = self.ttft_s if which == "ttft" else self.itl_s
        return float(np.percentile(values, q)) if values else 0.0


class _Connection:
    """One client's keep-alive HTTP/1.1 connection, spoken directly over asyncio streams.

    A load generator must cost far less per streamed token than the server it measures: a
    general HTTP client (httpx) spends about 100 us of Python per server-sent event, which
    at 64 clients and ~10k tokens/s keeps one core busy and delays the very arrivals it
    times. This one reads each chunk of the chunked body once and only splits it at the events'
    blank lines (a few microseconds per event).
    """

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the load generator speaks plain http://host:port, got {url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        """Close the connection (if open)."""
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()
        self._reader = self._writer = None

    async def _head(self, path: str, payload: bytes) -> tuple[int, dict[str, str]]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
            f"Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n".encode()
            + payload
        )
        status_line = await self._reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection before answering")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while (line := await self._reader.readline()) not in (b"\r\n", b"\n", b""):
            key, _, value = line.decode("latin-1").partition(":")
            headers[key.strip().lower()] = value.strip()
        return status, headers

    async def _chunks(self, headers: dict[str, str]) -> AsyncIterator[bytes]:
        """The body's pieces as they arrive (chunked, or ``Content-Length`` bytes)."""
        reader = self._reader
        assert reader is not None
        if headers.get("transfer-encoding", "").lower() != "chunked":
            yield await reader.readexactly(int(headers.get("content-length", "0")))
            return
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            yield (await reader.readexactly(size + 2))[:-2]

    async def stream(self, path: str, body: dict[str, object]) -> AsyncIterator[tuple[float, int]]:
        """POST ``body`` and yield ``(arrival time, events)`` for each piece of the stream.

        ``events``: the server-sent data events (tokens) the piece completed, ``[DONE]`` not
        counted. Raises ``RuntimeError`` for a status other than 200 or an error event.
        """
        status, headers = await self._head(path, json.dumps(body).encode())
        if status != 200:
            text = b"".join([c async for c in self._chunks(headers)]).decode(errors="replace")
            await self.close()
            raise RuntimeError(f"the server answered {status}: {text[:2000]}")
        tail = b""
        async for piece in self._chunks(headers):
            now = time.perf_counter()
            *events, tail = (tail + piece).split(b"\n\n")
            count = 0
            for event in events:
                if not event.startswith(b"data: ") or event == b"data: [DONE]":
                    continue
                if event.startswith(b'data: {"error"'):
                    message = json.loads(event[6:])["error"]
                    raise RuntimeError(f"the server failed a request: {message}")
                count += 1
            if count:
                yield now, count
        if headers.get("connection", "").lower() == "close":
            await self.close()


async def _client(
    url: str, model: str, prompts: list[list[int]], output_tokens: int,
    ttft: list[float], itl: list[float],
) -> int:  # fmt: skip
    connection = _Connection(url)
    tokens = 0
    try:
        for prompt in prompts:
            body: dict[str, object] = {"model": model, "prompt": prompt,
                                       "max_tokens": output_tokens, "stream": True,
                                       "ignore_eos": True, "temperature": 0}  # fmt: skip
            start = last = time.perf_counter()
            first = True
            async for now, count in connection.stream("/v1/completions", body):
                # Events that arrive together count as arriving at once (gaps of 0 after
                # the first), as a client reading the socket would see them.
                if first:
                    ttft.append(now - start)
                    first = False
                else:
                    itl.append(now - last)
                itl.extend([0.0] * (count - 1))
                last = now
                tokens += count
    finally:
        await connection.close()
    return tokens


async def _run(
    url: str,
    model: str,
    clients: int,
    requests_per_client: int,
    prompt_tokens: int,
    output_tokens: int,
    vocab: int,
    seed: int,
) -> LoadResult:
    rng = np.random.default_rng(seed)
    ttft: list[float] = []
    itl: list[float] = []
    work = [
        [rng.integers(3, vocab, prompt_tokens).tolist() for _ in range(requests_per_client)]
        for _ in range(clients)
    ]
    start = time.perf_counter()
    counts = await asyncio.gather(*(_client(url, model, w, output_tokens, ttft, itl) for w in work))
    wall = time.perf_counter() - start
    return LoadResult(clients * requests_per_client, sum(counts), wall, tuple(ttft), tuple(itl))


def run_load(
    url: str,
    model: str,
    *,
    clients: int,
    requests_per_client: int = 1,
    prompt_tokens: int = 128,
    output_tokens: int = 128,
    vocab: int = 32000,
    seed: int = 0,
) -> LoadResult:
    """Run the load against a server at ``url`` and return what it measured.

    Output tokens are counted as streamed chunks (one per token: the server sends a chunk per
    generated token, text or not).
    """
    return asyncio.run(_run(url, model, clients, requests_per_client, prompt_tokens,
                            output_tokens, vocab, seed))  # fmt: skip


def load_arguments(parser: argparse.ArgumentParser, *, clients: int = 16) -> None:
    """Add a load run's arguments to ``parser``: the server, the model and the load's shape.

    ``url``, ``model``, ``--clients`` (default ``clients``), ``--requests-per-client``,
    ``--prompt-tokens``, ``--output-tokens``, ``--vocab`` and ``--seed``: named as
    :func:`run_load`'s keywords, so every client of a server (this module's command line and the
    tools' probes) is started with the same command line.
    """
    parser.add_argument("url", help="the server, http://host:port")
    parser.add_argument("model", help="the served model's name")
    parser.add_argument("--clients", type=int, default=clients, help="concurrent streams")
    parser.add_argument("--requests-per-client", type=int, default=2,
                        help="requests each client sends, one after the other")  # fmt: skip
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn below this")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random prompts")


def main(argv: list[str] | None = None) -> int:
    """Command line: print tokens/s and TTFT/ITL percentiles of one load run."""
    p = argparse.ArgumentParser(prog="python -m pygpukit.llm.serve.loadgen")
    load_arguments(p)
    p.add_argument("--json", action="store_true",
                   help="print the whole result (every TTFT and ITL sample) as one JSON "
                   "line")  # fmt: skip
    a = p.parse_args(argv)
    r = run_load(
        a.url,
        a.model,
        clients=a.clients,
        requests_per_client=a.requests_per_client,
        prompt_tokens=a.prompt_tokens,
        output_tokens=a.output_tokens,
        vocab=a.vocab,
        seed=a.seed,
    )
    if a.json:
        print(json.dumps(dataclasses.asdict(r)))
        return 0
    ttft = [r.percentile("ttft", q) * 1e3 for q in (50, 99)]
    itl = [r.percentile("itl", q) * 1e3 for q in (50, 99)]
    print(
        f"{r.requests} requests, {r.output_tokens} tokens in {r.wall_s:.2f} s: "
        f"{r.output_tokens_per_s:.0f} output tok/s; TTFT p50 {ttft[0]:.0f} ms p99 {ttft[1]:.0f} "
        f"ms; ITL p50 {itl[0]:.1f} ms p99 {itl[1]:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
