"""The ``serve`` benchmark suite: the server under load from concurrent streaming clients.

Registered through the entry point group ``pygpukit.benchmark_suites`` when installed; from a
source tree set ``PYGPUKIT_BENCHMARK_PLUGINS=pygpukit.llm.serve.benchmarks:suites``::

    python -m pygpukit.benchmark --suite serve [--quick]

The server runs as a subprocess (``python -m pygpukit serve``) on 127.0.0.1 with a
random-weight bfloat16 checkpoint of the ``llm`` suite's shapes (Llama-3.1-8B on the GPU;
``--quick`` and the CPU backend: smaller ones), and :mod:`.loadgen` drives it from this
process. Rows:

- ``startup``: from the command to the first answer (weights read from the page cache);
- ``load``: 1, 16 and 64 clients, each sending one streamed 128-in/128-out (and 1024-in/128-out)
  completion; the time is the wall time of the round; the metrics give output tokens/s and
  time to first token p50/p99 and inter-token latency p99;
- ``isolation`` (GPU): a Guaranteed Qwen2.5-0.5B-shape model under 4 clients beside a
  BestEffort 8B-shape model under 64 (``--quick``: SmolLM2-135M beside Qwen2.5-0.5B), each in
  its own scheduler partition of one server; the metrics compare the small model's
  inter-token latency p50/p99 with the big one idle and saturated (the samples of every
  timed round together: ``--iterations 3`` gives three rounds; ``round_ratios``: each
  round's own p99 ratio), and give the big one's output tokens/s beside it. Each measured
  client sends 6 requests, so a loaded round spans a whole BestEffort request (see
  :class:`IsolationLoad`). The 64 BestEffort clients run in a load-generator process of
  their own, so that parsing their streams does not delay the measured clients.

``$PYGPUKIT_SERVE_BENCH_MODELS`` picks the shapes of the startup and load rows,
``$PYGPUKIT_SERVE_BENCH_ROWS`` the rows (``isolation`` alone, say),
``$PYGPUKIT_SERVE_BENCH_CLIENTS`` and ``$PYGPUKIT_SERVE_BENCH_PROMPTS`` the load rows' client
counts and prompt lengths (``64`` and ``128``: the one 64-client 128/128 row). Each round of
a row is one measurement, so ``--iterations 1`` gives the shortest run (a check round and one
timed round per row).
"""

from __future__ import annotations

import atexit
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pygpukit import env
from pygpukit.benchmark.case import Case, Skip, Timed
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

from ..benchmarks import SHAPES, _checkpoint
from .loadgen import LoadResult, run_load

__all__ = ["SUITE", "IsolationLoad", "suites"]

NAME = "serve"


def _variable(name: str, kind: env.Kind, description: str, **spec: Any) -> str:
    """Register one of the suite's variables (read when it runs; a bad value stops it)."""
    env.register(
        name, kind, read="python -m pygpukit.benchmark --suite serve", package="pygpukit-llm",
        on_invalid="raise", description=description, **spec,
    )  # fmt: skip
    return name


