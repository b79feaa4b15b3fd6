"""Where a Guaranteed model's inter-token time goes beside a saturated BestEffort model.

Runs ``pygpukit serve`` *in this process* (so each engine's steps can be observed) with a
Guaranteed small model and a BestEffort big model in partitions, and drives it from
load-generator subprocesses (``python -m pygpukit.llm.serve.loadgen``): the small model's
clients alone, then beside the big model's clients. For each phase it prints:

- the small model's clients' inter-token latency p50/p99 (what the acceptance compares);
- each engine's steps (:class:`pygpukit.llm.engine.StepTimes`): host work, the wait for the
  sampled ids, the device time of the forward pass (CUDA events around it) and the gap
  between steps (the engine thread out of ``step``: waiting to get the interpreter lock
  back, or for work);
- a lock probe: a thread that sleeps 1 ms in a loop; how late it wakes is how long a thread
  waits for the interpreter lock (plus the OS's wake-up);
- the scheduler's pacing counters (launches the BestEffort partition had held).

Usage (GPU machine; random-weight checkpoints of the ``llm`` suite's shapes)::

    python tools/serve_isolation.py [--small qwen2.5-0.5b] [--big llama-3.1-8b]
        [--switch-interval S] [--no-partitions] [--new 128] [--memory 8GiB,56GiB]
        [--json OUT.json]

``--switch-interval`` is passed to the server (default: what ``serve`` picks);
``--no-partitions`` serves both models without partitions (plain streams, no QoS).
"""

from __future__ import annotations

import argparse
import itertools
import json
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


class LockProbe:
    """A thread that sleeps ``period`` s in a loop and records how late it wakes up."""

    def __init__(self, period: float = 1e-3) -> None:
        self.period, self.late = period, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="lock-probe")

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(self.period)
            self.late.append(time.perf_counter() - t - self.period)

    def start(self) -> LockProbe:
        """Start the probe thread; returns self."""
        self._thread.start()
        return self

    def take(self) -> list[float]:
        """The lateness samples (seconds) since the last take."""
        out, self.late = self.late, []
        return out

    def stop(self) -> None:
        """Stop the probe thread."""
        self._stop.set()
        self._thread.join()


class StepLog:
    """An engine's step observer: host, wait, device time of each step and gaps between."""

    def __init__(self, engine: Any) -> None:
        import pygpukit as gp

        self.rows: list[tuple[Any, float]] = []
        self._events: tuple[Any, Any] | None = None
        inner = engine._logits

        def timed_logits(plan: Any) -> Any:
            # Inside the engine's context: the events go on the partition's stream.
            start = gp.Event(timing=True).record()
            out = inner(plan)
            self._events = (start, gp.Event(timing=True).record())
            return out

        engine._logits = timed_logits
        engine.step_observer = self._observe

    def _observe(self, times: Any) -> None:
        device_ms = float("nan")
        if self._events is not None:
            start, end = self._events
            device_ms = start.elapsed_time(end)  # done: the sampled ids came after it
            self._events = None
        self.rows.append((times, device_ms))

    def take(self) -> list[tuple[Any, float]]:
        """The steps ``(StepTimes, device ms)`` observed since the last take."""
        out, self.rows = self.rows, []
        return out

    @staticmethod
    def report(rows: list[tuple[Any, float]]) -> dict[str, str]:
        """Percentiles of the decode-only steps' phases, and of the gaps between steps."""
        decode = [(t, d) for t, d in rows if t.decode_only]
        gaps = [b.start - a.end for (a, _), (b, _) in itertools.pairwise(rows)]
        return {
            "steps": f"{len(rows)} ({len(decode)} decode-only)",
            "step": _summary([t.end - t.start for t, _ in decode]),
            "host": _summary([t.host_s for t, _ in decode]),
            "wait": _summary([t.wait_s for t, _ in decode]),
            "device": _summary([d / 1e3 for _, d in decode if d == d]),
            "gap": _summary([g for g in gaps if g < 0.05]),
        }


def _load(url: str, model: str, clients: int, requests: int, new: int, vocab: int,
          seed: int) -> subprocess.Popen[str]:  # fmt: skip
    cmd = [sys.executable, "-m", "pygpukit.llm.serve.loadgen", url, model, "--clients",
           str(clients), "--requests-per-client", str(requests), "--prompt-tokens", "128",
           "--output-tokens", str(new), "--vocab", str(vocab), "--seed", str(seed),
           "--json"]  # fmt: skip
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen[str]) -> Any:
    from pygpukit.llm.serve.loadgen import LoadResult

    out, err = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"a load generator failed: {err[-3000:]}")
    return LoadResult.from_json(out)


