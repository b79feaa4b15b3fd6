"""Where a Guaranteed model's inter-token time goes beside a saturated BestEffort model.

Runs ``pygpukit serve`` *in this process* (:mod:`serve_probe`) with a Guaranteed small model
and a BestEffort big model in partitions, and drives it from load-generator subprocesses: the
small model's clients alone, then beside the big model's clients (then once per
``--variant``). For each phase it prints:

- the small model's clients' inter-token latency p50/p99 (what the acceptance compares);
- **where the slow ones went** (``slow``): every token of the small model is timed where the
  engine hands it out (``emit``), where the event loop takes it from the engine (``deliver``)
  and where the client reads it (``arrive``, the same clock: ``time.perf_counter()`` is
  system-wide); each inter-token latency splits into the engine's gap between the two
  tokens, the change of the event loop's lag, and the change of the rest (the stream's write,
  the socket, the client). For the slowest ``--slow-top`` of them, the engine step that handed
  the token out: its host time, how much of it the thread ran (``host_cpu``) or did not
  (``host_off_cpu``: waiting for the interpreter lock or for a core), its wait for the
  sampled ids and its forward pass's device time (CUDA events); and whether a BestEffort step
  with a prefill chunk, or the BestEffort engine's launching, overlapped it (against the
  share of all gaps that overlap one: the base rate);
- each engine's steps (:class:`serve_probe.StepLog`): host work, its CPU time, the wait for the
  sampled ids, the device time of each decode forward pass and the gap between steps;
- a lock probe: a thread that sleeps 1 ms in a loop; how late it wakes is how long a thread
  waits for the interpreter lock (plus the OS's wake-up);
- each thread's share of a core and its involuntary context switches (the host short of
  cores), and the scheduler's pacing counters (launches the BestEffort partition had held).

Usage (GPU machine; random-weight checkpoints of the ``llm`` suite's shapes)::

    python tools/serve_isolation.py [--small qwen2.5-0.5b] [--big llama-3.1-8b]
        [--switch-interval S] [--no-partitions] [--new 128] [--memory 8GiB,56GiB]
        [--no-host-turns] [--compare-turns] [--variant turns=off ...] [--be-requests 2]
        [--slow-top 0.01] [--profile-steps] [--json OUT.json]

``--switch-interval`` is passed to the server (default: what ``serve`` picks);
``--no-partitions`` serves both models without partitions (plain streams, no QoS);
``--no-host-turns``: the engines take no host turns (``serve`` makes the BestEffort model's
engine and streams step aside while the Guaranteed one's host work is due);
``--compare-turns``: a second loaded phase with host turns the other way;
``--profile-steps``: a last phase alone with the Guaranteed engine's steps under cProfile
(where their host time goes, by cumulative and own time);
``--variant``: another loaded phase with one thing changed, then changed back:
``turns=on|off``, ``keep_gil=on|off`` (the protected engine's launches keep the interpreter
lock in its host phase: ``pygpukit.llm.engine.host_priority``), ``si=SECONDS`` (the switch
interval), ``be_mbt=N`` (the BestEffort engine's tokens per step), ``be_chunk=N`` (its prompt
tokens per step while requests decode), ``pacing_hold=SECONDS`` (the longest a paced launch
is held), ``gc=off|freeze`` (the interpreter's garbage collector off, or everything alive
then frozen out of its scans), ``default`` (nothing: the loaded phase again, to compare
phases at other moments of the BestEffort load); settings joined by commas change together
(``be_mbt=2048,be_chunk=2048``). Each phase also lists the garbage collections' pauses and
how many slow gaps one overlapped, and how many overlapped the launching of a step with a
prompt chunk (a request joining). Give the
BestEffort clients enough work for every loaded phase with ``--be-requests``.
"""

from __future__ import annotations

import argparse
import bisect
import gc
import itertools
import json
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_probe import (
    StepLog,
    StepRow,
    arrival_itl,
    host_facts,
    load_process,
    load_result,
    pct,
    prompt_key,
    serve_in_process,
    summary,
    thread_cpu,
    thread_switches,
)


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


