"""The ``llm`` benchmark suite: load, time to first token and decode of random-weight models.

Registered with ``python -m pygpukit.benchmark`` through the entry point group
``pygpukit.benchmark_suites`` when installed; from a source tree set
``PYGPUKIT_BENCHMARK_PLUGINS=pygpukit.llm.benchmarks:suites``. One command::

    python -m pygpukit.benchmark --suite llm [--quick]

Models have the shapes of Llama-3.1-8B, Qwen2.5-0.5B and SmolLM2-135M (``--quick``: the two
small ones) with random bfloat16 weights, written once as SafeTensors directories under
``$PYGPUKIT_LLM_BENCH_DIR`` (default: the system temp folder) and read from the page cache.
Rows, each against the same weights in the same run (``torch`` column):

- ``load``: ``llm.load`` of the directory (GB/s of checkpoint bytes) against
  ``safetensors.torch.load_file(..., device="cuda")``;
- ``ttft``: time to first token of a 128- and a 1024-token prompt (``--seq-lens`` overrides),
  against the PyTorch anchor's eager prefill (:mod:`pygpukit.llm.torch_anchor`: a decoder
  written directly in PyTorch with fused weights, a static KV cache and one CUDA graph per
  decode step); the rate is the prompt's weight-GEMM FLOPs per second against the
  ``gemm_bfloat16`` ceiling, so 1 / SoL is the time to first token in units of the time those
  GEMMs take at the run's GEMM rate. Each sample is the median of three prefills. The metrics
  ``matmul_ms`` / ``ttft_over_matmul`` time the same GEMMs alone at the prompt's own shapes
  (each library its own: ``ops.linear``, ``torch.nn.functional.linear``), which separates
  what the prefill spends outside its GEMMs from the square product's different rate;
- ``decode``: milliseconds per decode step of ``batch`` sequences (1, 4, 16, 64; tokens/s in the
  metrics) against the anchor's graph replays; bytes moved are the weights one step reads, so
  the percentage of the ``copy_bw`` ceiling is the share of the weight-read bound reached.
  PyGPUkit's batch 1 is ``CausalLM.generate``; a larger batch runs through the serving engine
  (:mod:`pygpukit.llm.engine`: one graph-replayed step of the batch, its sampled ids read back
  every step, as a server does);
- ``ttft_hf`` and ``decode_hf``: the same at batch 1 against Hugging Face transformers'
  ``generate`` (eager PyTorch: no compile, dynamic cache).

``$PYGPUKIT_LLM_BENCH_MODELS`` picks the shapes (``smollm2-135m,llama-3.1-8b``),
``$PYGPUKIT_LLM_BENCH_ROWS`` the row kinds (``ttft,ttft_hf``). Without
PyTorch the ``torch`` column is absent; without transformers its rows say so.

The CPU backend runs a tiny shape (the same code paths, seconds instead of minutes).
"""

from __future__ import annotations

import json
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pygpukit import env
from pygpukit.benchmark.case import Case, CorrectnessError, Skip, Timed
from pygpukit.benchmark.peers import Library, release_device_memory
from pygpukit.benchmark.registry import Suite, SuiteContext

from .config import ModelConfig
from .models.llama import checkpoint_tensors

__all__ = ["SHAPES", "SUITE", "suites", "write_random_checkpoint"]

NAME = "llm"
BENCH_DIR_ENV = "PYGPUKIT_LLM_BENCH_DIR"
env.register(
    BENCH_DIR_ENV,
    "path",
    read="python -m pygpukit.benchmark --suite llm",
    package="pygpukit-llm",
    description="Folder for the llm benchmark's random checkpoints (default: the system temp "
    "folder).",
)


def _shape(arch: str, model_type: str, **kw: Any) -> dict[str, Any]:
    return {"architectures": [arch], "model_type": model_type, "hidden_act": "silu",
            "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": None,
            "torch_dtype": "bfloat16", **kw}  # fmt: skip


