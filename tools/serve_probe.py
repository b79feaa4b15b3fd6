"""What the serve tools share: a server in this process, its engines observed, the load.

``tools/serve_round.py`` (one model under the load row's clients) and
``tools/serve_isolation.py`` (a Guaranteed model beside a saturated BestEffort one) both run
``pygpukit serve`` *in their own process*, so that each engine's steps can be observed, and
drive it from load-generator subprocesses. This module holds what they have in common:

- :func:`serve_in_process`: build the engines from ``serve``'s own arguments, warm them up,
  set the switch interval ``serve`` would, and run the HTTP app on a uvicorn thread;
- :class:`StepLog`: an engine's step observer (:class:`pygpukit.llm.engine.StepTimes`), with
  CUDA events around every decode forward pass and the engine thread's CPU time per step (a
  host phase that takes longer than its CPU time waited for the interpreter lock or a core);
- per-thread CPU time and context switches (:func:`thread_cpu`, :func:`thread_switches`) and
  the machine's host facts (:func:`host_facts`);
- load-generator subprocesses: the package's (``python -m pygpukit.llm.serve.loadgen``) and,
  to time each token's arrival, this module's own ``arrivals`` client
  (``python tools/serve_probe.py arrivals URL MODEL ...``), which prints every streamed
  token's arrival time (``time.perf_counter()``: the same clock in every process of the
  machine) under its prompt's first ids (:func:`prompt_key`), which the server side can
  match.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import os
import platform
import resource
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Served",
    "StepLog",
    "StepRow",
    "arrival_itl",
    "children_cpu",
    "host_facts",
    "load_process",
    "load_result",
    "pct",
    "prompt_key",
    "round_arguments",
    "serve_in_process",
    "summary",
    "thread_cpu",
    "thread_switches",
]


def pct(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (seconds) in milliseconds (NaN when empty)."""
    return float(np.percentile(values, q)) * 1e3 if len(values) else float("nan")


def summary(values: list[float]) -> str:
    """``p50 .. p99 .. ms (n=..)`` of ``values`` in seconds; ``-`` when empty."""
    if not len(values):
        return "-"
    return f"p50 {pct(values, 50):.2f} p99 {pct(values, 99):.2f} ms (n={len(values)})"


def _task_file(tid: int, name: str) -> str | None:
    try:
        with open(f"/proc/self/task/{tid}/{name}") as f:
            return f.read()
    except (OSError, TypeError):
        return None


def thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each live thread of this process, by thread name."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for t in threading.enumerate():
        stat = _task_file(t.native_id or 0, "stat")
        if stat is None:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[t.name] = (int(fields[11]) + int(fields[12])) / tick
    return out


def thread_switches() -> dict[str, tuple[int, int]]:
    """``(voluntary, involuntary)`` context switches of each live thread, by thread name.

    Involuntary ones are the kernel taking the core away from a runnable thread: many of them
    on an engine thread mean the host is short of cores, not the thread of the lock.
    """
    out: dict[str, tuple[int, int]] = {}
    for t in threading.enumerate():
        status = _task_file(t.native_id or 0, "status")
        if status is None:
            continue
        values = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        out[t.name] = (int(values["voluntary_ctxt_switches"]),
                       int(values["nonvoluntary_ctxt_switches"]))  # fmt: skip
    return out


def children_cpu() -> float:
    """CPU seconds of this process's finished child processes (the load generators)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def host_facts() -> dict[str, Any]:
    """The host the numbers came from: cores, load, CPU model, Python."""
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")),
                         "")  # fmt: skip
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "loadavg": os.getloadavg(),
        "cpu_model": model,
        "python": platform.python_version(),
        "switch_interval_ms": sys.getswitchinterval() * 1e3,
    }


@dataclass
class StepRow:
    """One observed step: its :class:`StepTimes`, and the engine thread's CPU seconds.

    ``cpu_s``: CPU time of the whole step; ``wait_cpu_s``: of it, inside the wait for the
    sampled ids; ``device_ms``: the forward pass queued in this step (CUDA events), when
    known (filled in later, as the events complete).
    """

    times: Any
    cpu_s: float
    wait_cpu_s: float
    device_ms: float | None = None

    @property
    def host_cpu_s(self) -> float:
        """CPU seconds of the step's host phases (the step less its wait)."""
        return self.cpu_s - self.wait_cpu_s

    @property
    def host_off_cpu_s(self) -> float:
        """Seconds of host phases the thread did not run: waiting for the lock or a core."""
        return max(0.0, self.times.host_s - self.host_cpu_s)