class GcClock:
    """The interpreter's garbage collections: ``(start, end, generation)`` of each one.

    A collection runs on whichever thread allocated last, with the interpreter lock held:
    every thread of the server waits for it.
    """

    def __init__(self) -> None:
        self.pauses: list[tuple[float, float, int]] = []
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.pauses.append((self._start, time.perf_counter(), int(info["generation"])))

    def take(self) -> list[tuple[float, float, int]]:
        """The collections since the last take."""
        out, self.pauses = self.pauses, []
        return out


class TokenClock:
    """When each of an engine's tokens was handed out, and when the event loop took them.

    Wraps the engine's ``submit`` (a request's prompt key to its id) and ``_emit`` (the time
    each output went to its sink), and the app's outbox delivery (the time the event loop
    took every output waiting then): install before the app is made.
    """

    def __init__(self) -> None:
        self.rid_of: dict[str, str] = {}
        self.emits: dict[str, list[float]] = {}
        self.deliveries: list[float] = []
        self.delivered: list[int] = []  # outputs of every model taken by each delivery

    def watch_outbox(self) -> None:
        """Time the event loop's deliveries (every model's outputs)."""
        from pygpukit.llm.serve import app

        inner = app._Outbox._deliver
        clock = self

        def deliver(box: Any) -> None:
            t, waiting = time.perf_counter(), len(box._items)
            inner(box)
            clock.deliveries.append(t)
            clock.delivered.append(waiting)

        app._Outbox._deliver = deliver  # type: ignore[method-assign,assignment]

    def watch(self, engine: Any) -> None:
        """Time the outputs of ``engine``."""
        submit, emit = engine.submit, engine._emit

        def timed_submit(prompt: Any, params: Any, sink: Any, **kw: Any) -> str:
            rid = submit(prompt, params, sink, **kw)
            if not isinstance(prompt, str):
                self.rid_of[prompt_key(list(prompt))] = rid
            return str(rid)

        def timed_emit(request: Any, output: Any) -> None:
            self.emits.setdefault(request.request_id, []).append(time.perf_counter())
            emit(request, output)

        engine.submit, engine._emit = timed_submit, timed_emit

    def delivery_after(self, t: float) -> float:
        """When the event loop took an output handed out at ``t`` (NaN: not seen)."""
        i = bisect.bisect_left(self.deliveries, t)
        return self.deliveries[i] if i < len(self.deliveries) else float("nan")


def _step_at(rows: list[StepRow], t: float) -> StepRow | None:
    starts = [r.times.start for r in rows]
    i = bisect.bisect_right(starts, t) - 1
    return rows[i] if i >= 0 and rows[i].times.end >= t else None


def _overlaps(windows: list[tuple[float, float]], a: float, b: float) -> bool:
    return any(s < b and e > a for s, e in windows)


def _gap_steps(samples: Sequence[tuple[float, ...]], rows: list[StepRow],
               passes: list[tuple[float, float]]) -> dict[str, Any]:  # fmt: skip
    """The engine steps behind gaps between two tokens of a request.

    The step that handed out the earlier token (its wait for the next ids falls in the gap),
    the one that handed out the later (its planning and launching), and the longest forward
    pass queued from 5 ms before the gap to its end.
    """
    waits, off_cpu, heads, device, mixed = [], [], [], [], 0
    enqueued = [t for t, _ in passes]
    for s in samples:
        before, after = _step_at(rows, s[5]), _step_at(rows, s[4])
        if before is None or after is None:
            continue
        waits.append(before.times.sampled - before.times.flushed)
        off_cpu.append(before.host_off_cpu_s + (after.host_off_cpu_s if after is not before
                                                else 0.0))  # fmt: skip
        heads.append(after.times.enqueued - after.times.start)
        mixed += not (before.times.decode_only and after.times.decode_only)
        lo, hi = bisect.bisect_left(enqueued, s[5] - 5e-3), bisect.bisect_right(enqueued, s[4])
        if hi > lo:
            device.append(max(ms for _, ms in passes[lo:hi]) / 1e3)
    return {"matched": len(waits), "with_prefill_step": mixed,
            "wait_before": summary(waits), "host_off_cpu": summary(off_cpu),
            "plan_and_launch_after": summary(heads), "device_max": summary(device)}  # fmt: skip


