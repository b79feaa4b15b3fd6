"""Where the time of a serve load round goes: the server's steps, threads and load generator.

Runs ``pygpukit serve`` with one model *in this process* (so its engine's steps can be
observed) and drives it with the load generator in a subprocess
(``python -m pygpukit.llm.serve.loadgen``), as the ``serve`` benchmark's load row does
(64 clients, 128-in/128-out by default). For each round it prints:

- what the clients measured (output tokens/s over the round's wall time, TTFT and ITL);
- CPU time per generated token of the engine thread, the event-loop thread and the load
  generator (is the host or the load generator the limit?);
- the engine's steps (:class:`pygpukit.llm.engine.StepTimes`): the ramp (from the round's
  first step until every request has its first token), the mixed prefill steps, and the
  decode-only steps' total, host, launch and wait times, and the device time of each decode
  pass (CUDA events around it);
- ``--timeline``: one line per step of the last round.

Variants change one thing on the same server between rounds: ``si=SECONDS`` (the
interpreter's switch interval), ``mbt=N`` (the engine's tokens per step), ``lookahead=0|1``.

Usage (GPU machine; the ``llm`` suite's random-weight checkpoint)::

    python tools/serve_round.py [--shape llama-3.1-8b] [--clients 64] [--prompt 128]
        [--new 128] [--rounds 2] [--variant si=0.005 --variant mbt=8192 ...]
        [--http auto|h11|httptools] [--loop auto|asyncio|uvloop] [--timeline] [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import resource
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e3 if values else float("nan")


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    return f"p50 {_pct(values, 50):.2f} p99 {_pct(values, 99):.2f} ms (n={len(values)})"


def _thread_cpu() -> dict[str, float]:
    """CPU seconds (user + system) of each live thread of this process, by thread name."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for t in threading.enumerate():
        try:
            with open(f"/proc/self/task/{t.native_id}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, TypeError):
            continue
        out[t.name] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class StepLog:
    """The engine's step observer, plus CUDA events around every decode forward pass."""

    def __init__(self, engine: Any) -> None:
        import pygpukit as gp

        self.rows: list[Any] = []
        self.device_ms: list[float] = []
        self._open: collections.deque[tuple[Any, Any]] = collections.deque()
        inner = engine.decode.logits

        def timed_logits(*args: Any, **kwargs: Any) -> Any:
            start = gp.Event(timing=True).record()
            out = inner(*args, **kwargs)
            self._open.append((start, gp.Event(timing=True).record()))
            return out

        engine.decode.logits = timed_logits
        engine.step_observer = self._observe

    def _observe(self, times: Any) -> None:
        while self._open and self._open[0][1].query():
            start, end = self._open.popleft()
            self.device_ms.append(start.elapsed_time(end))
        self.rows.append(times)

    def take(self) -> tuple[list[Any], list[float]]:
        """The steps and the decode passes' device ms since the last take."""
        rows, self.rows = self.rows, []
        device, self.device_ms = self.device_ms, []
        return rows, device


def _step_report(rows: list[Any], device: list[float], clients: int) -> dict[str, Any]:
    if not rows:
        return {}
    t0 = rows[0].start
    full = [t for t in rows if t.decode_only and t.tokens >= clients]
    ramp_end = full[0].start if full else rows[-1].end
    ramp = [t for t in rows if t.start < ramp_end]
    decode = [t for t in rows if t.decode_only]
    gaps = [b.start - a.end for a, b in itertools.pairwise(rows)]
    return {
        "steps": len(rows),
        "ramp_ms": round((ramp_end - t0) * 1e3, 1),
        "ramp_steps": f"{len(ramp)} ({sum(not t.decode_only for t in ramp)} with prefill)",
        "ramp_step_ms": [round((t.end - t.start) * 1e3, 1) for t in ramp][:24],
        "decode_ms_total": round(sum(t.end - t.start for t in decode) * 1e3, 1),
        "decode_step": _summary([t.end - t.start for t in decode]),
        "decode_host": _summary([t.host_s for t in decode]),
        "decode_launch": _summary([t.launch_s for t in decode]),
        "decode_wait": _summary([t.wait_s for t in decode]),
        "decode_device": _summary([d / 1e3 for d in device]),
        "gap": _summary([g for g in gaps if g < 0.05]),
        "last_step_end_ms": round((rows[-1].end - t0) * 1e3, 1),
    }


def _timeline(rows: list[Any]) -> list[str]:
    if not rows:
        return []
    t0 = rows[0].start
    return [
        f"{(t.start - t0) * 1e3:8.2f} ms {'decode' if t.decode_only else 'mixed '} "
        f"tokens {t.batch_tokens:5d} sampled {t.tokens:3d} step {(t.end - t.start) * 1e3:6.2f} "
        f"launch {t.launch_s * 1e3:5.2f} host {t.host_s * 1e3:6.2f} wait {t.wait_s * 1e3:6.2f}"
        for t in rows
    ]


def _load(url: str, model: str, a: argparse.Namespace, vocab: int, seed: int) -> Any:
    from pygpukit.llm.serve.loadgen import LoadResult

    cmd = [sys.executable, "-m", "pygpukit.llm.serve.loadgen", url, model, "--clients",
           str(a.clients), "--requests-per-client", "1", "--prompt-tokens", str(a.prompt),
           "--output-tokens", str(a.new), "--vocab", str(vocab), "--seed", str(seed),
           "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the load generator failed: {proc.stderr[-3000:]}")
    return LoadResult.from_json(proc.stdout)


def _apply(variant: str, engine: Any) -> None:
    """Set one variant (``si=S``, ``mbt=N``, ``lookahead=0|1``; ``default``: nothing)."""
    if variant == "default":
        return
    key, _, value = variant.partition("=")
    if key == "si":
        sys.setswitchinterval(float(value))
    elif key == "mbt":
        engine.planner.max_batched_tokens = int(value)
    elif key == "lookahead":
        engine.lookahead = value == "1"
    else:
        raise SystemExit(f"unknown variant {variant!r} (si=S, mbt=N, lookahead=0|1)")


def main(argv: list[str] | None = None) -> int:
    """Serve, run the rounds of every variant, print (and optionally save) what they showed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="llama-3.1-8b")
    p.add_argument("--clients", type=int, default=64)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per variant")
    p.add_argument("--variant", action="append", default=[],
                   help="si=S, mbt=N or lookahead=0|1 (repeatable; default first)")  # fmt: skip
    p.add_argument("--http", default="auto", help="uvicorn's HTTP implementation")
    p.add_argument("--loop", default="auto", help="uvicorn's event loop")
    p.add_argument("--timeline", action="store_true", help="print the last round's steps")
    p.add_argument("--json", help="also write the numbers here")
    a = p.parse_args(argv)

    import uvicorn

    from pygpukit.llm.benchmarks import SHAPES, _checkpoint
    from pygpukit.llm.serve.app import create_app
    from pygpukit.llm.serve.cli import _switch_interval, _warm_up, build_engines, serve_arguments
    from pygpukit.llm.serve.config_file import resolve_options
    from pygpukit.llm.serve.qos import apply_switch_interval

    t0 = time.perf_counter()
    serve_argv = [f"m={_checkpoint(a.shape)}", "--max-model-len", str(a.prompt + a.new + 64),
                  "--max-batch", "64", "--max-batched-tokens", "2048", "--port", "0"]  # fmt: skip
    parser = argparse.ArgumentParser()
    serve_arguments(parser)
    args = resolve_options(parser.parse_args(serve_argv))
    engines, _ = build_engines(args, sys.stderr)
    engine = engines["m"]
    _warm_up(engines)
    default_interval = apply_switch_interval(_switch_interval(args))
    log = StepLog(engine)
    config = uvicorn.Config(create_app(engines), host="127.0.0.1", port=0, log_level="warning",
                            http=a.http, loop=a.loop)  # fmt: skip
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True, name="event-loop")
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    vocab = int(SHAPES[a.shape]["vocab_size"])
    print(f"server up in {time.perf_counter() - t0:.1f} s (http {a.http}, loop {a.loop}); "
          f"warming up", flush=True)  # fmt: skip
    _load(url, "m", a, vocab, seed=0)  # captures the decode graphs of every batch bucket
    report: dict[str, Any] = {}
    base_mbt, base_lookahead = engine.planner.max_batched_tokens, engine.lookahead
    seeds = iter(range(1, 1 << 30))  # fresh prompts every round: no prefix-cache hits
    for variant in ["default", *a.variant]:
        sys.setswitchinterval(default_interval)
        engine.planner.max_batched_tokens, engine.lookahead = base_mbt, base_lookahead
        _apply(variant, engine)
        rounds = []
        for i in range(a.rounds):
            log.take()
            cpu0, child0 = _thread_cpu(), _children_cpu()
            result = _load(url, "m", a, vocab, seed=next(seeds))
            cpu1, child1 = _thread_cpu(), _children_cpu()
            rows, device = log.take()
            tokens = max(1, result.output_tokens)
            cpu = {name: round((cpu1[name] - cpu0.get(name, 0.0)) / tokens * 1e6, 1)
                   for name in cpu1 if cpu1[name] - cpu0.get(name, 0.0) > 0}  # fmt: skip
            out = {
                "tok_s": round(result.output_tokens_per_s, 1),
                "wall_ms": round(result.wall_s * 1e3, 1),
                "ttft": _summary(list(result.ttft_s)),
                "itl": _summary(list(result.itl_s)),
                "cpu_us_per_token": cpu,
                "loadgen_cpu_us_per_token": round((child1 - child0) / tokens * 1e6, 1),
                "steps": _step_report(rows, device, a.clients),
            }
            rounds.append(out)
            print(f"--- {variant} round {i + 1}", flush=True)
            print(json.dumps(out, indent=1), flush=True)
            if a.timeline and variant == "default" and i == a.rounds - 1:
                print("\n".join(_timeline(rows)), flush=True)
        report[variant] = rounds
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    server.should_exit = True
    thread.join(60)
    engine.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
