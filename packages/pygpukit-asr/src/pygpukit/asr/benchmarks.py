"""The ``asr`` benchmark suite: one 30-second window, encoded, then 100 greedy tokens.

Registered with ``python -m pygpukit.benchmark`` through the entry point group
``pygpukit.benchmark_suites`` when installed; from a source tree set
``PYGPUKIT_BENCHMARK_PLUGINS=pygpukit.asr.benchmarks:suites``. One command::

    python -m pygpukit.benchmark --suite asr [--quick]

Models have the shapes of Whisper large-v3 and tiny.en (``--quick``: tiny.en only) with the
same random float16 weights for both libraries (drawn by ``pygpukit.asr.random_model`` from
seed 0, handed to transformers with ``load_state_dict``). A row is one call: the log-mel of
``batch`` 30 s windows in, the encoder, then 100 greedy tokens per window after
``<|startoftranscript|>`` (no stop at EOT). ``pygpukit`` runs ``WhisperModel.generate`` (the
decode step a CUDA graph); ``torch`` runs transformers' ``WhisperForConditionalGeneration``
in eager mode (``attn_implementation="eager"``): the encoder, then the decoder with its
key/value cache one token at a time, argmax on the device. ``realtime`` in the metrics is
seconds of audio per second of wall time (``batch * 30 / time``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from pygpukit.benchmark.case import Case, CorrectnessError, Skip, Timed
from pygpukit.benchmark.peers import Library, release_device_memory
from pygpukit.benchmark.registry import Suite, SuiteContext

from .whisper.config import NAMED_CONFIGS, WhisperConfig

__all__ = ["SUITE", "suites"]

NAME = "asr"
NEW_TOKENS = 100
SOT = 50258
_WEIGHTS: dict[str, dict[str, np.ndarray]] = {}


def _config(shape: str) -> WhisperConfig:
    if shape == "tiny-cpu":  # the CPU backend: tiny.en's widths, one layer each
        return WhisperConfig(encoder_layers=1, decoder_layers=1)
    return NAMED_CONFIGS[shape]


def _weights(shape: str) -> dict[str, np.ndarray]:
    """Float16 HF-named weights, drawn once per process."""
    if shape not in _WEIGHTS:
        from .random_model import random_weights

        _WEIGHTS.clear()
        _WEIGHTS[shape] = random_weights(_config(shape), 0, np.float16)
    return _WEIGHTS[shape]


def _ours(shape: str, mel: np.ndarray, new: int) -> Any:
    from .api import WhisperModel
    from .loading import _map_hf

    cfg = _config(shape)
    model = WhisperModel(cfg, _map_hf(_weights(shape), cfg, "random"), None, dtype="float16")
    prompt = [[SOT]] * mel.shape[0]

    def run(i: int) -> Any:
        return model.generate(mel, prompt, new, suppress=False)

    return run


def _theirs(lib: Library, shape: str, mel: np.ndarray, new: int) -> Any:
    try:
        from transformers import WhisperConfig as HFConfig
        from transformers import WhisperForConditionalGeneration
    except ImportError as exc:
        raise Skip(f"transformers is not installed: {exc}") from exc
    torch = lib.module
    cfg = _config(shape)
    sizes = {k: v for k, v in cfg.to_hf().items() if k not in ("architectures", "model_type")}
    hf = HFConfig(**sizes)
    hf._attn_implementation = "eager"  # transformers' plain PyTorch attention
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(hf)
    state = {"model." + k: torch.from_numpy(v) for k, v in _weights(shape).items()}
    state["proj_out.weight"] = state["model.decoder.embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    model = model.to("cuda", torch.float16).eval()
    feats = torch.from_numpy(mel).to("cuda", torch.float16)

    def run(i: int) -> Any:
        with torch.no_grad():
            enc = model.model.encoder(feats).last_hidden_state
            tok = torch.full((mel.shape[0], 1), SOT, device="cuda", dtype=torch.long)
            cache, out = None, []
            for _ in range(new):
                o = model.model.decoder(input_ids=tok, encoder_hidden_states=enc,
                                        past_key_values=cache, use_cache=True)  # fmt: skip
                cache = o.past_key_values
                tok = model.proj_out(o.last_hidden_state[:, -1:]).argmax(-1)
                out.append(tok)
            ids = torch.cat(out, dim=1)
        torch.cuda.synchronize()
        return ids.cpu().numpy()

    return run


def _case(ctx: SuiteContext, shape: str, batch: int, new: int) -> Case:
    cfg = _config(shape)
    mel = ctx.rng.uniform(-1.0, 1.5, (batch, cfg.n_mels, 3000)).astype(np.float32)

    def setup(lib: Library, copies: int) -> Timed:
        release_device_memory()
        if lib.name == "pygpukit":
            run = _ours(shape, mel, new)
        elif lib.name == "torch":
            run = _theirs(lib, shape, mel, new)
        else:
            raise Skip(f"{lib.name}: no Whisper runtime")
        times: list[float] = []

        def measure(i: int) -> float:
            start = time.perf_counter()
            run(i)
            times.append((time.perf_counter() - start) * 1e3)
            return times[-1]

        def check(ids: Any) -> float | None:
            a = np.asarray(ids)
            if a.shape != (batch, new) or a.min() < 0 or a.max() >= cfg.vocab_size:
                raise CorrectnessError(
                    f"expected {batch}x{new} ids below {cfg.vocab_size}, got {a.shape}"
                )
            return None

        def metrics() -> dict[str, float | str]:
            if not times:
                return {}
            return {"realtime": round(batch * 30.0 / (float(np.median(times)) / 1e3), 1)}

        return Timed(run=run, check=check, measure=measure, metrics=metrics)

    params: dict[str, int | float | str] = {"model": shape, "batch": batch, "new": new}
    return Case(NAME, "window", params, dict.fromkeys(("pygpukit", "torch"), setup),
                timing="wall")  # fmt: skip


def _cases(ctx: SuiteContext) -> Iterator[Case]:
    if not ctx.on_gpu:
        yield _case(ctx, "tiny-cpu", 1, 4)
        return
    shapes = ["tiny.en"] if ctx.quick else ["large-v3", "tiny.en"]
    for shape in shapes:
        for batch in (1, 8):
            yield _case(ctx, shape, batch, NEW_TOKENS)


SUITE = Suite(
    NAME,
    "Whisper: encode a 30 s window then 100 greedy tokens, batch 1 and 8, random large-v3 / "
    "tiny.en weights in float16, vs transformers (eager)",
    _cases,
)


def suites() -> list[Suite]:
    """The suites of pygpukit-asr (the entry point's target)."""
    return [SUITE]
