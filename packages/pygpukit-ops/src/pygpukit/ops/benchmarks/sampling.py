"""ops_sampling: token sampling from logits [B, V] on the device, against PyTorch.

Logits [8, 128256] float32 (a Llama-3 vocabulary, batch 8). Three ops:
``argmax`` (greedy), ``sample`` (temperature 1, no filter) and ``sample_topk_topp``
(temperature 0.8, top-k 50, top-p 0.9). PyTorch's formulation of the same
sampling: ``torch.topk`` then ``softmax``, the cumulative-mass cut and
``torch.multinomial``. Bytes moved are the logits read once (the kernel reads
them several times, from L2); there is no ceiling. Random results are checked
for membership: every drawn token must lie in the set the filters allow
(computed in float64 on the host, with a small margin at the top-p boundary).
``--sizes`` sets V.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from pygpukit.benchmark.case import Case, CorrectnessError, Skip, Timed
from pygpukit.benchmark.checks import check_equal
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

NAME = "ops_sampling"
BATCH = 8
TEMPERATURE, TOP_K, TOP_P = 0.8, 50, 0.9
#: Slack on the top-p mass: float32 softmax sums in either library differ from float64.
P_MARGIN = 1e-4


def allowed(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> list[set[int]]:
    """Per row, the tokens top-k then top-p (with ``P_MARGIN``) may return."""
    out = []
    for row in logits.astype(np.float64) / temperature:
        order = np.argsort(-row, kind="stable")
        if 0 < top_k < row.size:
            order = order[:top_k]
        probs = np.exp(row[order] - row[order[0]])
        cum = np.cumsum(probs / probs.sum())
        cut = int(np.searchsorted(cum, min(top_p + P_MARGIN, 1.0), side="left")) + 1
        out.append({int(t) for t in order[: min(cut, order.size)]})
    return out


def _torch_sample(torch: Any, temperature: float, top_k: int, top_p: float) -> Callable[..., Any]:
    def run(logits: Any) -> Any:
        scaled = logits / temperature
        if top_k <= 0 and top_p >= 1.0:  # no filter: no sort either
            return torch.multinomial(torch.softmax(scaled, dim=-1), 1).squeeze(-1)
        if 0 < top_k < logits.shape[-1]:
            values, index = torch.topk(scaled, top_k, dim=-1)
        else:
            values, index = torch.sort(scaled, dim=-1, descending=True)
        probs = torch.softmax(values, dim=-1)
        if top_p < 1.0:
            cum = probs.cumsum(dim=-1)
            probs = probs.masked_fill(cum - probs >= top_p, 0.0)
        pick = torch.multinomial(probs, 1)
        return index.gather(-1, pick).squeeze(-1)

    return run


def _sampler(lib: Library, op: str) -> Callable[[Any], Any]:
    filters = (TEMPERATURE, TOP_K, TOP_P) if op == "sample_topk_topp" else (1.0, 0, 1.0)
    if lib.name == "pygpukit":
        try:
            from pygpukit import ops
        except ImportError as exc:  # pragma: no cover - the suite ships inside pygpukit-ops
            raise Skip(f"pygpukit.ops is not importable: {exc}") from exc
        if op == "argmax":
            return ops.argmax
        gen = ops.Generator(1234)
        t, k, p = filters
        return lambda x: ops.sample(x, temperature=t, top_k=k, top_p=p, generator=gen)
    if lib.name == "torch":
        torch = lib.module
        if op == "argmax":
            return lambda x: torch.argmax(x, dim=-1)
        return _torch_sample(torch, *filters)
    raise Skip(f"{lib.name}: no sampling formulation here")


def sampling_case(ctx: SuiteContext, op: str, vocab: int) -> Case:
    """``op`` over float32 logits [BATCH, vocab]."""
    params: dict[str, int | float | str] = {"b": BATCH, "v": vocab, "dtype": "float32"}
    nbytes = BATCH * vocab * 4

    def setup(lib: Library, copies: int) -> Timed:
        run_op = _sampler(lib, op)
        hosts = [ctx.data.get((BATCH, vocab), "float32", i) for i in range(copies)]
        arrays = [lib.upload(h, "float32") for h in hosts]
        host = hosts[0]

        def check(out: Any) -> float | None:
            got = lib.download(out).astype(np.int64).reshape(-1)
            if op == "argmax":
                return check_equal(got, np.argmax(host, axis=1).astype(np.int64), op)
            if op == "sample_topk_topp":
                sets = allowed(host, TEMPERATURE, TOP_K, TOP_P)
            else:
                sets = [set(range(vocab))] * BATCH
            bad = [(r, int(t)) for r, t in enumerate(got) if int(t) not in sets[r]]
            if got.shape != (BATCH,) or bad:
                raise CorrectnessError(f"{op} ({lib.name}): tokens outside the allowed set {bad}")
            return None

        return Timed(run=lambda i: run_op(arrays[i % copies]), check=check)

    return Case(
        NAME,
        op,
        params,
        dict.fromkeys(("pygpukit", "torch"), setup),
        bytes_moved=nbytes,
        working_set=nbytes,
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """argmax, plain sampling and top-k/top-p sampling at each vocabulary size."""
    sizes = ctx.pick_sizes(gpu=[128256], gpu_quick=[128256], cpu=[32000], cpu_quick=[4096])
    for vocab in sizes:
        for op in ("argmax", "sample", "sample_topk_topp"):
            yield sampling_case(ctx, op, vocab)


SUITE = Suite(NAME, "token sampling (argmax, top-k/top-p) vs a PyTorch formulation", cases)