def attribute(arrivals: dict[str, Any], clock: TokenClock, g_rows: list[StepRow],
              g_passes: list[tuple[float, float]], be_rows: list[StepRow], top: float,
              gc_pauses: Sequence[tuple[float, float, int]] = ()) -> dict[str, Any]:  # fmt: skip
    """Split each inter-token latency into engine, event-loop and client parts (see module)."""
    samples = []  # (itl, engine gap, loop lag change, rest, emit time, previous emit time)
    unmatched = 0
    for key, arrive in arrivals["arrivals"].items():
        rid = clock.rid_of.get(key)
        emit = clock.emits.get(rid, []) if rid else []
        n = min(len(arrive), len(emit))
        if n != len(arrive):
            unmatched += len(arrive) - n
        for k in range(1, n):
            itl = arrive[k] - arrive[k - 1]
            gap = emit[k] - emit[k - 1]
            lag = [clock.delivery_after(emit[j]) - emit[j] for j in (k - 1, k)]
            loop = lag[1] - lag[0]
            samples.append((itl, gap, loop, itl - gap - loop, emit[k], emit[k - 1]))
    if not samples:
        return {"unmatched_tokens": unmatched}
    samples.sort(key=lambda s: s[0])
    slow = samples[-max(1, round(len(samples) * top)) :]
    be_prefill = [(r.times.start, r.times.end) for r in be_rows if not r.times.decode_only]
    be_launch = [(r.times.start, r.times.enqueued) for r in be_rows if r.times.launch_s > 1e-3]
    # A step with a prompt chunk was launched in the step before it (queued ahead) or in it.
    g_prefill = [(a.times.start, b.times.enqueued)
                 for a, b in itertools.pairwise(g_rows) if not b.times.decode_only]  # fmt: skip

    def mean_ms(values: list[float]) -> float:
        return round(float(np.mean(values)) * 1e3, 3) if values else float("nan")

    def share(rows: list[tuple[Any, ...]], windows: list[tuple[float, float]]) -> float:
        hits = sum(_overlaps(windows, s[5], s[4]) for s in rows)
        return round(hits / len(rows), 3) if rows else float("nan")

    def delivered(rows: list[tuple[Any, ...]]) -> float:
        counts = []
        for s in rows:
            lo = bisect.bisect_left(clock.deliveries, s[5])
            hi = bisect.bisect_right(clock.deliveries, s[4])
            counts.append(sum(clock.delivered[lo:hi]))
        return round(float(np.mean(counts)), 1) if counts else float("nan")

    return {
        "samples": len(samples),
        "unmatched_tokens": unmatched,
        "slow_n": len(slow),
        "slow_itl_min_ms": round(slow[0][0] * 1e3, 3),
        # The mean parts of the slow samples, and of all (each row adds up to its itl).
        "slow_mean_ms": {
            "itl": mean_ms([s[0] for s in slow]),
            "engine_gap": mean_ms([s[1] for s in slow]),
            "loop_lag": mean_ms([s[2] for s in slow]),
            "write_and_client": mean_ms([s[3] for s in slow]),
        },
        "all_mean_ms": {
            "itl": mean_ms([s[0] for s in samples]),
            "engine_gap": mean_ms([s[1] for s in samples]),
            "loop_lag": mean_ms([s[2] for s in samples]),
            "write_and_client": mean_ms([s[3] for s in samples]),
        },
        "engine_gap": summary([s[1] for s in samples]),
        # The engine steps around the slow gaps, and around all of them.
        "slow_steps": _gap_steps(slow, g_rows, g_passes),
        "all_steps": _gap_steps(samples, g_rows, g_passes),
        # Share of gaps a BestEffort prefill step (or its launching) overlapped: slow vs all.
        "be_prefill_overlap": {"slow": share(slow, be_prefill), "all": share(samples, be_prefill)},
        "be_launch_overlap": {"slow": share(slow, be_launch), "all": share(samples, be_launch)},
        # Outputs (every model's) the event loop took during the gap: slow vs all.
        "loop_outputs_in_gap": {"slow": delivered(slow), "all": delivered(samples)},
        # Share of gaps a garbage collection (any generation; generation 2) overlapped.
        "gc_overlap": {
            "slow": share(slow, [(a, b) for a, b, _ in gc_pauses]),
            "all": share(samples, [(a, b) for a, b, _ in gc_pauses]),
            "slow_gen2": share(slow, [(a, b) for a, b, g in gc_pauses if g == 2]),
        },
        # Share of gaps in which the engine launched a step with a prompt chunk (a request
        # joining: its prefill is launched eagerly, while the others' next token waits).
        "prefill_launch_overlap": {
            "slow": share(slow, g_prefill),
            "all": share(samples, g_prefill),
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run the alone and loaded phases and print (and optionally save) what they showed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", default="qwen2.5-0.5b")
    p.add_argument("--big", default="llama-3.1-8b")
    p.add_argument("--switch-interval", type=float)
    p.add_argument("--no-partitions", action="store_true")
    p.add_argument("--new", type=int, default=128, help="tokens per measured request")
    p.add_argument("--requests", type=int, default=2, help="requests per measured client")
    p.add_argument("--memory", default="8GiB,56GiB", help="the two partitions' sizes")
    p.add_argument("--json", help="also write the numbers here")
    p.add_argument("--no-host-turns", action="store_true",
                   help="the engines take no host turns (the protected model's host work does "
                   "not go first)")  # fmt: skip
    p.add_argument("--compare-turns", action="store_true",
                   help="a second loaded phase with host turns switched the other way")  # fmt: skip
    p.add_argument("--variant", action="append", default=[],
                   help="a loaded phase with default, turns=on|off, keep_gil=on|off, "
                   "gc=off|freeze, si=S, be_mbt=N, be_chunk=N or pacing_hold=S, or several "
                   "joined by commas (repeatable)")  # fmt: skip
    p.add_argument("--be-requests", type=int, default=2,
                   help="requests per BestEffort client (it must outlast the phases)")  # fmt: skip
    p.add_argument("--slow-top", type=float, default=0.01,
                   help="the share of slowest inter-token latencies to attribute")  # fmt: skip
    p.add_argument("--profile-steps", action="store_true",
                   help="also profile the Guaranteed engine's steps (cProfile, its thread "
                   "only) in a last alone phase and print where their host time goes")  # fmt: skip
    a = p.parse_args(argv)

    import pygpukit as gp
    from pygpukit.llm.benchmarks import SHAPES, _checkpoint

    g, be = "guaranteed", "besteffort"
    argv_s = [f"{g}={_checkpoint(a.small)}", f"{be}={_checkpoint(a.big)}", "--max-model-len",
              "512", "--max-batch", "64", "--kv-memory", "0.6"]  # fmt: skip
    if not a.no_partitions:
        mem_g, mem_be = a.memory.split(",")
        argv_s += ["--partition", f"{g}={mem_g},0.25,guaranteed", "--partition",
                   f"{be}={mem_be},0,besteffort"]  # fmt: skip
    if a.switch_interval is not None:
        argv_s += ["--switch-interval", str(a.switch_interval)]
    clock = TokenClock()
    clock.watch_outbox()
    served = serve_in_process(argv_s)
    engines, logs = served.engines, served.logs
    clock.watch(engines[g])
    priority = next((e.host_priority for e in engines.values() if e.host_priority), None)
    protected = {name: e.protected for name, e in engines.items()}

    def host_turns(on: bool) -> None:
        for name, e in engines.items():
            e.share_host(priority if on else None, protected=protected[name])

    if a.no_host_turns:
        host_turns(False)
    url = served.url
    facts = host_facts()
    print(f"server up in {served.started_s:.1f} s; switch interval "
          f"{served.switch_interval * 1e3:g} ms; partitions: {not a.no_partitions}; host: "
          f"{json.dumps(facts)}", flush=True)  # fmt: skip
    for e in engines.values():
        part = e.partition
        if part is not None:
            print(f"  {part.id}: {part.compute_mode}, {part.sm_count} SMs, stream priority "
                  f"{part.stream.priority}", flush=True)  # fmt: skip
    small_vocab, big_vocab = int(SHAPES[a.small]["vocab_size"]), int(SHAPES[a.big]["vocab_size"])
    probe = LockProbe().start()
    gcs = GcClock()
    report: dict[str, Any] = {"host": facts, "switch_interval_ms": served.switch_interval * 1e3,
                              "partitions": not a.no_partitions}  # fmt: skip
    seeds = iter(range(1 << 30))  # fresh prompts every phase: no prefix-cache hits

    def phase(name: str, noise: Any) -> None:
        for log in logs.values():
            log.take()
        probe.take()
        gcs.take()
        pacing0 = gp.scheduler.pacing_stats()
        yields0 = (priority.yields, priority.yielded_s) if priority else (0, 0.0)
        cpu0, sw0, t0 = thread_cpu(), thread_switches(), time.perf_counter()
        arrivals = load_result(load_process(url, g, clients=4, requests=a.requests, prompt=128,
                                            new=a.new, vocab=small_vocab, seed=next(seeds),
                                            arrivals=True))  # fmt: skip
        cpu1, sw1, wall = thread_cpu(), thread_switches(), time.perf_counter() - t0
        # Each thread's share of one core over the phase (the interpreter lock allows ~1.0).
        busy = {n: round((cpu1[n] - cpu0.get(n, 0.0)) / wall, 2) for n in cpu1
                if cpu1[n] > cpu0.get(n, 0.0)}  # fmt: skip
        involuntary = {n: sw1[n][1] - sw0.get(n, (0, 0))[1] for n in sw1
                       if sw1[n][1] > sw0.get(n, (0, 0))[1]}  # fmt: skip
        covered = noise is None or noise.poll() is None
        rows = {n: log.take() for n, log in logs.items()}
        late = probe.take()
        pauses = gcs.take()
        pacing1 = gp.scheduler.pacing_stats()
        itl = arrival_itl(arrivals)
        turns_on = any(e.host_priority is not None for e in engines.values())
        yields = ({"yields": priority.yields - yields0[0],
                   "yielded_ms": round((priority.yielded_s - yields0[1]) * 1e3, 1)}
                  if priority and turns_on else "off")  # fmt: skip
        keep = priority.launches_keep_gil if priority and turns_on else None
        out = {"launches_keep_gil": keep, "itl": summary(itl), "itl_p99_ms": pct(itl, 99),
               "itl_p50_ms": pct(itl, 50), "itl_p90_ms": pct(itl, 90), "covered": covered,
               "slow": attribute(arrivals, clock, rows[g], logs[g].taken_passes,
                                 rows.get(be, []), a.slow_top, pauses),
               "gc": {f"gen{k}": summary([e - b for b, e, gen in pauses if gen == k])
                      for k in (0, 1, 2)},
               "engines": {n: StepLog.report(r) for n, r in rows.items()},
               "host_turns": yields, "cpu_share": busy, "involuntary_switches": involuntary,
               "loadavg": host_facts()["loadavg"], "lock_probe_late": summary(late),
               "pacing": {str(k): {f: round(v[f] - pacing0["partitions"].get(k, {}).get(f, 0), 1)
                                   for f in ("launched", "held", "held_ms", "forced")
                                   if f in v}
                          for k, v in pacing1["partitions"].items()}}  # fmt: skip
        report[name] = out
        print(f"--- {name} (BestEffort still loaded at the end: {covered})", flush=True)
        print(json.dumps(out, indent=1), flush=True)

    def apply(variant: str) -> Any:
        """Set one variant (settings joined by commas); returns what undoes it."""
        if "," in variant:
            undos = [apply(part) for part in variant.split(",")]
            return lambda: [undo() for undo in reversed(undos)]
        key, _, value = variant.partition("=")
        if key == "default":
            return lambda: None
        if key == "gc" and value in ("off", "freeze"):
            if value == "off":
                gc.disable()
                return gc.enable
            gc.freeze()  # what exists now (models, tokenizers) is never scanned again
            return gc.unfreeze
        if key == "turns":
            was = any(e.host_priority is not None for e in engines.values())
            host_turns(value == "on")
            return lambda: host_turns(was)
        if key == "si":
            was_si = sys.getswitchinterval()
            sys.setswitchinterval(float(value))
            return lambda: sys.setswitchinterval(was_si)
        if key == "be_mbt":
            planner = engines[be].planner
            was_mbt = planner.max_batched_tokens
            planner.max_batched_tokens = int(value)
            return lambda: setattr(planner, "max_batched_tokens", was_mbt)
        if key == "be_chunk" and hasattr(engines[be].planner, "prefill_chunk"):
            chunked = engines[be].planner
            was_chunk = chunked.prefill_chunk
            chunked.prefill_chunk = int(value)
            return lambda: setattr(chunked, "prefill_chunk", was_chunk)
        if key == "keep_gil" and priority is not None:
            was_keep = priority.launches_keep_gil
            priority.launches_keep_gil = value == "on"
            return lambda: setattr(priority, "launches_keep_gil", was_keep)
        if key == "pacing_hold":
            gp.scheduler.set_pacing_max_hold(float(value))
            return lambda: gp.scheduler.set_pacing_max_hold(0.05)
        raise SystemExit(f"unknown variant {variant!r} (default, turns=on|off, "
                         "keep_gil=on|off, gc=off|freeze, si=S, be_mbt=N, be_chunk=N, "
                         "pacing_hold=S)")  # fmt: skip

    variants = list(a.variant)
    if a.compare_turns and priority is not None:
        variants.append("turns=" + ("on" if a.no_host_turns else "off"))
    phase("alone", None)
    noise = load_process(url, be, clients=64, requests=a.be_requests, prompt=128, new=128,
                         vocab=big_vocab, seed=1 << 20)  # fmt: skip
    deadline = time.monotonic() + 120
    while engines[be].stats()["running"] < 48 and noise.poll() is None:
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    phase("loaded", noise)
    for variant in variants:
        undo = apply(variant)
        try:
            phase(f"loaded_{variant}", noise)
        finally:
            undo()
    big = load_result(noise)
    report["besteffort_tok_s"] = big.output_tokens_per_s
    alone = report["alone"]["itl_p99_ms"]
    print(f"BestEffort: {big.output_tokens_per_s:.0f} tok/s, ITL p99 "
          f"{big.percentile('itl', 99) * 1e3:.2f} ms", flush=True)  # fmt: skip
    for name in [k for k in report if k.startswith("loaded")]:
        ratio = report[name]["itl_p99_ms"] / alone
        report[name]["ratio_p99"] = ratio
        print(f"{name}: Guaranteed ITL p99 {report[name]['itl_p99_ms']:.2f} ms, "
              f"{ratio:.2f}x alone ({alone:.2f} ms)", flush=True)  # fmt: skip
    if a.profile_steps:
        import cProfile
        import io
        import pstats

        logs[g].profile = cProfile.Profile()
        phase("alone_profiled", None)
        out = io.StringIO()
        stats = pstats.Stats(logs[g].profile, stream=out)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(25)
        logs[g].profile = None
        print(out.getvalue(), flush=True)
    probe.stop()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    served.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
