"""The serving engine: continuous batching, a paged KV cache and prefix caching for one model.

::

    from pygpukit import llm
    from pygpukit.llm.engine import Engine, RequestParams

    model = llm.load("SmolLM2-135M-Instruct.Q4_1.gguf", max_seq_len=2048)
    engine = Engine(model, max_batch=32, kv_memory="256MiB")
    print(engine.generate("The capital of France is", RequestParams(max_tokens=8)).text)

Modules, one job each: ``block_manager`` (which KV blocks a request holds, prefix hashes, LRU),
``paged_cache`` (the device arrays), ``params`` and ``request`` (what a request asks for, and
its state in the engine), ``planner`` (what runs each step), ``runner`` (the forward pass over a
flattened batch), ``decode_graphs`` (steps replayed as CUDA graphs), ``invariant`` (the
batch-invariant step), ``sampler`` (per-request sampling and seeds), ``metrics``
(Prometheus text), ``step_times`` (what a step observer is told), ``side_stream`` (a step's
small uploads and downloads beside the compute stream), ``host_priority`` (host turns: a
protected model's host work before the other engines'), ``engine`` (the public API and its
thread). Guide: docs/serve.md.
"""

from __future__ import annotations

from .block_manager import BlockManager, block_hashes
from .engine import Engine, EngineClosedError, QueueFullError
from .metrics import EngineMetrics, render_prometheus
from .paged_cache import BLOCK_SIZE, PagedKVCache
from .params import MAX_LOGPROBS, RequestParams
from .request import RequestOutput, TokenLogprob
from .step_times import StepTimes

__all__ = [
    "BLOCK_SIZE",
    "MAX_LOGPROBS",
    "BlockManager",
    "Engine",
    "EngineClosedError",
    "EngineMetrics",
    "PagedKVCache",
    "QueueFullError",
    "RequestOutput",
    "RequestParams",
    "StepTimes",
    "TokenLogprob",
    "block_hashes",
    "render_prometheus",
]