#: config.json of each benchmarked shape (eos_token_id None: every decode runs to its length).
SHAPES: dict[str, dict[str, Any]] = {
    "llama-3.1-8b": _shape(
        "LlamaForCausalLM", "llama", vocab_size=128256, hidden_size=4096,
        intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=131072, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
        tie_word_embeddings=False,
    ),
    "qwen2.5-0.5b": _shape(
        "Qwen2ForCausalLM", "qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
        max_position_embeddings=32768, rope_theta=1000000.0, tie_word_embeddings=True,
    ),
    "smollm2-135m": _shape(
        "LlamaForCausalLM", "llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
        num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
        max_position_embeddings=8192, rope_theta=100000.0, tie_word_embeddings=True,
    ),
    "tiny": _shape(
        "LlamaForCausalLM", "llama", vocab_size=512, hidden_size=128, intermediate_size=256,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=2048, rope_theta=10000.0, tie_word_embeddings=False,
    ),
}  # fmt: skip

MODELS_ENV = "PYGPUKIT_LLM_BENCH_MODELS"
env.register(
    MODELS_ENV,
    "items",
    allowed=tuple(SHAPES),
    read="python -m pygpukit.benchmark --suite llm",
    package="pygpukit-llm",
    on_invalid="raise",
    description="Model shapes the llm benchmark runs (default: the three real ones; --quick: "
    "the two small ones), e.g. smollm2-135m,llama-3.1-8b.",
)

#: The suite's row kinds, in the order each shape runs them.
ROW_KINDS = ("load", "ttft", "decode", "ttft_hf", "decode_hf")
ROWS_ENV = "PYGPUKIT_LLM_BENCH_ROWS"
env.register(
    ROWS_ENV,
    "items",
    allowed=ROW_KINDS,
    read="python -m pygpukit.benchmark --suite llm",
    package="pygpukit-llm",
    on_invalid="raise",
    description="Row kinds the llm benchmark runs (default: all), e.g. ttft,ttft_hf for the "
    "time to first token alone.",
)

_BLOCK_VALUES = 1 << 24  # 32 MiB of bfloat16 noise, tiled over every tensor


