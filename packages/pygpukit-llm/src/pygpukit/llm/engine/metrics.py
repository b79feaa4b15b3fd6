"""The engine's counters, gauges and latency histograms, and their Prometheus text form."""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["EngineMetrics", "Histogram", "render_prometheus"]

#: Bucket bounds (seconds) of time to first token and of inter-token latency.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


@dataclass
class Histogram:
    """A cumulative histogram over fixed upper bounds, as Prometheus exposes it."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    n: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        """Add one observation."""
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str) -> list[str]:
        """The ``_bucket``/``_sum``/``_count`` sample lines."""
        out, running = [], 0
        sep = "," if labels else ""
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else repr(bound)
            out.append(f'{name}_bucket{{{labels}{sep}le="{le}"}} {running}')
        out.append(f"{name}_sum{{{labels}}} {self.total!r}")
        out.append(f"{name}_count{{{labels}}} {self.n}")
        return out


class EngineMetrics:
    """Everything ``/metrics`` reports for one model; updated by the engine thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.started = time.time()
        self.requests: dict[str, int] = {}  # finish reason (or "rejected") -> count
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.prefix_queried_blocks = 0
        self.prefix_hit_blocks = 0
        self.preemptions = 0
        self.steps = 0
        self.queue_length = 0
        self.running = 0
        self.batch_tokens = 0
        self.kv_blocks_used = 0
        self.kv_blocks_cached = 0
        self.kv_blocks_total = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self._recent: list[tuple[float, int]] = []  # (time, tokens) of recent steps

    def count_request(self, outcome: str) -> None:
        """One more request that ended as ``outcome``."""
        with self.lock:
            self.requests[outcome] = self.requests.get(outcome, 0) + 1

    def record_step(self, tokens: int, now: float) -> None:
        """A step that generated ``tokens`` tokens finished at ``now``."""
        with self.lock:
            self.steps += 1
            self.generation_tokens += tokens
            self._recent.append((now, tokens))
            cut = bisect.bisect_left(self._recent, (now - 10.0, -1))
            del self._recent[:cut]

    def tokens_per_second(self, now: float | None = None) -> float:
        """Generated tokens per second over the last 10 seconds."""
        now = time.perf_counter() if now is None else now
        with self.lock:
            recent = [n for t, n in self._recent if t >= now - 10.0]
        return sum(recent) / 10.0


#: Series that are one attribute of EngineMetrics: name -> (kind, help, attribute).
_SIMPLE: dict[str, tuple[str, str, str]] = {
    "prompt_tokens_total": ("counter", "Prompt tokens of admitted requests", "prompt_tokens"),
    "generation_tokens_total": ("counter", "Tokens generated", "generation_tokens"),
    "prefix_cache_queries_total": (
        "counter", "Prompt KV blocks looked up in the prefix cache", "prefix_queried_blocks"),
    "prefix_cache_hits_total": (
        "counter", "Prompt KV blocks found in the prefix cache", "prefix_hit_blocks"),
    "preemptions_total": (
        "counter", "Requests preempted for KV memory (recomputed later)", "preemptions"),
    "steps_total": ("counter", "Engine steps run", "steps"),
    "queue_length": ("gauge", "Requests waiting for admission", "queue_length"),
    "running_requests": ("gauge", "Requests in the running batch", "running"),
    "batch_tokens": ("gauge", "Tokens in the last step's batch", "batch_tokens"),
    "kv_blocks_used": ("gauge", "KV blocks held by requests", "kv_blocks_used"),
    "kv_blocks_cached": (
        "gauge", "KV blocks holding a reusable prefix, unheld", "kv_blocks_cached"),
    "kv_blocks_total": ("gauge", "KV blocks of the paged cache", "kv_blocks_total"),
}  # fmt: skip


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_prometheus(models: Sequence[tuple[str, EngineMetrics]]) -> str:
    """The Prometheus text exposition of every model's metrics (label ``model``)."""
    prefix = "pygpukit_serve"
    series: dict[str, tuple[str, str, list[str]]] = {}

    def add(name: str, kind: str, help_text: str, line: str) -> None:
        entry = series.setdefault(name, (kind, help_text, []))
        entry[2].append(line)

    for model, m in models:
        lab = f'model="{_escape(model)}"'
        with m.lock:
            for outcome, count in sorted(m.requests.items()):
                add("requests_total", "counter", "Requests ended, by outcome",
                    f'{prefix}_requests_total{{{lab},outcome="{outcome}"}} {count}')  # fmt: skip
            values = {name: getattr(m, attr) for name, (_, _, attr) in _SIMPLE.items()}
            for name, (kind, help_text, _) in _SIMPLE.items():
                add(name, kind, help_text, f"{prefix}_{name}{{{lab}}} {values[name]}")
            ttft, itl = (
                m.ttft.lines(f"{prefix}_time_to_first_token_seconds", lab),
                m.itl.lines(f"{prefix}_inter_token_latency_seconds", lab),
            )
        tps = m.tokens_per_second()
        add("generation_tokens_per_second", "gauge", "Tokens generated per second (last 10 s)",
            f"{prefix}_generation_tokens_per_second{{{lab}}} {tps!r}")  # fmt: skip
        for line in ttft:
            add("time_to_first_token_seconds", "histogram", "Time to first token", line)
        for line in itl:
            add("inter_token_latency_seconds", "histogram", "Time between tokens", line)
    out: list[str] = []
    for name, (kind, help_text, lines) in series.items():
        out.append(f"# HELP {prefix}_{name} {help_text}")
        out.append(f"# TYPE {prefix}_{name} {kind}")
        out.extend(lines)
    return "\n".join(out) + "\n"
