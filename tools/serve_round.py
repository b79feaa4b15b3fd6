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
import itertools
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from serve_probe import (
    StepRow,
    children_cpu,
    load_process,
    load_result,
    round_arguments,
    serve_in_process,
    summary,
    thread_cpu,
)


def _step_report(steps: list[StepRow], clients: int) -> dict[str, Any]:
    if not steps:
        return {}
    rows = [r.times for r in steps]
    t0 = rows[0].start
    full = [t for t in rows if t.decode_only and t.tokens >= clients]
    ramp_end = full[0].start if full else rows[-1].end
    ramp = [t for t in rows if t.start < ramp_end]
    decode = [r for r in steps if r.times.decode_only]
    gaps = [b.start - a.end for a, b in itertools.pairwise(rows)]
    return {
        "steps": len(rows),
        "ramp_ms": round((ramp_end - t0) * 1e3, 1),
        "ramp_steps": f"{len(ramp)} ({sum(not t.decode_only for t in ramp)} with prefill)",
        "ramp_step_ms": [round((t.end - t.start) * 1e3, 1) for t in ramp][:24],
        "decode_ms_total": round(sum(r.times.end - r.times.start for r in decode) * 1e3, 1),
        "decode_step": summary([r.times.end - r.times.start for r in decode]),
        "decode_host": summary([r.times.host_s for r in decode]),
        "decode_host_cpu": summary([r.host_cpu_s for r in decode]),
        "decode_launch": summary([r.times.launch_s for r in decode]),
        "decode_wait": summary([r.times.wait_s for r in decode]),
        "decode_device": summary([r.device_ms / 1e3 for r in decode if r.device_ms is not None]),
        "gap": summary([g for g in gaps if g < 0.05]),
        "last_step_end_ms": round((rows[-1].end - t0) * 1e3, 1),
    }


def _timeline(steps: list[StepRow]) -> list[str]:
    if not steps:
        return []
    t0 = steps[0].times.start
    return [
        f"{(t.start - t0) * 1e3:8.2f} ms {'decode' if t.decode_only else 'mixed '} "
        f"tokens {t.batch_tokens:5d} sampled {t.tokens:3d} step {(t.end - t.start) * 1e3:6.2f} "
        f"launch {t.launch_s * 1e3:5.2f} host {t.host_s * 1e3:6.2f} "
        f"cpu {r.host_cpu_s * 1e3:6.2f} wait {t.wait_s * 1e3:6.2f}"
        for r in steps
        for t in (r.times,)
    ]


def _load(url: str, a: argparse.Namespace, vocab: int, seed: int) -> Any:
    return load_result(load_process(url, "m", clients=a.clients, requests=1, prompt=a.prompt,
                                    new=a.new, vocab=vocab, seed=seed))  # fmt: skip


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
    round_arguments(p)
    p.add_argument("--rounds", type=int, default=2, help="timed rounds per variant")
    p.add_argument("--variant", action="append", default=[],
                   help="si=S, mbt=N or lookahead=0|1 (repeatable; default first)")  # fmt: skip
    p.add_argument("--http", default="auto", help="uvicorn's HTTP implementation")
    p.add_argument("--loop", default="auto", help="uvicorn's event loop")
    p.add_argument("--timeline", action="store_true", help="print the last round's steps")
    p.add_argument("--json", help="also write the numbers here")
    a = p.parse_args(argv)

    from pygpukit.llm.benchmarks import SHAPES, _checkpoint

    serve_argv = [f"m={_checkpoint(a.shape)}", "--max-model-len", str(a.prompt + a.new + 64),
                  "--max-batch", "64", "--max-batched-tokens", "2048"]  # fmt: skip
    served = serve_in_process(serve_argv, http=a.http, loop=a.loop)
    engine, log = served.engines["m"], served.logs["m"]
    default_interval = served.switch_interval
    vocab = int(SHAPES[a.shape]["vocab_size"])
    print(f"server up in {served.started_s:.1f} s (http {a.http}, loop {a.loop}); "
          f"warming up", flush=True)  # fmt: skip
    _load(served.url, a, vocab, seed=0)  # captures the decode graphs of every batch bucket
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
            cpu0, child0 = thread_cpu(), children_cpu()
            result = _load(served.url, a, vocab, seed=next(seeds))
            cpu1, child1 = thread_cpu(), children_cpu()
            steps = log.take()
            tokens = max(1, result.output_tokens)
            cpu = {name: round((cpu1[name] - cpu0.get(name, 0.0)) / tokens * 1e6, 1)
                   for name in cpu1 if cpu1[name] - cpu0.get(name, 0.0) > 0}  # fmt: skip
            out = {
                "tok_s": round(result.output_tokens_per_s, 1),
                "wall_ms": round(result.wall_s * 1e3, 1),
                "ttft": summary(list(result.ttft_s)),
                "itl": summary(list(result.itl_s)),
                "cpu_us_per_token": cpu,
                "loadgen_cpu_us_per_token": round((child1 - child0) / tokens * 1e6, 1),
                "steps": _step_report(steps, a.clients),
            }
            rounds.append(out)
            print(f"--- {variant} round {i + 1}", flush=True)
            print(json.dumps(out, indent=1), flush=True)
            if a.timeline and variant == "default" and i == a.rounds - 1:
                print("\n".join(_timeline(steps)), flush=True)
        report[variant] = rounds
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    served.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