class StepLog:
    """An engine's step observer: :class:`StepRow` per step, device time per decode pass.

    Replaces the engine's ``step_observer`` and wraps its ``step``, ``_wait_for`` and
    ``decode.logits`` (CUDA events around each decode forward pass, on the partition's stream:
    the start event is reached when the stream gets to the pass, not at its enqueue).
    """

    def __init__(self, engine: Any) -> None:
        import pygpukit as gp

        self.rows: list[StepRow] = []
        #: ``(host time of the enqueue, device ms)`` of every decode forward pass seen done.
        self.passes: list[tuple[float, float]] = []
        self._open: collections.deque[tuple[StepRow | None, float, Any, Any]] = collections.deque()
        self.taken_passes: list[tuple[float, float]] = []
        #: A ``cProfile.Profile`` that every step runs under while set (None: not profiled).
        self.profile: Any = None
        self._step_cpu = 0.0
        self._wait_cpu = 0.0
        self._row_of_pass: list[StepRow | None] = [None]
        inner_logits, inner_step, inner_wait = engine.decode.logits, engine.step, engine._wait_for

        def timed_logits(*args: Any, **kwargs: Any) -> Any:
            enqueued = time.perf_counter()
            start = gp.Event(timing=True).record()
            out = inner_logits(*args, **kwargs)
            self._open.append((None, enqueued, start, gp.Event(timing=True).record()))
            return out

        def step() -> bool:
            self._step_cpu, self._wait_cpu = time.thread_time(), 0.0
            profile = self.profile
            if profile is None:
                return bool(inner_step())
            profile.enable()  # on this (the engine's) thread only
            try:
                return bool(inner_step())
            finally:
                profile.disable()

        def wait_for(pending: Any) -> Any:
            cpu = time.thread_time()
            try:
                return inner_wait(pending)
            finally:
                self._wait_cpu += time.thread_time() - cpu

        engine.decode.logits = timed_logits
        engine.step = step
        engine._wait_for = wait_for
        engine.step_observer = self._observe

    def _observe(self, times: Any) -> None:
        row = StepRow(times, time.thread_time() - self._step_cpu, self._wait_cpu)
        # The passes queued since the last step belong to this one (with lookahead: the next
        # step's pass, queued while this one ran).
        for i, (owner, enqueued, start, end) in enumerate(self._open):
            if owner is None:
                self._open[i] = (row, enqueued, start, end)
        while self._open and self._open[0][3].query():
            owner, enqueued, start, end = self._open.popleft()
            ms = start.elapsed_time(end)
            self.passes.append((enqueued, ms))
            if owner is not None:
                owner.device_ms = ms
        self.rows.append(row)

    def take(self) -> list[StepRow]:
        """The steps observed since the last take (and the passes seen done meanwhile)."""
        rows, self.rows = self.rows, []
        self.taken_passes, self.passes = self.passes, []
        return rows

    @staticmethod
    def report(rows: list[StepRow]) -> dict[str, str]:
        """Percentiles of the decode-only steps' phases, the gaps and the device times."""
        decode = [r for r in rows if r.times.decode_only]
        gaps = [b.times.start - a.times.end for a, b in itertools.pairwise(rows)]
        return {
            "steps": f"{len(rows)} ({len(decode)} decode-only)",
            "step": summary([r.times.end - r.times.start for r in decode]),
            "host": summary([r.times.host_s for r in decode]),
            "host_cpu": summary([r.host_cpu_s for r in decode]),
            "host_off_cpu": summary([r.host_off_cpu_s for r in decode]),
            "launch": summary([r.times.launch_s for r in decode]),
            "wait": summary([r.times.wait_s for r in decode]),
            "device": summary([r.device_ms / 1e3 for r in rows if r.device_ms is not None]),
            "gap": summary([g for g in gaps if g < 0.05]),
        }


@dataclass
class Served:
    """A server running in this process: its engines, scheduler, uvicorn thread and url."""

    engines: dict[str, Any]
    scheduler: Any
    server: Any
    thread: threading.Thread
    url: str
    switch_interval: float
    started_s: float
    logs: dict[str, StepLog] = field(default_factory=dict)

    def stop(self) -> None:
        """Stop the HTTP server, the engines and the scheduler."""
        self.server.should_exit = True
        self.thread.join(60)
        for e in self.engines.values():
            e.shutdown()
        if self.scheduler is not None:
            self.scheduler.shutdown()


def serve_in_process(serve_argv: list[str], *, http: str = "auto", loop: str = "auto",
                     observe: bool = True) -> Served:  # fmt: skip
    """Serve ``pygpukit serve``'s arguments ``serve_argv`` here, on a uvicorn thread.

    The engines are built and warmed up as ``serve`` does, the switch interval ``serve``
    would pick is set, and (``observe``) every engine gets a :class:`StepLog`.
    """
    import uvicorn

    from pygpukit.llm.serve.app import create_app
    from pygpukit.llm.serve.cli import _switch_interval, _warm_up, build_engines, serve_arguments
    from pygpukit.llm.serve.config_file import resolve_options
    from pygpukit.llm.serve.qos import apply_switch_interval

    t0 = time.perf_counter()
    parser = argparse.ArgumentParser()
    serve_arguments(parser)
    args = resolve_options(parser.parse_args([*serve_argv, "--port", "0"]))
    interval = _switch_interval(args)
    engines, scheduler = build_engines(args, sys.stderr)
    _warm_up(engines)
    interval = apply_switch_interval(interval)
    logs = {name: StepLog(e) for name, e in engines.items()} if observe else {}
    config = uvicorn.Config(create_app(engines), host="127.0.0.1", port=0, log_level="warning",
                            http=http, loop=loop)  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True, name="event-loop")
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    return Served(engines, scheduler, server, thread, url, interval, time.perf_counter() - t0,
                  logs)  # fmt: skip