def write_random_checkpoint(folder: Path, cfg: dict[str, Any], seed: int = 0) -> Path:
    """Write ``config.json`` + ``model.safetensors`` of random bfloat16 weights, streamed.

    Weights are a 32 MiB block of N(0, 0.02) noise tiled over each matrix (their values do not
    matter to the timing; writing 16 GB of independent draws would take minutes); norms are
    ones. Reuses a complete earlier file of the same config.
    """
    import ml_dtypes

    folder.mkdir(parents=True, exist_ok=True)
    target, done = folder / "model.safetensors", folder / ".complete"
    config_text = json.dumps(cfg, indent=1, sort_keys=True)
    if done.is_file() and done.read_text() == config_text and target.is_file():
        return folder
    tensors = list(checkpoint_tensors(ModelConfig.from_dict(cfg)))
    header: dict[str, Any] = {}
    offset = 0
    for name, shape, _ in tensors:
        nbytes = int(np.prod(shape)) * 2
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    rng = np.random.default_rng(seed)
    block = (rng.standard_normal(_BLOCK_VALUES, np.float32) * 0.02).astype(ml_dtypes.bfloat16)
    ones = np.ones(_BLOCK_VALUES, ml_dtypes.bfloat16).tobytes()
    noise = block.tobytes()
    with open(target, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for _, shape, kind in tensors:
            left = int(np.prod(shape)) * 2
            source = ones if kind == "norm" else noise
            while left:
                n = min(left, len(source))
                f.write(source[:n])
                left -= n
    (folder / "config.json").write_text(json.dumps(cfg, indent=1))
    done.write_text(config_text)
    return folder


def _checkpoint(shape: str) -> Path:
    root = (env.path(BENCH_DIR_ENV) or Path(tempfile.gettempdir())) / "pygpukit-llm-bench"
    return write_random_checkpoint(root / shape, SHAPES[shape])


def _hf_model(lib: Library, folder: Path) -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise Skip(f"transformers is not installed: {exc}") from exc
    torch = lib.module
    model = transformers.AutoModelForCausalLM.from_pretrained(
        folder, torch_dtype=torch.bfloat16, device_map="cuda"
    )
    return model.eval()


def _hf_generate(lib: Library, model: Any, ids: np.ndarray, new: int) -> Any:
    torch = lib.module
    x = torch.from_numpy(ids).to("cuda")
    with torch.no_grad():
        out = model.generate(
            x, attention_mask=torch.ones_like(x), max_new_tokens=new, min_new_tokens=new,
            do_sample=False, pad_token_id=0,
        )  # fmt: skip
    torch.cuda.synchronize()
    return out[0, ids.shape[1] :].cpu().numpy()


def _check_tokens(vocab: int, n: int) -> Callable[[Any], float | None]:
    def check(tokens: Any) -> float | None:
        t = np.asarray(tokens)
        if t.shape != (n,) or t.min() < 0 or t.max() >= vocab:
            raise CorrectnessError(f"expected {n} token ids in [0, {vocab}), got {t!r}")
        return None

    return check


def _load_case(shape: str) -> Case:
    def setup(lib: Library, copies: int) -> Timed:
        folder = _checkpoint(shape)
        file = folder / "model.safetensors"
        if lib.name == "pygpukit":
            from pygpukit import llm

            def run(i: int) -> Any:
                model = llm.load(folder, max_seq_len=2048, progress=False)
                model.forward([[1, 2]]).to_numpy()  # loaded means usable: one tiny forward
                return model

        elif lib.name == "torch":
            try:
                from safetensors.torch import load_file
            except ImportError as exc:
                raise Skip(f"safetensors is not installed: {exc}") from exc

            def run(i: int) -> Any:
                out = load_file(str(file), device="cuda")
                lib.synchronize()
                return out

        else:
            raise Skip(f"{lib.name}: no checkpoint loader")

        def measure(i: int) -> float:
            release_device_memory()
            start = time.perf_counter()
            result = run(i)
            ms = (time.perf_counter() - start) * 1e3
            del result
            release_device_memory()
            return ms

        def run_once(i: int) -> bool:
            loaded = run(i) is not None
            release_device_memory()
            return loaded

        return Timed(run=run_once, check=lambda loaded: None, measure=measure)

    return Case(NAME, "load", {"model": shape}, dict.fromkeys(("pygpukit", "torch"), setup),
                timing="wall", bytes_moved=_checkpoint_size(shape))  # fmt: skip


def _checkpoint_size(shape: str) -> int:
    cfg = ModelConfig.from_dict(SHAPES[shape])
    return sum(int(np.prod(s)) * 2 for _, s, _ in checkpoint_tensors(cfg))


def _decode_bytes(shape: str) -> int:
    """Weight bytes one decode step reads (the embedding table only when it is the head)."""
    cfg = ModelConfig.from_dict(SHAPES[shape])
    total = 0
    for name, s, _ in checkpoint_tensors(cfg):
        if name != "model.embed_tokens.weight" or cfg.tie_word_embeddings:
            total += int(np.prod(s)) * 2
    return total


def _prefill_gemms(shape: str, prompt: int) -> list[tuple[int, int, int, int]]:
    """``(count, M, N, K)`` of a prompt's weight GEMMs: each layer's four, the head's last row."""
    cfg = ModelConfig.from_dict(SHAPES[shape])
    h, layers = cfg.hidden_size, cfg.num_layers
    return [
        (layers, prompt, cfg.q_size + 2 * cfg.kv_size, h),
        (layers, prompt, h, cfg.q_size),
        (layers, prompt, 2 * cfg.intermediate_size, h),
        (layers, prompt, h, cfg.intermediate_size),
        (1, 1, cfg.vocab_size, h),
    ]


def _prefill_flops(shape: str, prompt: int) -> int:
    """The matmul FLOPs of a prompt's prefill (attention's own products excluded).

    Every layer's weight GEMMs over ``prompt`` rows (``2 x rows x weights``) and the head over
    the last row. With the ``gemm_bfloat16`` ceiling this makes the ttft row's SoL the share of
    that GEMM time in the time to first token (1 / SoL: how many times the GEMM time it takes).
    """
    return sum(2 * c * m * n * k for c, m, n, k in _prefill_gemms(shape, prompt))


#: Prefills per timed sample of a ttft row (the sample is their median).
_TTFT_RUNS = 3

#: Timed calls per GEMM shape in :func:`_matmul_ms` (after one warm-up call), in this many
#: groups; the fastest group counts (a GEMM's time only grows with interference).
_MATMUL_CALLS, _MATMUL_GROUPS = 5, 3


def _linear_on(lib: Library) -> tuple[Callable[[Any, Any], Any], Callable[[], Any]]:
    """``(linear, event)`` of ``lib``: the product the prefill makes and a timing event.

    ``linear(x, w)`` is ``x @ w.T`` as the prefill runs it (``ops.linear``,
    ``torch.nn.functional.linear``); ``event()`` records on the stream that product runs on.
    """
    if lib.name == "pygpukit":
        import pygpukit as gp
        from pygpukit.ops.linear import linear

        return linear, lambda: gp.Event(timing=True)
    torch = lib.module
    return torch.nn.functional.linear, lambda: torch.cuda.Event(enable_timing=True)


def _matmul_ms(lib: Library, shape: str, prompt: int) -> float:
    """Milliseconds ``lib``'s matmuls take for a prompt's weight GEMMs alone (no other work).

    Each shape of :func:`_prefill_gemms` is timed with device events (the fastest of a few
    groups of calls), then multiplied by its count. The operands are a block of random
    bfloat16 values tiled to each shape (drawing a 128256 x 4096 head afresh would take
    seconds). The ttft row divides its time by this: the share of the time to first token that
    is not the GEMMs themselves, free of the square product's different rate.
    """
    import ml_dtypes

    rng = np.random.default_rng(0)
    block = (rng.standard_normal(_BLOCK_VALUES // 16, np.float32) * 0.1).astype(ml_dtypes.bfloat16)
    linear, event = _linear_on(lib)
    total = 0.0
    for count, m, n, k in _prefill_gemms(shape, prompt):
        x = lib.upload(np.resize(block, (m, k)), "bfloat16")
        w = lib.upload(np.resize(block[::-1], (n, k)), "bfloat16")
        linear(x, w)
        best = float("inf")
        for _ in range(_MATMUL_GROUPS):
            start, end = event(), event()
            start.record()
            for _ in range(_MATMUL_CALLS):
                linear(x, w)
            end.record()
            end.synchronize()
            best = min(best, float(start.elapsed_time(end)) / _MATMUL_CALLS)
        total += count * best
        del x, w
    return total


def _prompts(ctx: SuiteContext, vocab: int, batch: int, length: int) -> np.ndarray:
    return ctx.rng.integers(3, vocab, size=(batch, length)).astype(np.int64)


def _pygpukit_generation(
    shape: str, ids: np.ndarray, op: str, new: int
) -> tuple[Callable[[int], Any], Callable[[int], float]]:
    """``run`` and ``measure`` of PyGPUkit (ttft: one token; decode: ms per step).

    One sequence runs through ``CausalLM.generate`` (its single-sequence decoder); a batch
    through the serving engine (:mod:`pygpukit.llm.engine`), whose decode steps are one
    graph-replayed forward pass of the whole batch.
    """
    from pygpukit import llm

    model = llm.load(_checkpoint(shape), max_seq_len=ids.shape[1] + new + 8, progress=False)
    if ids.shape[0] != 1:
        return _engine_decode(model, ids, new)
    prompt_ids = ids[0].tolist()
    last: dict[str, float] = {}

    def run(i: int) -> Any:
        g = model.generate(prompt_ids, max_new_tokens=1 if op.startswith("ttft") else new)
        last["tok_s"] = g.stats.decode_tokens_per_s
        return g.token_ids

    def measure(i: int) -> float:
        start = time.perf_counter()
        run(i)
        if op.startswith("ttft"):
            return (time.perf_counter() - start) * 1e3
        return 1e3 / last["tok_s"]

    return run, measure


def _engine_decode(
    model: Any, ids: np.ndarray, new: int
) -> tuple[Callable[[int], Any], Callable[[int], float]]:
    """``run`` and ``measure`` of a batch decoded by the serving engine.

    Every sequence is prefilled first (one step) and has its first token, then the clock runs
    over the remaining decode steps of the whole batch (counted by the engine), each with its
    download of the sampled ids, as a server steps. One engine serves every run, so its decode
    graphs are captured once.
    """
    import pygpukit as gp

    from .engine import Engine, RequestParams
    from .engine.paged_cache import BLOCK_SIZE, block_bytes

    b, s = ids.shape
    blocks = b * -(-(s + new) // BLOCK_SIZE)
    engine = Engine(
        model, max_batch=b, max_batched_tokens=b * s, prefix_caching=False,
        kv_memory=blocks * block_bytes(model.config, model.decoder.model.dtype),
    )  # fmt: skip
    params = RequestParams(max_tokens=new, ignore_eos=True)

    def collect(into: list[int]) -> Callable[[Any], None]:
        return lambda output: into.extend(output.token_ids)

    def start() -> list[list[int]]:
        tokens: list[list[int]] = [[] for _ in range(b)]
        for row, out in zip(ids.tolist(), tokens, strict=True):
            engine.submit(row, params, collect(out))
        while min(len(t) for t in tokens) < 1:  # the prompts, and each first token
            engine.step()
        return tokens

    def finish() -> None:
        while engine.step() or engine.has_work():
            pass

    def run(i: int) -> Any:
        tokens = start()
        finish()
        return tokens[0]

    def decode_steps() -> int:
        return engine.decode.replays + engine.decode.eager_steps

    def measure(i: int) -> float:
        start()
        gp.synchronize()
        before, begin = decode_steps(), time.perf_counter()
        finish()
        return (time.perf_counter() - begin) * 1e3 / (decode_steps() - before)

    return run, measure


#: The anchor of the last shape asked for, kept across cases (loading 16 GB once, not per row).
_ANCHOR: dict[str, Any] = {}


def _anchor(shape: str, max_batch: int, max_seq_len: int, device: str) -> Any:
    """The PyTorch anchor decoder of ``shape`` on ``device`` with a cache at least this big."""
    from .torch_anchor import TorchAnchor

    held = _ANCHOR.get(shape)
    if (
        held is not None
        and held.max_batch >= max_batch
        and held.max_seq_len >= max_seq_len
        and str(held.device) == device
    ):
        return held
    _ANCHOR.clear()
    release_device_memory()
    cfg = ModelConfig.from_dict(SHAPES[shape])
    anchor = TorchAnchor.from_checkpoint(
        _checkpoint(shape), cfg, max_batch=max_batch, max_seq_len=max_seq_len, device=device
    )
    _ANCHOR[shape] = anchor
    return anchor


def _anchor_generation(
    lib: Library, anchor: Any, ids: np.ndarray, op: str, new: int
) -> tuple[Callable[[int], Any], Callable[[int], float]]:
    """``run`` and ``measure`` of the PyTorch anchor.

    ttft: eager prefill until the first token is on the host; decode: milliseconds per
    graph-replayed step of the whole batch, from the first token to the last.
    """
    b, s = ids.shape

    def run(i: int) -> Any:
        if op == "ttft":
            anchor.prefill(ids)
            return anchor.tokens(b, s, 1)[0]
        return anchor.generate(ids, new)[0]

    def measure(i: int) -> float:
        if op == "ttft":
            lib.synchronize()
            start = time.perf_counter()
            anchor.prefill(ids)
            anchor.tokens(b, s, 1)
            return (time.perf_counter() - start) * 1e3
        anchor.prefill(ids)
        lib.synchronize()
        start = time.perf_counter()
        anchor.decode(b, new - 1)
        anchor.tokens(b, s, new)
        return (time.perf_counter() - start) * 1e3 / (new - 1)

    return run, measure


def _hf_generation(
    lib: Library, shape: str, ids: np.ndarray, op: str, new: int
) -> tuple[Callable[[int], Any], Callable[[int], float]]:
    """``run`` and ``measure`` of transformers' eager ``generate``."""
    _ANCHOR.clear()
    release_device_memory()
    model = _hf_model(lib, _checkpoint(shape))

    def run(i: int) -> Any:
        return _hf_generate(lib, model, ids, 1 if op == "ttft_hf" else new)

    def measure(i: int) -> float:
        start = time.perf_counter()
        _hf_generate(lib, model, ids, 1)
        first = time.perf_counter()
        if op == "ttft_hf":
            return (first - start) * 1e3
        _hf_generate(lib, model, ids, new)
        total = time.perf_counter() - first
        return (total - (first - start)) * 1e3 / (new - 1)

    return run, measure


def _generation_case(
    ctx: SuiteContext, shape: str, op: str, batch: int, prompt: int, new: int, anchor_seq: int
) -> Case:
    """One row of generation.

    ``op`` is ``ttft`` or ``decode`` (the torch column is the PyTorch anchor), or ``ttft_hf`` /
    ``decode_hf`` (the torch column is transformers' ``generate``).

    ``ttft``: milliseconds from the prompt to the first token on the host. ``decode``:
    milliseconds per step of ``batch`` sequences (tokens/s in the metrics), prompt excluded.
    """
    vocab = SHAPES[shape]["vocab_size"]
    ids = _prompts(ctx, vocab, batch, prompt)
    ttft = op.startswith("ttft")
    n = 1 if ttft else new

    def setup(lib: Library, copies: int) -> Timed:
        if lib.name == "pygpukit":
            run, measure = _pygpukit_generation(shape, ids, op, new)
        elif lib.name == "torch" and op in ("ttft", "decode"):
            device = str(getattr(lib, "device", "cuda"))
            anchor = _anchor(shape, _max_batch(ctx), anchor_seq, device)
            run, measure = _anchor_generation(lib, anchor, ids, op, new)
        elif lib.name == "torch":
            run, measure = _hf_generation(lib, shape, ids, op, new)
        else:
            raise Skip(f"{lib.name}: no LLM runtime")
        times: list[float] = []

        def timed_measure(i: int) -> float:
            # A prefill is one call of tens of milliseconds: each sample is the median of a
            # few, so one slow call (a clock step, a neighbour's burst) does not move the row.
            runs = _TTFT_RUNS if ttft else 1
            times.append(float(np.median([measure(i) for _ in range(runs)])))
            return times[-1]

        def metrics() -> dict[str, float | str]:
            if not times:
                return {}
            med = float(np.median(times))
            if not ttft:
                return {"tokens_per_s": round(batch * 1e3 / med, 1)}
            if op != "ttft" or not ctx.on_gpu or batch != 1:
                return {}
            gemm = _matmul_ms(lib, shape, prompt)
            return {"matmul_ms": round(gemm, 3), "ttft_over_matmul": round(med / gemm, 3)}

        return Timed(run=run, check=_check_tokens(vocab, n), measure=timed_measure,
                     metrics=metrics)  # fmt: skip

    params: dict[str, int | float | str] = {"model": shape, "prompt": prompt}
    setups = dict.fromkeys(("pygpukit", "torch"), setup)
    if ttft:
        return Case(NAME, op, params, setups, timing="wall", flops=_prefill_flops(shape, prompt),
                    ceiling="gemm_bfloat16")  # fmt: skip
    params.update(batch=batch, new=new)
    return Case(NAME, op, params, setups, timing="wall", bytes_moved=_decode_bytes(shape),
                ceiling="copy_bw")  # fmt: skip


def _batches(ctx: SuiteContext) -> list[int]:
    if not ctx.on_gpu:
        return [1, 2]
    return [1, 16] if ctx.quick else [1, 4, 16, 64]


def _max_batch(ctx: SuiteContext) -> int:
    return max(_batches(ctx))


def _shapes(ctx: SuiteContext) -> list[str]:
    chosen = env.items(MODELS_ENV)
    if chosen:
        return list(chosen)
    if not ctx.on_gpu:
        return ["tiny"]
    if ctx.quick:
        return ["smollm2-135m", "qwen2.5-0.5b"]
    return ["llama-3.1-8b", "qwen2.5-0.5b", "smollm2-135m"]


def _cases(ctx: SuiteContext) -> Iterator[Case]:
    decode_prompt = 32
    if ctx.on_gpu:
        prompts, new = list(ctx.seq_lens or [128, 1024]), 64 if ctx.quick else 128
    else:
        prompts, new = list(ctx.seq_lens or [64]), 16
    # One anchor per shape serves every row: its cache fits the longest prompt and the
    # largest batch (not both at once: rows use one or the other).
    anchor_seq = max(max(prompts) + 8, decode_prompt + new + 8)
    rows = set(env.items(ROWS_ENV) or ROW_KINDS)
    for shape in _shapes(ctx):
        if "load" in rows:
            yield _load_case(shape)
        if "ttft" in rows:
            for prompt in prompts:
                yield _generation_case(ctx, shape, "ttft", 1, prompt, 1, anchor_seq)
        if "decode" in rows:
            for batch in _batches(ctx):
                yield _generation_case(ctx, shape, "decode", batch, decode_prompt, new, anchor_seq)
        if "ttft_hf" in rows:
            yield _generation_case(ctx, shape, "ttft_hf", 1, max(prompts), 1, anchor_seq)
        if "decode_hf" in rows:
            yield _generation_case(ctx, shape, "decode_hf", 1, decode_prompt, new, anchor_seq)


SUITE = Suite(
    NAME,
    "LLM load, time to first token (128/1024-token prompts) and decode (batch 1-64) of "
    "random-weight Llama-3.1-8B / Qwen2.5-0.5B / SmolLM2-135M shapes, vs a graph-captured "
    "PyTorch decoder, transformers and safetensors",
    _cases,
)


def suites() -> list[Suite]:
    """The suites of pygpukit-llm (the entry point's target)."""
    return [SUITE]
