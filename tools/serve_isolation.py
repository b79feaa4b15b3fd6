"""Where a Guaranteed model's inter-token time goes beside a saturated BestEffort model.

Runs ``pygpukit serve`` *in this process* (so each engine's steps can be observed) with a
Guaranteed small model and a BestEffort big model in partitions, and drives it from
load-generator subprocesses (``python -m pygpukit.llm.serve.loadgen``): the small model's
clients alone, then beside the big model's clients. For each phase it prints:

- the small model's clients' inter-token latency p50/p99 (what the acceptance compares);
- each engine's steps (:class:`pygpukit.llm.engine.StepTimes`): host work, the wait for the
  sampled ids, the device time of each decode forward pass (CUDA events around it) and the gap
  between steps (the engine thread out of ``step``: waiting to get the interpreter lock
  back, or for work);
- a lock probe: a thread that sleeps 1 ms in a loop; how late it wakes is how long a thread
  waits for the interpreter lock (plus the OS's wake-up);
- the scheduler's pacing counters (launches the BestEffort partition had held).

Usage (GPU machine; random-weight checkpoints of the ``llm`` suite's shapes)::

    python tools/serve_isolation.py [--small qwen2.5-0.5b] [--big llama-3.1-8b]
        [--switch-interval S] [--no-partitions] [--new 128] [--memory 8GiB,56GiB]
        [--no-host-turns] [--compare-turns] [--be-requests 2] [--json OUT.json]

``--switch-interval`` is passed to the server (default: what ``serve`` picks);
``--no-partitions`` serves both models without partitions (plain streams, no QoS);
``--no-host-turns``: the engines take no host turns (``serve`` makes the BestEffort model's
engine and streams step aside while the Guaranteed one's host work is due);
``--compare-turns``: a second loaded phase with host turns the other way (give the BestEffort
clients enough work with ``--be-requests``).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_round import _thread_cpu


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
    """An engine's step observer: host and wait time of each step, gaps between steps.

    Also the device time of every decode forward pass (CUDA events around each one, planned
    or queued ahead).
    """

    def __init__(self, engine: Any) -> None:
        import pygpukit as gp

        self.rows: list[Any] = []
        self.device_ms: list[float] = []
        self._open: collections.deque[tuple[Any, Any]] = collections.deque()
        inner = engine.decode.logits

        def timed_logits(*args: Any, **kwargs: Any) -> Any:
            # Inside the engine's context: the events go on the partition's stream, so the
            # start event is reached when the stream gets to this pass (not at its enqueue).
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
        """The steps (``StepTimes``) and the passes' device ms since the last take."""
        rows, self.rows = self.rows, []
        device, self.device_ms = self.device_ms, []
        return rows, device

    @staticmethod
    def report(taken: tuple[list[Any], list[float]]) -> dict[str, str]:
        """Percentiles of the decode-only steps' phases, the gaps and the device times."""
        rows, device = taken
        decode = [t for t in rows if t.decode_only]
        gaps = [b.start - a.end for a, b in itertools.pairwise(rows)]
        return {
            "steps": f"{len(rows)} ({len(decode)} decode-only)",
            "step": _summary([t.end - t.start for t in decode]),
            "host": _summary([t.host_s for t in decode]),
            "launch": _summary([t.launch_s for t in decode]),
            "wait": _summary([t.wait_s for t in decode]),
            "device": _summary([d / 1e3 for d in device]),
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
    p.add_argument("--no-host-turns", action="store_true",
                   help="the engines take no host turns (the protected model's host work does "
                   "not go first)")  # fmt: skip
    p.add_argument(
        "--compare-turns",
        action="store_true",
        help="a second loaded phase with host turns switched the other way",
    )
    p.add_argument(
        "--be-requests",
        type=int,
        default=2,
        help="requests per BestEffort client (the load must outlast the phases)",
    )
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
    priority = next((e.host_priority for e in engines.values() if e.host_priority), None)
    protected = {name: e.protected for name, e in engines.items()}

    def host_turns(on: bool) -> None:
        for name, e in engines.items():
            e.share_host(priority if on else None, protected=protected[name])

    if a.no_host_turns:
        host_turns(False)
    logs = {name: StepLog(e) for name, e in engines.items()}
    config = uvicorn.Config(create_app(engines), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True, name="event-loop")
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
        yields0 = (priority.yields, priority.yielded_s) if priority else (0, 0.0)
        cpu0, t0 = _thread_cpu(), time.perf_counter()
        measured = _result(_load(url, g, 4, 2, a.new, small_vocab, seed=0))
        cpu1, wall = _thread_cpu(), time.perf_counter() - t0
        # Each thread's share of one core over the phase (the interpreter lock allows ~1.0).
        busy = {name: round((cpu1[name] - cpu0.get(name, 0.0)) / wall, 2) for name in cpu1
                if cpu1[name] > cpu0.get(name, 0.0)}  # fmt: skip
        covered = noise is None or noise.poll() is None
        rows = {n: StepLog.report(log.take()) for n, log in logs.items()}
        late = probe.take()
        pacing1 = gp.scheduler.pacing_stats()
        itl = list(measured.itl_s)
        turns_on = any(e.host_priority is not None for e in engines.values())
        yields = ({"yields": priority.yields - yields0[0],
                   "yielded_ms": round((priority.yielded_s - yields0[1]) * 1e3, 1)}
                  if priority and turns_on else "off")  # fmt: skip
        out = {"host_turns": yields, "cpu_share": busy,
               "itl": _summary(itl), "itl_p99_ms": _pct(itl, 99), "itl_p50_ms": _pct(itl, 50),
               "lock_probe_late": _summary(late), "covered": covered, "engines": rows,
               "pacing": {str(k): {f: v[f] - pacing0["partitions"].get(k, {}).get(f, 0)
                                   for f in ("launched", "held", "forced")}
                          for k, v in pacing1["partitions"].items()}}  # fmt: skip
        report[name] = out
        print(f"--- {name} (BestEffort still loaded at the end: {covered})", flush=True)
        print(json.dumps(out, indent=1), flush=True)

    phase("alone", None)
    noise = _load(url, be, 64, a.be_requests, 128, big_vocab, seed=1)
    deadline = time.monotonic() + 120
    while engines[be].stats()["running"] < 48 and noise.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    phase("loaded", noise)
    if a.compare_turns and priority is not None:
        host_turns(a.no_host_turns)
        phase("loaded_turns_" + ("on" if a.no_host_turns else "off"), noise)
    big = _result(noise)
    report["besteffort_tok_s"] = big.output_tokens_per_s
    report["ratio_p99"] = report["loaded"]["itl_p99_ms"] / report["alone"]["itl_p99_ms"]
    print(f"BestEffort: {big.output_tokens_per_s:.0f} tok/s, ITL p99 "
          f"{big.percentile('itl', 99) * 1e3:.2f} ms; Guaranteed ITL p99 ratio "
          f"{report['ratio_p99']:.2f}x", flush=True)  # fmt: skip
    for name in [k for k in report if k.startswith("loaded_turns_")]:
        ratio = report[name]["itl_p99_ms"] / report["alone"]["itl_p99_ms"]
        print(f"{name}: Guaranteed ITL p99 ratio {ratio:.2f}x", flush=True)
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