def round_arguments(parser: argparse.ArgumentParser) -> None:
    """Add a serve round's shape to ``parser``: the model and the load row it runs.

    ``--shape`` (a ``llm`` suite shape: its random-weight checkpoint is served), ``--clients``,
    ``--prompt`` and ``--new`` (tokens in and out per request); the ``serve`` benchmark's load
    row by default (64 clients, 128/128 on Llama-3.1-8B's shape).
    """
    parser.add_argument("--shape", default="llama-3.1-8b", help="a llm suite shape")
    parser.add_argument("--clients", type=int, default=64, help="concurrent streams")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per request")
    parser.add_argument("--new", type=int, default=128, help="generated tokens per request")


def load_process(
    url: str, model: str, *, clients: int, requests: int, prompt: int, new: int, vocab: int,
    seed: int, arrivals: bool = False,
) -> subprocess.Popen[str]:  # fmt: skip
    """A load generator in a process of its own (its stream parsing off this interpreter).

    ``arrivals``: this module's client, which prints every token's arrival time; else the
    package's load generator (``--json``).
    """
    head = ([sys.executable, os.path.abspath(__file__), "arrivals"] if arrivals
            else [sys.executable, "-m", "pygpukit.llm.serve.loadgen"])  # fmt: skip
    cmd = [*head, url, model, "--clients", str(clients), "--requests-per-client", str(requests),
           "--prompt-tokens", str(prompt), "--output-tokens", str(new), "--vocab", str(vocab),
           "--seed", str(seed)] + ([] if arrivals else ["--json"])  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def load_result(proc: subprocess.Popen[str], timeout: float = 600) -> Any:
    """What a :func:`load_process` measured: a ``LoadResult``, or the arrivals' dict."""
    from pygpukit.llm.serve.loadgen import LoadResult

    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"a load generator failed: {err[-3000:]}")
    d = json.loads(out)
    return d if "arrivals" in d else LoadResult.from_json(out)


def prompt_key(prompt: list[int]) -> str:
    """What matches a client's request to the server's: its prompt's first ids (random)."""
    return ",".join(str(int(t)) for t in prompt[:8])


def arrival_itl(arrivals: dict[str, Any]) -> list[float]:
    """The inter-token latencies (seconds) of an ``arrivals`` client's run.

    Counted as the package's load generator counts them: tokens that arrive together have
    gaps of 0 after the first.
    """
    itl: list[float] = []
    for times in arrivals["arrivals"].values():
        itl += [b - a for a, b in itertools.pairwise(times)]
    return itl


async def _arrivals_client(url: str, model: str, prompts: list[list[int]], new: int,
                           out: dict[str, list[float]]) -> None:  # fmt: skip
    from pygpukit.llm.serve.loadgen import _Connection

    connection = _Connection(url)
    try:
        for prompt in prompts:
            body = {"model": model, "prompt": prompt, "max_tokens": new, "stream": True,
                    "ignore_eos": True, "temperature": 0}  # fmt: skip
            times: list[float] = []
            async for now, count in connection.stream("/v1/completions", body):
                times += [now] * count
            out[prompt_key(prompt)] = times
    finally:
        await connection.close()


async def _arrivals_run(a: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(a.seed)
    work = [[rng.integers(3, a.vocab, a.prompt_tokens).tolist()
             for _ in range(a.requests_per_client)] for _ in range(a.clients)]  # fmt: skip
    out: dict[str, list[float]] = {}
    start = time.perf_counter()
    await asyncio.gather(*(_arrivals_client(a.url, a.model, w, a.output_tokens, out)
                           for w in work))  # fmt: skip
    return {"start": start, "wall_s": time.perf_counter() - start, "arrivals": out}


def _arrivals_main(argv: list[str]) -> int:
    from pygpukit.llm.serve.loadgen import load_arguments

    p = argparse.ArgumentParser(prog="serve_probe.py arrivals")
    load_arguments(p, clients=4)
    print(json.dumps(asyncio.run(_arrivals_run(p.parse_args(argv)))))
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] != ["arrivals"]:
        raise SystemExit("usage: python tools/serve_probe.py arrivals URL MODEL [options]")
    raise SystemExit(_arrivals_main(sys.argv[2:]))
