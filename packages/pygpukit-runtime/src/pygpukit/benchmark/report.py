"""Rendering a run: the terminal table, the Markdown table, the progress line and the plot.

Columns: the case; PyGPUkit's median time, its derived rate (GB/s or TFLOP/s)
and that rate as a percentage of the card's ceiling (``SoL``); for each peer its
median time and ``x<peer>``, the peer's time over PyGPUkit's (above 1.00x
PyGPUkit is faster); with ``--compare``, ``vs base``: the change of PyGPUkit's
median time against the baseline (positive is slower; ``!`` marks a regression);
and a note saying why a measurement was skipped or failed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from .compare import Comparison
from .peers import PEER_NAMES
from .results import Ceiling, LibResult, Row, RunResult
from .units import format_rate, format_time

__all__ = ["format_markdown", "format_table", "progress_line", "write_plot"]

NOTE_WIDTH = 70


def _peers(run: RunResult) -> list[str]:
    present = {name for row in run.rows for name in row.libs}
    return [name for name in PEER_NAMES if name in present]


def _case_label(row: Row) -> str:
    params = " ".join(f"{k}={v}" for k, v in row.params.items())
    return f"{row.op} {params}".strip()


def _cell(result: LibResult | None) -> str:
    if result is None:
        return "-"
    if result.status == "ok":
        return format_time(result.median_ms)
    return "skip" if result.status == "skipped" else "FAILED"


def _first_line(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= NOTE_WIDTH else line[: NOTE_WIDTH - 3] + "..."


def _note(row: Row) -> str:
    mine = row.libs.get("pygpukit")
    failed = [
        f"{name}: {_first_line(r.reason)}" for name, r in row.libs.items() if r.status == "failed"
    ]
    if failed:
        return "; ".join(failed)
    if mine is not None and mine.status == "skipped":
        return _first_line(mine.reason)
    return ""


def _cells(
    row: Row, run: RunResult, peers: Sequence[str], comparison: Comparison | None
) -> list[str]:
    cells = [
        _case_label(row),
        _cell(row.libs.get("pygpukit")),
        format_rate(row.rate("pygpukit"), row.unit),
    ]
    pct = row.pct_of_ceiling("pygpukit", run.ceilings)
    cells.append(f"{pct:.0f}%" if pct is not None else "-")
    for peer in peers:
        cells.append(_cell(row.libs.get(peer)))
        ratio = row.speedup("pygpukit", peer)
        cells.append(f"{ratio:.2f}x" if ratio is not None else "-")
    if comparison is not None:
        change = comparison.by_key().get(row.key)
        cells.append(
            "-"
            if change is None
            else f"{change.change_pct:+.1f}%{' !' if change.regressed else ''}"
        )
    note = _note(row)
    if row.exceeds_ceiling("pygpukit", run.ceilings):
        note = "; ".join(filter(None, [note, f"above {row.ceiling}: SoL capped at 100%"]))
    cells.append(note)
    return cells


def _headers(peers: Sequence[str], comparison: Comparison | None) -> list[str]:
    headers = ["case", "PyGPUkit", "rate", "SoL"]
    for peer in peers:
        headers += [peer, f"x{peer}"]
    if comparison is not None:
        headers.append("vs base")
    headers.append("note")
    return headers


def _environment_lines(run: RunResult) -> list[str]:
    env = run.environment
    device = env.get("device") or {}
    versions = env.get("versions") or {}
    git = env.get("git") or {}
    gpu = device.get("name") or "unknown device"
    sm = f" (SM {device['sm']})" if device.get("sm") else ""
    driver = f", driver {env['driver']}" if env.get("driver") else ""
    if device.get("cuda_version"):
        driver += f", CUDA {device['cuda_version']}"
    libs = ", ".join(f"{k} {v}" for k, v in versions.items() if v)
    commit = "unknown"
    if git:
        commit = git.get("commit", "")[:12] + ("+dirty" if git.get("dirty") else "")
    return [
        f"backend {env.get('backend', '?')}: {gpu}{sm}{driver}",
        f"{libs}; commit {commit}; {env.get('timestamp', '')}",
    ]


def _ceiling_text(c: Ceiling) -> str:
    if c.value is None:
        return f"{c.name}: n/a ({c.reason})"
    return f"{c.name}: {format_rate(c.value, c.unit)} ({c.measured_with}; {c.how})"


def _skip_summary(run: RunResult) -> list[str]:
    counts: Counter[tuple[str, str]] = Counter()
    for row in run.rows:
        for name, result in row.libs.items():
            if result.status == "skipped":
                counts[(name, _first_line(result.reason))] += 1
    return [
        f"{name}: {reason} ({n} row{'s' if n > 1 else ''})"
        for (name, reason), n in sorted(counts.items())
    ]


def _legend(peers: Sequence[str]) -> str:
    if not peers:
        return "SoL: rate as a percentage of the ceiling measured in this run."
    return (
        "SoL: rate as a percentage of the ceiling measured in this run; "
        "x<peer>: peer time / PyGPUkit time (above 1.00x PyGPUkit is faster)."
    )


def format_table(run: RunResult, comparison: Comparison | None = None) -> str:
    """The terminal report: environment, ceilings, one aligned table per suite, skips."""
    peers = _peers(run)
    headers = _headers(peers, comparison)
    lines = _environment_lines(run)
    lines += ["ceilings:" if run.ceilings else "ceilings: none needed"]
    lines += [f"  {_ceiling_text(c)}" for c in run.ceilings.values()]
    for suite in dict.fromkeys(row.suite for row in run.rows):
        rows = [r for r in run.rows if r.suite == suite]
        table = [headers] + [_cells(r, run, peers, comparison) for r in rows]
        widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
        lines += ["", f"== {suite} =="]
        for i, cells in enumerate(table):
            text = "  ".join(
                c.ljust(w) if j in (0, len(cells) - 1) else c.rjust(w)
                for j, (c, w) in enumerate(zip(cells, widths, strict=True))
            )
            lines.append(text.rstrip())
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
    lines += ["", _legend(peers)]
    skips = _skip_summary(run)
    if skips:
        lines += ["skipped:"] + [f"  {s}" for s in skips]
    return "\n".join(lines)


def _metric_lines(rows: Sequence[Row]) -> list[str]:
    """Bullets of the extra numbers cases reported (``Timed.metrics``), if any."""
    lines: list[str] = []
    for row in rows:
        for name, result in row.libs.items():
            if result.status == "ok" and result.metrics:
                values = ", ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in result.metrics.items()
                )
                lines.append(f"- `{_case_label(row)}` ({name}): {values}")
    return ["", *lines] if lines else []


def format_markdown(run: RunResult, comparison: Comparison | None = None) -> str:
    """The same report as GitHub Markdown (what ``docs/benchmarks.md`` carries)."""
    peers = _peers(run)
    headers = _headers(peers, comparison)
    lines = [f"- {line}" for line in _environment_lines(run)]
    command = run.options.get("command")
    if command:
        lines.append(f"- command: `{command}`")
    lines += [f"- ceiling {_ceiling_text(c)}" for c in run.ceilings.values()]
    for suite in dict.fromkeys(row.suite for row in run.rows):
        lines += [
            "",
            f"### {suite}",
            "",
            "| " + " | ".join(headers) + " |",
            "|"
            + "|".join("---" if i in (0, len(headers) - 1) else "---:" for i in range(len(headers)))
            + "|",
        ]
        for row in run.rows:
            if row.suite == suite:
                cells = [c.replace("|", "\\|") for c in _cells(row, run, peers, comparison)]
                lines.append("| " + " | ".join(cells) + " |")
        lines += _metric_lines([row for row in run.rows if row.suite == suite])
    lines += ["", _legend(peers)]
    skips = _skip_summary(run)
    if skips:
        lines += ["", "Skipped:", ""] + [f"- {s}" for s in skips]
    return "\n".join(lines) + "\n"


def progress_line(index: int, row: Row, elapsed_s: float) -> str:
    """One line per measured row, written while the run goes on."""
    parts = []
    for name, result in row.libs.items():
        if result.status == "ok":
            rate = row.rate(name)
            parts.append(
                f"{name} {format_time(result.median_ms)}"
                + (f" {format_rate(rate, row.unit)}" if rate is not None else "")
            )
        else:
            parts.append(f"{name} {result.status}")
    return f"[{index:3d} {elapsed_s:6.1f}s] {row.key}: " + " | ".join(parts)


def write_plot(run: RunResult, path: str) -> None:
    """A PNG of PyGPUkit's speed relative to each peer per row (needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peers = _peers(run)
    rows = [r for r in run.rows if any(r.speedup("pygpukit", p) for p in peers)]
    fig, ax = plt.subplots(figsize=(10, 1.5 + 0.3 * max(1, len(rows))))
    height = 0.8 / max(1, len(peers))
    for j, peer in enumerate(peers):
        values: list[Any] = [r.speedup("pygpukit", peer) or float("nan") for r in rows]
        ax.barh([i + j * height for i in range(len(rows))], values, height=height, label=peer)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))])
    ax.set_yticklabels([f"{r.suite}: {_case_label(r)}" for r in rows], fontsize=7)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("peer time / PyGPUkit time (right of 1: PyGPUkit faster)")
    ax.set_title(_environment_lines(run)[0])
    if peers:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