MODELS_ENV = _variable(
    "PYGPUKIT_SERVE_BENCH_MODELS", "items",
    "Model shapes the serve benchmark's startup and load rows run (default: llama-3.1-8b on "
    "the GPU, qwen2.5-0.5b with --quick), e.g. qwen2.5-0.5b,llama-3.1-8b.",
    allowed=tuple(SHAPES),
)  # fmt: skip
_ROWS = ("load", "startup", "isolation")
ROWS_ENV = _variable(
    "PYGPUKIT_SERVE_BENCH_ROWS", "items",
    "Rows of the serve benchmark to run (default: all of load, startup and isolation), e.g. "
    "isolation.",
    allowed=_ROWS,
)  # fmt: skip
_CLIENTS = ("1", "4", "16", "64")
CLIENTS_ENV = _variable(
    "PYGPUKIT_SERVE_BENCH_CLIENTS", "items",
    "Client counts of the serve benchmark's load rows (default: all of the context's: 1, 16 "
    "and 64 on the GPU), e.g. 64.",
    allowed=_CLIENTS,
)  # fmt: skip
PREFILL_CHUNK_ENV = _variable(
    "PYGPUKIT_SERVE_BENCH_PREFILL_CHUNK", "integer",
    "--prefill-chunk of the servers the serve benchmark's startup and load rows start (unset: "
    "the server's default), e.g. 192 to measure the stall-free cap.",
    minimum=0,
)  # fmt: skip
_PROMPTS = ("16", "128", "1024")
PROMPTS_ENV = _variable(
    "PYGPUKIT_SERVE_BENCH_PROMPTS", "items",
    "Prompt lengths of the serve benchmark's load rows (default: all of the context's: 128 and "
    "1024 on the GPU), e.g. 128.",
    allowed=_PROMPTS,
)  # fmt: skip
_START_TIMEOUT_S = 900
_servers: dict[tuple[str, ...], tuple[subprocess.Popen[bytes], str]] = {}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start a server and wait until it answers; ``(process, url)``."""
    import httpx

    port = _free_port()
    cmd = [sys.executable, "-m", "pygpukit", "serve", *args, "--port", str(port),
           "--log-level", "warning"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    lines: list[bytes] = []
    # Drained all along (a full pipe would block the server); kept for the error message.
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr or []), daemon=True)
    reader.start()
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            reader.join(10)  # the pipe closes with the process: read its last words
            tail = b"".join(lines).decode(errors="replace")[-4000:]
            raise RuntimeError(
                f"the server exited with status {proc.returncode} before answering; "
                f"its stderr:\n{tail or '(empty)'}"
            )
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return proc, url
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not start in time")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


@atexit.register
def _stop_all() -> None:
    for proc, _ in _servers.values():
        _stop(proc)
    _servers.clear()


def _server(args: list[str]) -> str:
    """A server with these arguments, started once per benchmark process (others stopped)."""
    key = tuple(args)
    if key not in _servers:
        _stop_all()  # one model set on the device at a time
        _servers[key] = _start(args)
    return _servers[key][1]


def _serve_args(shape: str, max_len: int) -> list[str]:
    args = [f"{shape}={_checkpoint(shape)}", "--max-model-len", str(max_len),
            "--max-batch", "64", "--max-batched-tokens", "2048"]  # fmt: skip
    chunk = env.integer(PREFILL_CHUNK_ENV)
    return args if chunk is None else [*args, "--prefill-chunk", str(chunk)]


def _latency_metrics(result: LoadResult, prefix: str = "") -> dict[str, float | str]:
    return {
        f"{prefix}ttft_p50_ms": round(result.percentile("ttft", 50) * 1e3, 1),
        f"{prefix}ttft_p99_ms": round(result.percentile("ttft", 99) * 1e3, 1),
        f"{prefix}itl_p50_ms": round(result.percentile("itl", 50) * 1e3, 2),
        f"{prefix}itl_p99_ms": round(result.percentile("itl", 99) * 1e3, 2),
    }


def _load_metrics(steady: list[LoadResult], wave: list[LoadResult]) -> dict[str, float | str]:
    """The timed rounds' steady-state numbers, pooled, then the single waves' (``wave_``)."""
    if not steady:
        return {}
    run, first = LoadResult.pooled(steady), LoadResult.pooled(wave)
    return {
        "output_tok_s": round(run.output_tokens_per_s, 1),
        **_latency_metrics(run),
        "wave_tok_s": round(first.output_tokens_per_s, 1),
        "wave_ttft_p50_ms": round(first.percentile("ttft", 50) * 1e3, 1),
        "wave_ttft_p99_ms": round(first.percentile("ttft", 99) * 1e3, 1),
    }


def _check(expected: int) -> Any:
    def check(result: Any) -> None:
        if not isinstance(result, LoadResult) or result.output_tokens != expected:
            got = getattr(result, "output_tokens", result)
            raise AssertionError(f"expected {expected} streamed tokens, got {got}")
        return None

    return check


def _load_case(shape: str, clients: int, prompt: int, new: int, requests: int) -> Case:
    """``clients`` closed-loop streaming clients, each sending ``requests`` requests in turn.

    A timed round is one such run (steady state: requests start and end at different steps,
    as under a benchmark of many requests at a fixed concurrency), after one wave of a single
    request per client (all arrive together, prefill all, then decode together).
    """
    vocab = int(SHAPES[shape]["vocab_size"])

    def setup(lib: Library, copies: int) -> Timed:
        if lib.name != "pygpukit":
            raise Skip(f"{lib.name}: no server")
        url = _server(_serve_args(shape, prompt + new + 64))
        steady: list[LoadResult] = []
        wave: list[LoadResult] = []

        def load(seed: int, per_client: int) -> LoadResult:
            return run_load(url, shape, clients=clients, requests_per_client=per_client,
                            prompt_tokens=prompt, output_tokens=new, vocab=vocab,
                            seed=seed)  # fmt: skip

        def round_of(i: int) -> tuple[LoadResult, LoadResult]:
            """Round ``i``: its single wave, then its steady-state run."""
            # Prompts of their own per row, round and run: rows share the server, whose prefix
            # cache would otherwise hold a round's prompts from an earlier row or round.
            seed = ((clients * 1_009 + prompt) * 1_000 + i) * 2
            return load(seed, 1), load(seed + 1, requests)

        def run(i: int) -> LoadResult:
            return round_of(i)[1]

        def measure(i: int) -> float:
            first, run_ = round_of(i)
            wave.append(first)
            steady.append(run_)
            return run_.wall_s * 1e3

        return Timed(run=run, check=_check(clients * requests * new), measure=measure,
                     metrics=lambda: _load_metrics(steady, wave))  # fmt: skip

    params: dict[str, int | float | str] = {"model": shape, "clients": clients,
                                            "prompt": prompt, "new": new,
                                            "requests": requests}  # fmt: skip
    return Case(NAME, "load", params, {"pygpukit": setup}, timing="wall")


def _startup_case(shape: str) -> Case:
    vocab = int(SHAPES[shape]["vocab_size"])

    def setup(lib: Library, copies: int) -> Timed:
        if lib.name != "pygpukit":
            raise Skip(f"{lib.name}: no server")
        _stop_all()
        _checkpoint(shape)  # written (and in the page cache) before the clock starts

        def run(i: int) -> LoadResult:
            proc, url = _start(_serve_args(shape, 512))
            try:
                return run_load(url, shape, clients=1, prompt_tokens=16, output_tokens=1,
                                vocab=vocab, seed=i)  # fmt: skip
            finally:
                _stop(proc)

        def measure(i: int) -> float:
            start = time.perf_counter()
            run(i)
            return (time.perf_counter() - start) * 1e3

        return Timed(run=run, check=_check(1), measure=measure)

    return Case(NAME, "startup", {"model": shape}, {"pygpukit": setup}, timing="wall")


@dataclass(frozen=True)
class IsolationLoad:
    """The isolation row's two loads: each client streams its requests one after the other.

    The defaults are the acceptance's: 4 clients on the Guaranteed model, 64 on the
    BestEffort one, 128-in/128-out; ``memory``: the two partitions' sizes. The BestEffort
    load must outlast the measured one (the row fails otherwise).

    The measured clients send 6 requests each (about 3,000 inter-token latencies a round,
    where 2 gave a p99 set by a dozen samples), so that each loaded round spans one whole
    BestEffort request: its clients' answers ending together and their next 64 prompts'
    prefill, besides steady decoding. The BestEffort clients send 3 each, which outlasts that.
    """

    guaranteed_clients: int = 4
    besteffort_clients: int = 64
    requests: int = 6
    besteffort_requests: int = 3
    prompt: int = 128
    new: int = 128
    memory: tuple[str, str] = ("8GiB", "56GiB")


def _running(url: str, model: str) -> int:
    import httpx

    with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
        return int(httpx.get(f"{url}/health", timeout=5).json()["models"][model]["running"])
    return 0


def _background_load(url: str, model: str, load: IsolationLoad, vocab: int,
                     clients: int) -> subprocess.Popen[str]:  # fmt: skip
    """The BestEffort model's clients, in a process of their own.

    Their 64 streams' parsing must not share an interpreter lock with the clients being
    measured: that would time the load generator, not the server.
    """
    cmd = [sys.executable, "-m", "pygpukit.llm.serve.loadgen", url, model,
           "--clients", str(clients), "--requests-per-client", str(load.besteffort_requests),
           "--prompt-tokens", str(load.prompt), "--output-tokens", str(load.new),
           "--vocab", str(vocab), "--seed", "1", "--json"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _isolation_case(small: str, big: str, load: IsolationLoad | None = None) -> Case:
    """A Guaranteed ``small`` beside a BestEffort ``big`` in one server; ITL p99 loaded/alone."""
    load = load or IsolationLoad()
    small_vocab, big_vocab = int(SHAPES[small]["vocab_size"]), int(SHAPES[big]["vocab_size"])
    g, be = "guaranteed", "besteffort"  # the models' names in the server

    def setup(lib: Library, copies: int) -> Timed:
        if lib.name != "pygpukit":
            raise Skip(f"{lib.name}: no server")
        url = _server([f"{g}={_checkpoint(small)}", f"{be}={_checkpoint(big)}",
                       "--max-model-len", str(load.prompt + load.new + 64),
                       "--max-batch", "64", "--kv-memory", "0.6",
                       "--partition", f"{g}={load.memory[0]},0.25,guaranteed",
                       "--partition", f"{be}={load.memory[1]},0,besteffort"])  # fmt: skip
        #: Each round's results by kind; the check round (0) counts only when alone.
        seen: dict[str, dict[int, LoadResult]] = {"alone": {}, "loaded": {}, "besteffort": {}}

        def measured(seed: int) -> LoadResult:
            return run_load(url, g, clients=load.guaranteed_clients,
                            requests_per_client=load.requests, prompt_tokens=load.prompt,
                            output_tokens=load.new, vocab=small_vocab, seed=seed)  # fmt: skip

        def run(i: int) -> LoadResult:
            seen["alone"][i] = measured(i)
            noise = _background_load(url, be, load, big_vocab, load.besteffort_clients)
            try:
                # Measure once the BestEffort batch has filled up (not during its ramp).
                full = max(1, load.besteffort_clients * 3 // 4)
                deadline = time.monotonic() + _START_TIMEOUT_S
                while _running(url, be) < full and noise.poll() is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the BestEffort model never ran {full} requests")
                    time.sleep(0.05)
                seen["loaded"][i] = measured(i)
                covered = noise.poll() is None
                out, err = noise.communicate(timeout=_START_TIMEOUT_S)
            finally:
                if noise.poll() is None:
                    noise.kill()
            if noise.returncode != 0:
                raise RuntimeError(f"the BestEffort load failed: {err[-2000:]}")
            if not covered:
                raise RuntimeError(
                    "the BestEffort load ended before the Guaranteed clients did: the loaded "
                    "latency was not measured under load (give the BestEffort clients more work)"
                )
            seen["besteffort"][i] = LoadResult.from_json(out)
            return seen["loaded"][i]

        def pooled(kind: str) -> LoadResult:
            """The timed rounds' results of one kind as one (the check round's if alone)."""
            rounds = [r for i, r in sorted(seen[kind].items()) if i > 0] or list(
                seen[kind].values()
            )
            return LoadResult.pooled(rounds)

        def metrics() -> dict[str, float | str]:
            if not seen["besteffort"]:
                return {}
            alone, loaded, big = pooled("alone"), pooled("loaded"), pooled("besteffort")
            p99 = alone.percentile("itl", 99), loaded.percentile("itl", 99)
            # Each timed round's own ratio: how far one round's p99 can be from the pooled one.
            each = [seen["loaded"][i].percentile("itl", 99) / a.percentile("itl", 99)
                    for i, a in seen["alone"].items()
                    if i in seen["loaded"] and (i > 0 or len(seen["loaded"]) == 1)
                    and a.percentile("itl", 99) > 0]  # fmt: skip
            return {"itl_p99_alone_ms": round(p99[0] * 1e3, 2),
                    "itl_p99_loaded_ms": round(p99[1] * 1e3, 2),
                    "itl_p50_alone_ms": round(alone.percentile("itl", 50) * 1e3, 2),
                    "itl_p50_loaded_ms": round(loaded.percentile("itl", 50) * 1e3, 2),
                    "ratio": round(p99[1] / p99[0], 2) if p99[0] else "n/a",
                    "round_ratios": "/".join(f"{r:.2f}" for r in each) or "n/a",
                    "itl_samples": len(loaded.itl_s),
                    "besteffort_tok_s": round(big.output_tokens_per_s, 1),
                    "rounds": len(seen["besteffort"])}  # fmt: skip

        def measure(i: int) -> float:
            # One round per repetition (no warm-up rounds: the check round warmed up).
            start = time.perf_counter()
            run(i)
            return (time.perf_counter() - start) * 1e3

        expected = load.guaranteed_clients * load.requests * load.new
        return Timed(run=run, check=_check(expected), measure=measure, metrics=metrics)

    return Case(NAME, "isolation", {"guaranteed": small, "besteffort": big},
                {"pygpukit": setup}, timing="wall")  # fmt: skip


def _cases(ctx: SuiteContext) -> Iterator[Case]:
    clients: tuple[int, ...]
    # (prompt, new, requests per client): 8 waves' worth of requests at 128/128, so that the
    # first wave's ramp and the last one's drain weigh little; 4 for the slow 1024-token rows.
    if not ctx.on_gpu:
        shapes, clients, sizes = ["tiny"], (1, 4), [(16, 4, 2)]
    elif ctx.quick:
        shapes, clients, sizes = ["qwen2.5-0.5b"], (1, 16, 64), [(128, 128, 4)]
    else:
        shapes, clients = ["llama-3.1-8b"], (1, 16, 64)
        sizes = [(128, 128, 8), (1024, 128, 4)]
    shapes = list(env.items(MODELS_ENV) or shapes)
    picked = {int(n) for n in env.items(CLIENTS_ENV)}
    clients = tuple(n for n in clients if not picked or n in picked)
    prompts = {int(n) for n in env.items(PROMPTS_ENV)}
    sizes = [size for size in sizes if not prompts or size[0] in prompts]
    rows = set(env.items(ROWS_ENV) or _ROWS)
    # Load rows first: they share one server; each startup row starts its own.
    for shape in shapes if "load" in rows else ():
        for prompt, new, requests in sizes:
            for n in clients:
                yield _load_case(shape, n, prompt, new, requests)
    for shape in shapes if "startup" in rows else ():
        yield _startup_case(shape)
    if ctx.on_gpu and "isolation" in rows:
        # --quick: the same two-partition mechanism at small shapes, in seconds.
        small, big = (
            ("smollm2-135m", "qwen2.5-0.5b") if ctx.quick else ("qwen2.5-0.5b", "llama-3.1-8b")
        )
        yield _isolation_case(small, big)


SUITE = Suite(
    NAME,
    "pygpukit serve under 1/16/64 streaming clients (TTFT p50/p99, output tok/s), startup "
    "time and partition isolation, random-weight Llama-3.1-8B shape",
    _cases,
)


def suites() -> list[Suite]:
    """The ``serve`` suite (the entry point's target)."""
    return [SUITE]