def main(argv: list[str] | None = None) -> int:
    """Run the alone and loaded phases and print (and optionally save) what they showed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", default="qwen2.5-0.5b")
    p.add_argument("--big", default="llama-3.1-8b")
    p.add_argument("--switch-interval", type=float)
    p.add_argument("--no-partitions", action="store_true")
    p.add_argument("--new", type=int, default=128, help="tokens per measured request")
    p.add_argument("--memory", default="8GiB,56GiB", help="the two partitions' sizes")
    p.add_argument("--json", help="also write the numbers here")
    a = p.parse_args(argv)

    import uvicorn

    import pygpukit as gp
    from pygpukit.llm.benchmarks import SHAPES, _checkpoint
    from pygpukit.llm.serve.app import create_app
    from pygpukit.llm.serve.cli import (
        _switch_interval,
        _warm_up,
        build_engines,
        serve_arguments,
    )
    from pygpukit.llm.serve.config_file import resolve_options
    from pygpukit.llm.serve.qos import apply_switch_interval

    t0 = time.perf_counter()
    g, be = "guaranteed", "besteffort"
    argv_s = [f"{g}={_checkpoint(a.small)}", f"{be}={_checkpoint(a.big)}", "--max-model-len",
              "512", "--max-batch", "64", "--kv-memory", "0.6", "--port", "0"]  # fmt: skip
    if not a.no_partitions:
        mem_g, mem_be = a.memory.split(",")
        argv_s += ["--partition", f"{g}={mem_g},0.25,guaranteed", "--partition",
                   f"{be}={mem_be},0,besteffort"]  # fmt: skip
    if a.switch_interval is not None:
        argv_s += ["--switch-interval", str(a.switch_interval)]
    parser = argparse.ArgumentParser()
    serve_arguments(parser)
    args = resolve_options(parser.parse_args(argv_s))
    interval = _switch_interval(args)
    engines, scheduler = build_engines(args, sys.stderr)
    apply_switch_interval(interval)
    _warm_up(engines)
    logs = {name: StepLog(e) for name, e in engines.items()}
    config = uvicorn.Config(create_app(engines), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    print(f"server up in {time.perf_counter() - t0:.1f} s; switch interval "
          f"{sys.getswitchinterval() * 1e3:g} ms; partitions: {not a.no_partitions}",
          flush=True)  # fmt: skip
    for e in engines.values():
        part = e.partition
        if part is not None:
            print(f"  {part.id}: {part.compute_mode}, {part.sm_count} SMs, stream priority "
                  f"{part.stream.priority}", flush=True)  # fmt: skip
    small_vocab, big_vocab = int(SHAPES[a.small]["vocab_size"]), int(SHAPES[a.big]["vocab_size"])
    probe = LockProbe().start()
    report: dict[str, Any] = {"switch_interval_ms": sys.getswitchinterval() * 1e3,
                              "partitions": not a.no_partitions}  # fmt: skip

    def phase(name: str, noise: subprocess.Popen[str] | None) -> None:
        for log in logs.values():
            log.take()
        probe.take()
        pacing0 = gp.scheduler.pacing_stats()
        measured = _result(_load(url, g, 4, 2, a.new, small_vocab, seed=0))
        covered = noise is None or noise.poll() is None
        rows = {n: StepLog.report(log.take()) for n, log in logs.items()}
        late = probe.take()
        pacing1 = gp.scheduler.pacing_stats()
        itl = list(measured.itl_s)
        out = {"itl": _summary(itl), "itl_p99_ms": _pct(itl, 99), "itl_p50_ms": _pct(itl, 50),
               "lock_probe_late": _summary(late), "covered": covered, "engines": rows,
               "pacing": {str(k): {f: v[f] - pacing0["partitions"].get(k, {}).get(f, 0)
                                   for f in ("launched", "held", "forced")}
                          for k, v in pacing1["partitions"].items()}}  # fmt: skip
        report[name] = out
        print(f"--- {name} (BestEffort still loaded at the end: {covered})", flush=True)
        print(json.dumps(out, indent=1), flush=True)

    phase("alone", None)
    noise = _load(url, be, 64, 2, 128, big_vocab, seed=1)
    deadline = time.monotonic() + 120
    while engines[be].stats()["running"] < 48 and noise.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    phase("loaded", noise)
    big = _result(noise)
    report["besteffort_tok_s"] = big.output_tokens_per_s
    report["ratio_p99"] = report["loaded"]["itl_p99_ms"] / report["alone"]["itl_p99_ms"]
    print(f"BestEffort: {big.output_tokens_per_s:.0f} tok/s, ITL p99 "
          f"{big.percentile('itl', 99) * 1e3:.2f} ms; Guaranteed ITL p99 ratio "
          f"{report['ratio_p99']:.2f}x", flush=True)  # fmt: skip
    probe.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    server.should_exit = True
    thread.join(60)
    for e in engines.values():
        e.shutdown()
    if scheduler is not None:
        scheduler.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
