"""A load generator for the server: ``clients`` concurrent streams of completions.

Each client sends its requests one after the other (a closed loop, as a chat user waits for an
answer), streaming, with random token-id prompts of ``prompt_tokens`` and ``ignore_eos`` so
every answer is ``output_tokens`` long. Used by the ``serve`` benchmark suite; also runnable::

    python -m pygpukit.llm.serve.loadgen http://127.0.0.1:8000 MODEL --clients 16
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import time
from dataclasses import dataclass

import numpy as np

__all__ = ["LoadResult", "run_load"]


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

    def percentile(self, which: str, q: float) -> float:
        """The ``q``-th percentile (0-100) of ``ttft`` or ``itl``, in seconds."""
        values = self.ttft_s if which == "ttft" else self.itl_s
        return float(np.percentile(values, q)) if values else 0.0


async def _client(
    http: object, url: str, model: str, prompts: list[list[int]], output_tokens: int,
    ttft: list[float], itl: list[float],
) -> int:  # fmt: skip
    import httpx

    assert isinstance(http, httpx.AsyncClient)
    tokens = 0
    for prompt in prompts:
        body = {"model": model, "prompt": prompt, "max_tokens": output_tokens, "stream": True,
                "ignore_eos": True, "temperature": 0}  # fmt: skip
        start = last = time.perf_counter()
        first = True
        async with http.stream("POST", f"{url}/v1/completions", json=body) as r:
            if r.status_code != 200:
                raise RuntimeError(f"the server answered {r.status_code}: {await r.aread()!r}")
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:
                    raise RuntimeError(f"the server failed a request: {chunk['error']}")
                now = time.perf_counter()
                if first:
                    ttft.append(now - start)
                    first = False
                else:
                    itl.append(now - last)
                last = now
                tokens += 1
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
    import httpx

    rng = np.random.default_rng(seed)
    ttft: list[float] = []
    itl: list[float] = []
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        work = [
            [rng.integers(3, vocab, prompt_tokens).tolist() for _ in range(requests_per_client)]
            for _ in range(clients)
        ]
        start = time.perf_counter()
        counts = await asyncio.gather(
            *(_client(http, url, model, w, output_tokens, ttft, itl) for w in work)
        )
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


def main(argv: list[str] | None = None) -> int:
    """Command line: print tokens/s and TTFT/ITL percentiles of one load run."""
    p = argparse.ArgumentParser(prog="python -m pygpukit.llm.serve.loadgen")
    p.add_argument("url")
    p.add_argument("model")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--requests-per-client", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=128)
    p.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn below this")
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompts")
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
