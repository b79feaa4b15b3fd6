"""Serve throughput under steady load, for several prefill caps (``--prefill-chunk``) in turn.

Runs ``pygpukit serve`` with one random-weight model *in this process*, so that the engine's
``prefill_chunk`` can change between rounds and its steps can be observed, and drives it with
the load generator in a subprocess (``python -m pygpukit.llm.serve.loadgen``), as the ``serve``
benchmark's load rows do. For each cap it runs one wave (a request per client, all arriving
together) and one steady-state run (``--requests`` per client, back to back), and prints:

- what the clients measured: output tokens/s over the run, TTFT and ITL p50/p99;
- the engine's steps: how many ran a prompt chunk beside decode rows ("mixed") and how many
  were decode-only, the mean time between consecutive step ends of each kind (what a mixed
  step costs the decoding streams), the mean tokens of a mixed step, the host time to queue
  it and its device time (CUDA events around the flattened pass), and how many steps were
  queued ahead on device-side ids (lookahead);
- ``--profile-mixed N``: a host profile (cProfile, by own time) of the first N mixed steps'
  launches after the warm-up, at the end.

Usage (GPU machine; the ``llm`` suite's random-weight checkpoint, written if absent)::

    python tools/engine_mix_rounds.py [--shape llama-3.1-8b] [--clients 64] [--prompt 128]
        [--new 128] [--requests 8] [--variants 256,old,0,128] [--json OUT]

A variant is a prefill cap (``0``: no cap, prompts take what the decode rows leave of
``--max-batched-tokens``), optionally with a hold (``256h3``: waiting prompts that do not fill
the cap wait up to 3 steps while requests decode; the planner's ``prefill_hold``), a step
budget (``0b8192``: ``--max-batched-tokens`` 8192 for that variant) and ``e`` (``128e``: steps
with prompt chunks run the flattened pass eagerly, not the bucketed mixed graphs), or ``old``:
no cap, no mixed graphs, and no step queued ahead while requests wait for admission (the
engine before stall-free prefill: waiting prompts were always planned from the host).

The steps' report counts the mixed graph steps too (``mixed_replays``: replayed,
``mixed_eager``: run eagerly, a shape's first step).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_probe import round_arguments


def _summary(values: list[float]) -> str:
    if not values:
        return "-"
    p50, p99 = (float(np.percentile(values, q)) * 1e3 for q in (50, 99))
    return f"p50 {p50:.2f} p99 {p99:.2f} ms (n={len(values)})"


def _steps(rows: list[Any]) -> dict[str, Any]:
    """Step kinds, their mean periods (end to end of consecutive steps) and launch times."""
    mixed: list[float] = []
    decode: list[float] = []
    tokens: list[int] = []
    launch: list[float] = []
    for before, step in itertools.pairwise(rows):
        period = step.end - before.end
        if step.decode_only:
            decode.append(period)
        else:
            mixed.append(period)
            tokens.append(step.batch_tokens)
            launch.append(step.launch_s)

    def mean_ms(values: list[float]) -> float:
        return round(float(np.mean(values)) * 1e3, 2) if values else float("nan")

    return {
        "steps": len(rows),
        "mixed": len(mixed),
        "decode": len(decode),
        "mixed_period_ms": mean_ms(mixed),
        "decode_period_ms": mean_ms(decode),
        "mixed_tokens_mean": round(float(np.mean(tokens)), 1) if tokens else float("nan"),
        "mixed_launch_ms": mean_ms(launch),
        "tokens_per_step": round(float(np.mean([r.tokens for r in rows])), 1) if rows else 0.0,
    }


class MixedSteps:
    """Device time (CUDA events) of flattened passes and bucketed mixed steps.

    A bucketed mixed step is a graph replay, or a shape's first eager run. A host profile of
    the first few flattened passes, on request.
    """

    def __init__(self, engine: Any, profile: int) -> None:
        import cProfile

        import pygpukit as gp

        self.device_ms: list[float] = []
        self.profile_left = 0
        self.profiler = cProfile.Profile()
        self._profile = profile
        self._open: list[tuple[Any, Any]] = []
        inner = engine.runner.logits

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = gp.Event(timing=True).record()
            if self.profile_left > 0:
                self.profile_left -= 1
                out = self.profiler.runcall(inner, *args, **kwargs)
            else:
                out = inner(*args, **kwargs)
            self._open.append((start, gp.Event(timing=True).record()))
            return out

        engine.runner.logits = timed
        self.graph_open: list[tuple[int, Any, Any]] = []  # (row bucket, start, end)
        bucketed = engine.decode.logits

        def timed_bucketed(chunks: Any, **kwargs: Any) -> Any:
            if all(c.count == 1 for c in chunks):
                return bucketed(chunks, **kwargs)
            rows = engine.decode.shape_key(chunks)[0]
            start = gp.Event(timing=True).record()
            out = bucketed(chunks, **kwargs)
            self.graph_open.append((rows, start, gp.Event(timing=True).record()))
            return out

        engine.decode.logits = timed_bucketed

    def start_profile(self) -> None:
        """Profile the next ``profile`` flattened passes."""
        self.profile_left = self._profile

    def take(self) -> list[float]:
        """Device ms of the passes since the last take (their events are done by now)."""
        done = [a.elapsed_time(b) for a, b in self._open if b.query()]
        self._open = []
        return done

    def take_bucketed(self) -> dict[int, list[float]]:
        """Device ms of the bucketed mixed steps since the last take, by row bucket."""
        done: dict[int, list[float]] = {}
        for rows, a, b in self.graph_open:
            if b.query():
                done.setdefault(rows, []).append(a.elapsed_time(b))
        self.graph_open = []
        return done


def _load(url: str, a: argparse.Namespace, vocab: int, per_client: int, seed: int) -> Any:
    from pygpukit.llm.serve.loadgen import LoadResult

    cmd = [sys.executable, "-m", "pygpukit.llm.serve.loadgen", url, "m",
           "--clients", str(a.clients), "--requests-per-client", str(per_client),
           "--prompt-tokens", str(a.prompt), "--output-tokens", str(a.new),
           "--vocab", str(vocab), "--seed", str(seed), "--json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"the load generator failed: {proc.stderr[-3000:]}")
    return LoadResult.from_json(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    """Serve, run a wave and a steady run per prefill cap, print what they showed."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    round_arguments(p)
    p.add_argument("--requests", type=int, default=8, help="requests per client, steady run")
    p.add_argument("--max-batched-tokens", type=int, default=2048)
    p.add_argument("--variants", default="256,old",
                   help="prefill caps (0: none) or old, run in this order")  # fmt: skip
    p.add_argument("--no-wave", action="store_true", help="steady runs only")
    p.add_argument("--profile-mixed", type=int, default=0, metavar="N",
                   help="host profile of the first N mixed steps after the warm-up")  # fmt: skip
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
                  "--max-batch", str(max(a.clients, 1)), "--max-batched-tokens",
                  str(a.max_batched_tokens), "--port", "0"]  # fmt: skip
    parser = argparse.ArgumentParser()
    serve_arguments(parser)
    args = resolve_options(parser.parse_args(serve_argv))
    engines, _ = build_engines(args, sys.stderr)
    engine = engines["m"]
    _warm_up(engines)
    apply_switch_interval(_switch_interval(args))
    rows: list[Any] = []
    engine.step_observer = rows.append
    mixed = MixedSteps(engine, a.profile_mixed)
    server = uvicorn.Server(uvicorn.Config(create_app(engines), host="127.0.0.1", port=0,
                                           log_level="warning"))  # fmt: skip
    thread = threading.Thread(target=server.run, daemon=True, name="event-loop")
    thread.start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    vocab = int(SHAPES[a.shape]["vocab_size"])
    print(f"server up in {time.perf_counter() - t0:.1f} s; capturing the decode graphs",
          flush=True)  # fmt: skip
    _load(url, a, vocab, 1, seed=0)  # one wave: every batch bucket's graph is captured
    mixed.take()
    mixed.take_bucketed()
    mixed.start_profile()
    report: dict[str, Any] = {}
    seed = 1
    queue_ahead = engine._queue_ahead

    def old_queue_ahead(current: Any) -> Any:
        waiting = engine.planner.waiting or engine._incoming
        if waiting or not engine.decode.accepts(current.plan.chunks):
            return None
        return queue_ahead(current)

    budget = engine.planner.max_batched_tokens
    for chunk in a.variants.split(","):
        parsed = re.fullmatch(r"(old|\d+)(?:h(\d+))?(?:b(\d+))?(e?)", chunk)
        if parsed is None:
            raise SystemExit(f"bad variant {chunk!r}: CAP[hHOLD][bBUDGET][e] or old")
        cap, hold, tokens, eager = parsed.groups()
        engine.planner.prefill_chunk = None if cap in ("0", "old") else int(cap)
        engine.planner.prefill_hold = int(hold or 0)
        engine.planner.max_batched_tokens = int(tokens or budget)
        engine.decode.mixed = not eager and chunk != "old"
        engine._queue_ahead = old_queue_ahead if chunk == "old" else queue_ahead
        runs = [("steady", a.requests)] if a.no_wave else [("wave", 1), ("steady", a.requests)]
        for kind, per_client in runs:
            rows.clear()
            ahead = engine.lookahead_steps
            replays, eager_mixed = engine.decode.mixed_replays, engine.decode.mixed_eager_steps
            result = _load(url, a, vocab, per_client, seed)
            device = mixed.take()
            graph_device = mixed.take_bucketed()
            seed += 1
            out = {
                "tok_s": round(result.output_tokens_per_s, 1),
                "wall_ms": round(result.wall_s * 1e3, 1),
                "ttft": _summary(list(result.ttft_s)),
                "itl": _summary(list(result.itl_s)),
                **_steps(list(rows)),
                "mixed_device_ms": round(float(np.mean(device)), 2) if device else "-",
                # row bucket: "mean ms (steps)"
                "mixed_graph_device_ms": {
                    rows: f"{float(np.mean(ms)):.2f} ({len(ms)})"
                    for rows, ms in sorted(graph_device.items())
                },
                "lookahead_steps": engine.lookahead_steps - ahead,
                "mixed_replays": engine.decode.mixed_replays - replays,
                "mixed_eager": engine.decode.mixed_eager_steps - eager_mixed,
            }
            report[f"chunk={chunk} {kind}"] = out
            print(f"--- chunk={chunk} {kind} ({per_client} per client)", flush=True)
            print(json.dumps(out), flush=True)
    if a.profile_mixed:
        import pstats

        print(f"--- host profile of {a.profile_mixed} mixed steps' launches", flush=True)
        pstats.Stats(mixed.profiler, stream=sys.stdout).sort_stats("tottime").print_stats(30)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    server.should_exit = True
    thread.join(60)
    engine.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
