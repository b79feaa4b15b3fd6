"""``python -m pygpukit.benchmark``: options, the run loop, output and exit status.

Exit status: 0 when every measurement that ran was correct (and, with
``--fail-on-regression``, none regressed); 1 when a result was wrong or a
measurement crashed; 2 for a usage error (bad option, unknown suite, missing
matplotlib for ``--plot``); 3 when the regression gate tripped; 130 when the run
was interrupted (Ctrl-C: the rows measured so far are still reported and saved).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import secrets
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .case import Skip
from .ceilings import Ceilings
from .compare import Comparison, compare_runs
from .data import DataCache, parse_dtype
from .environment import capture, l2_bytes
from .footprint import check_sizes_fit
from .harness import HarnessConfig, run_case
from .peers import PEER_NAMES, Library, PyGPUkitLibrary, discover_peers
from .registry import Suite, SuiteContext, load_errors, registered_suites
from .report import format_markdown, format_table, progress_line, write_plot
from .results import Ceiling, LibResult, Row, RunResult, load_json
from .units import format_rate, parse_size

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

#: Suite shortcuts users know from the original project's CLI: ``--NAME`` selects the suite.
SHORTCUTS = {"gemm": "gemm", "gemv": "ops_linear", "attention": "ops_attention"}

#: Where suites that are not part of the runtime come from.
PROVIDERS = {
    "ops_linear": "pygpukit-ops",
    "ops_norm": "pygpukit-ops",
    "ops_attention": "pygpukit-ops",
    "ops_sampling": "pygpukit-ops",
    "llm": "pygpukit-llm",
}

EXAMPLES = """\
examples:
  python -m pygpukit.benchmark --quick
  python -m pygpukit.benchmark --save baseline.json
  python -m pygpukit.benchmark --compare baseline.json --fail-on-regression 10
  python -m pygpukit.benchmark --gemm --sizes 4096,8192 --dtypes bf16,fp32
  python -m pygpukit.benchmark --gemv --dtypes bf16,fp8
  python -m pygpukit.benchmark --attention --seq-lens 512,1024
  python -m pygpukit.benchmark --attention --filter 'decode.B=8,.*kernel=tma2'
  python -m pygpukit.benchmark --load run.json --markdown
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the benchmark CLI."""
    p = argparse.ArgumentParser(
        prog="python -m pygpukit.benchmark",
        description="PyGPUkit benchmarks: every hot path against PyTorch and CuPy on the same "
        "GPU, with speed-of-light ceilings, JSON history and a regression gate.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sel = p.add_argument_group("what to run")
    sel.add_argument(
        "--suite",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help="suites to run (default: all registered); see --list",
    )
    for name, suite in SHORTCUTS.items():
        sel.add_argument(f"--{name}", action="store_true", help=f"same as --suite {suite}")
    sel.add_argument(
        "--all", action="store_true", help="every registered suite (the default; overrides --suite)"
    )
    sel.add_argument("--list", action="store_true", help="list the registered suites and exit")
    sel.add_argument(
        "--quick",
        action="store_true",
        help="smoke mode: small sizes, few repetitions (tiny sizes on the CPU backend)",
    )
    sel.add_argument(
        "--sizes",
        metavar="LIST",
        help="sizes for the selected suites: elements, bytes (memory) or n (gemm); "
        "K/M/G suffixes are binary, e.g. 1M,64M",
    )
    sel.add_argument("--dtypes", metavar="LIST", help="dtypes, e.g. fp32,tf32,fp16,bf16,fp8")
    sel.add_argument("--seq-lens", metavar="LIST", help="sequence lengths for attention suites")
    sel.add_argument(
        "--filter",
        metavar="REGEX",
        help="run only the rows whose key (as printed, e.g. "
        "'ops_attention/decode[B=8,...,kernel=tma2]') matches REGEX (re.search)",
    )
    sel.add_argument(
        "--peers",
        default=",".join(PEER_NAMES),
        metavar="LIST",
        help="peers to compare with: torch,cupy (default) or none",
    )
    sel.add_argument(
        "--iterations",
        type=int,
        metavar="N",
        help="most timed repetitions per measurement (default 30; 10 with --quick)",
    )
    sel.add_argument("--seed", type=int, help="seed of the random inputs (default: fresh)")

    out = p.add_argument_group("results")
    out.add_argument("--save", metavar="FILE.json", help="write the results as JSON")
    out.add_argument(
        "--load",
        metavar="FILE.json",
        help="report a saved run instead of measuring (with --compare: offline gate)",
    )
    out.add_argument(
        "--compare", metavar="BASELINE.json", help="show each row's change against a saved run"
    )
    out.add_argument(
        "--threshold",
        type=float,
        default=10.0,
        metavar="PCT",
        help="regression threshold in percent for --fail-on-regression (default 10)",
    )
    out.add_argument(
        "--fail-on-regression",
        nargs="?",
        type=float,
        const=-1.0,
        default=None,
        metavar="PCT",
        help="exit 3 when a row is more than PCT%% slower than the "
        "baseline (PCT defaults to --threshold)",
    )
    out.add_argument("--markdown", action="store_true", help="print the report as Markdown")
    out.add_argument("--plot", metavar="FILE.png", help="bar chart of the ratios (matplotlib)")
    out.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


@dataclass
class Options:
    """The parsed and validated options of one invocation."""

    suites: list[str] | None
    sizes: list[int] | None
    dtypes: list[str] | None
    seq_lens: list[int] | None
    peers: tuple[str, ...]
    gate_pct: float | None
    #: Only the rows whose key this matches run (None: every row).
    row_filter: re.Pattern[str] | None = None


def resolve(args: argparse.Namespace) -> Options:
    """Validate the raw arguments; ``ValueError`` with a message for the user."""
    suites = [s for arg in args.suite for s in _split(arg)]
    suites += [suite for name, suite in SHORTCUTS.items() if getattr(args, name)]
    sizes = [parse_size(s) for s in _split(args.sizes)] or None
    dtypes = [parse_dtype(d) for d in _split(args.dtypes)] or None
    seq_lens = [parse_size(s) for s in _split(args.seq_lens)] or None
    peers = tuple(_split(args.peers))
    if peers == ("none",):
        peers = ()
    unknown = [p for p in peers if p not in PEER_NAMES]
    if unknown:
        raise ValueError(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEER_NAMES)}")
    gate = args.fail_on_regression
    if gate is not None and gate < 0:
        gate = args.threshold
    if gate is not None and not args.compare:
        raise ValueError("--fail-on-regression needs --compare BASELINE.json")
    if args.iterations is not None and args.iterations < 1:
        raise ValueError("--iterations must be at least 1")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        raise ValueError("--plot needs matplotlib (pip install matplotlib)")
    row_filter = None
    if args.filter:
        try:
            row_filter = re.compile(args.filter)
        except re.error as exc:
            raise ValueError(
                f"--filter {args.filter!r} is not a regular expression: {exc}"
            ) from None
    selected = None if args.all else list(dict.fromkeys(suites)) or None
    return Options(selected, sizes, dtypes, seq_lens, peers, gate, row_filter)


def _select(names: list[str] | None) -> list[Suite]:
    suites = registered_suites()
    if names is None:
        return list(suites.values())
    missing = [n for n in names if n not in suites]
    if missing:
        lines = []
        for name in missing:
            provider = PROVIDERS.get(name)
            hint = f" (it comes with {provider} when installed)" if provider else ""
            lines.append(f"benchmark suite {name!r} is not registered{hint}")
        lines.append(f"registered suites: {', '.join(suites)}")
        raise ValueError("\n".join(lines))
    return [suites[n] for n in names]


def harness_config(quick: bool, iterations: int | None, l2: int) -> HarnessConfig:
    """Timing policy for a normal or a ``--quick`` run."""
    if quick:
        cfg = HarnessConfig(
            max_reps=10, min_reps=3, budget_s=0.1, warmup_s=0.02, target_rep_ms=0.5, l2_bytes=l2
        )
    else:
        cfg = HarnessConfig(l2_bytes=l2)
    if iterations is not None:
        cfg.max_reps = iterations
        cfg.min_reps = min(cfg.min_reps, iterations)
    return cfg


def _error_row(suite: Suite, libs: Sequence[Library], result: LibResult) -> Row:
    row = Row(key=f"{suite.name}/*", suite=suite.name, op="*", params={}, timing="device")
    row.libs = {lib.name: result for lib in libs}
    return row


def measure_run(
    args: argparse.Namespace, opts: Options, suites: list[Suite], log: Callable[[str], None]
) -> RunResult:
    """Run every case of ``suites`` and collect the results."""
    started = time.perf_counter()
    gp = PyGPUkitLibrary()
    if gp.backend == "cpu":
        peers: list[Library] = []
        missing = dict.fromkeys(opts.peers, "peers run on the CUDA backend only")
    else:
        peers, missing = discover_peers(opts.peers)
    libs: list[Library] = [gp, *peers]
    environment = capture(gp, peers, missing)
    seed = args.seed if args.seed is not None else secrets.randbits(63)
    rng = np.random.default_rng(seed)
    ctx = SuiteContext(
        gp.backend,
        args.quick,
        DataCache(rng),
        rng,
        opts.sizes,
        opts.dtypes,
        opts.seq_lens,
        dict(environment.get("device") or {}),
    )
    check_sizes_fit(ctx, suites)  # before anything runs
    cfg = harness_config(args.quick, args.iterations, l2_bytes(environment))

    def announce(c: Ceiling) -> None:
        value = format_rate(c.value, c.unit) if c.value is not None else f"n/a ({c.reason})"
        log(f"ceiling {c.name}: {value}" + (f" with {c.measured_with}" if c.measured_with else ""))

    ceilings = Ceilings(ctx, libs, cfg, announce)
    for name, reason in missing.items():
        log(f"peer {name}: {reason}")
    rows: list[Row] = []
    peer_cache: dict[tuple[str, str], LibResult] = {}
    interrupted = False
    for suite in suites:
        try:
            for case in suite.cases(ctx):
                if opts.row_filter is not None and not opts.row_filter.search(case.key):
                    continue
                if not case.skip:
                    ceilings.ensure(case.ceiling)
                row = run_case(case, libs, cfg, peer_cache)
                if not case.skip:
                    ceilings.fit(case, row)
                rows.append(row)
                log(progress_line(len(rows), row, time.perf_counter() - started))
        except Skip as exc:
            rows.append(_error_row(suite, libs, LibResult("skipped", str(exc))))
        except KeyboardInterrupt:
            log("interrupted: reporting the rows measured so far")
            interrupted = True
        except Exception as exc:
            rows.append(_error_row(suite, libs, LibResult("failed", f"suite crashed: {exc!r}")))
            log(f"suite {suite.name} crashed: {exc!r}")
        ctx.data.clear()
        if interrupted:
            break
    options = {
        "command": shlex.join(["python", "-m", "pygpukit.benchmark", *(args.argv or [])]),
        "quick": args.quick,
        "suites": [s.name for s in suites],
        "sizes": opts.sizes,
        "dtypes": opts.dtypes,
        "seq_lens": opts.seq_lens,
        "filter": opts.row_filter.pattern if opts.row_filter is not None else None,
        "seed": seed,
        "duration_s": round(time.perf_counter() - started, 1),
        "interrupted": interrupted,
    }
    return RunResult(environment, dict(ceilings.values), rows, options)


def _warn_if_other_device(
    baseline: dict[str, Any], run: RunResult, log: Callable[[str], None]
) -> None:
    """Say so when the baseline ran on another device or backend: its times do not transfer."""

    def where(env: dict[str, Any]) -> tuple[Any, Any]:
        return env.get("backend"), (env.get("device") or {}).get("name")

    theirs, ours = where(baseline.get("environment") or {}), where(run.environment)
    if theirs != ours:
        log(
            f"warning: the baseline ran on {theirs[1]} ({theirs[0]}), this run on "
            f"{ours[1]} ({ours[0]}); compare runs of one machine"
        )


def _report_outcome(run: RunResult, comparison: Comparison | None, gate: float | None) -> int:
    status = EXIT_OK
    for row, lib in run.failures:
        reason = row.libs[lib].reason.strip()
        print(f"FAILED {row.key} [{lib}]: {reason}", file=sys.stderr)
        status = EXIT_FAILED
    if comparison is not None:
        for key in comparison.only_in_baseline:
            print(f"note: {key} is in the baseline but was not measured now", file=sys.stderr)
        if gate is not None:
            for change in comparison.regressions:
                print(
                    f"REGRESSION {change.key}: {change.baseline_ms:.4g} ms -> "
                    f"{change.current_ms:.4g} ms ({change.change_pct:+.1f}%, limit "
                    f"{gate:+.1f}%)",
                    file=sys.stderr,
                )
            if comparison.regressions and status == EXIT_OK:
                status = EXIT_REGRESSION
    if status == EXIT_FAILED:
        print(
            f"benchmark run FAILED: {len(run.failures)} measurement(s) wrong or crashed",
            file=sys.stderr,
        )
    return status


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark CLI with ``argv`` (default: ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = argv
    if args.list:
        for name, suite in registered_suites().items():
            print(f"{name:12s} {suite.description}")
        for name, error in load_errors().items():
            print(f"{name:12s} failed to load: {error}")
        return EXIT_OK
    try:
        opts = resolve(args)
        suites = [] if args.load else _select(opts.suites)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    def log(line: str) -> None:
        if not args.quiet:
            print(line, file=sys.stderr, flush=True)

    for name, error in load_errors().items():
        log(f"warning: benchmark plug-in {name} failed to load: {error}")
    try:
        run = RunResult.load(args.load) if args.load else measure_run(args, opts, suites, log)
        comparison = None
        if args.compare:
            threshold = opts.gate_pct if opts.gate_pct is not None else args.threshold
            baseline = load_json(args.compare)
            comparison = compare_runs(baseline, run.to_dict(), threshold)
            _warn_if_other_device(baseline, run, log)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(format_markdown(run, comparison) if args.markdown else format_table(run, comparison))
    if args.save:
        run.save(args.save)
        log(f"results saved to {args.save}")
    if args.plot:
        write_plot(run, args.plot)
        log(f"plot written to {args.plot}")
    status = _report_outcome(run, comparison, opts.gate_pct)
    if run.options.get("interrupted") and status == EXIT_OK:
        status = EXIT_INTERRUPTED
    return status
