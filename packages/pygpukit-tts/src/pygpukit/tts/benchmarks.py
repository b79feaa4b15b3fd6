"""The ``tts`` benchmark suite: Kokoro synthesis time against PyTorch's KModel and onnxruntime.

Registered with ``python -m pygpukit.benchmark`` through the entry point group
``pygpukit.benchmark_suites`` when installed; from a source tree set
``PYGPUKIT_BENCHMARK_PLUGINS=pygpukit.tts.benchmarks:suites``. One command::

    python -m pygpukit.benchmark --suite tts [--quick]

Rows (random weights at Kokoro-82M's shape, random phoneme strings from the vocabulary):

- ``synthesize``: one utterance of ``phonemes`` symbols at batch 1; the ``torch`` column is the
  ``kokoro`` package's ``KModel`` on ``cuda`` built from its own config with random weights (no
  download; skipped when ``kokoro`` and its imports, transformers, loguru, misaki, are missing).
  Metrics: seconds of audio per second, and ``onnxruntime_ms`` for the same phoneme ids on the
  kokoro-onnx file named by ``PYGPUKIT_TTS_BENCH_ONNX`` (its own weights, CUDA provider when
  available, else CPU);
- ``synthesize_batch``: 16 utterances in one call (audio seconds per second in the metrics);
- ``stream_first_chunk``: time to the first chunk of a 2,000-phoneme text.

The CPU backend runs a tiny shape (the same code paths, seconds instead of minutes).
"""

from __future__ import annotations

import gc
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from pygpukit import env
from pygpukit.benchmark.case import Case, CorrectnessError, Skip, Timed
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

from .config import KokoroConfig
from .kokoro import KokoroNetwork
from .model import KokoroModel
from .random_model import TINY_CONFIG, random_state, random_voice
from .text import chunk_phonemes

__all__ = ["SUITE", "suites"]

NAME = "tts"
ONNX_ENV = "PYGPUKIT_TTS_BENCH_ONNX"
env.register(
    ONNX_ENV,
    "path",
    read="python -m pygpukit.benchmark --suite tts",
    package="pygpukit-tts",
    description="A kokoro-onnx model file (kokoro-v1.0[.int8].onnx) timed with onnxruntime in "
    "the tts benchmark's metrics.",
)


def _phonemes(config: KokoroConfig, rng: np.random.Generator, n: int) -> str:
    symbols = [s for s in config.vocab if s.strip() and s not in '.,!?;:—…"()“”']
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < n:
        words.append("".join(rng.choice(symbols, size=int(rng.integers(2, 7)))))
    text = " ".join(words)[: n - 1]
    return text.rstrip() + "."


_STATES: dict[KokoroConfig, dict[str, np.ndarray]] = {}


def _state(config: KokoroConfig) -> dict[str, np.ndarray]:
    if config not in _STATES:
        _STATES[config] = random_state(config, seed=0)
    return _STATES[config]


def _model(config: KokoroConfig) -> KokoroModel:
    network = KokoroNetwork(config, _state(config))
    return KokoroModel(network, {"random": random_voice(config, seed=1)})


def _check_audio(config: KokoroConfig) -> Callable[[Any], float | None]:
    def check(audio: Any) -> float | None:
        samples = np.asarray(audio)
        if (
            samples.ndim != 1
            or len(samples) % config.frame_samples
            or not np.isfinite(samples).all()
        ):
            raise CorrectnessError(f"expected finite mono audio, got shape {samples.shape}")
        return None

    return check


def _import_kmodel() -> Any:
    """``kokoro.model.KModel`` without running the package's ``__init__``.

    That ``__init__`` imports ``kokoro.pipeline``, hence misaki and spaCy, which the model does
    not need: a bare ``kokoro`` package pointing at the installed folder stands in for it.
    """
    import importlib
    import importlib.util
    import sys
    import types

    if "kokoro" not in sys.modules:
        spec = importlib.util.find_spec("kokoro")
        if spec is None or not spec.submodule_search_locations:
            raise Skip("the kokoro package (KModel, PyTorch) is not installed")
        package = types.ModuleType("kokoro")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["kokoro"] = package
    try:
        kmodel = importlib.import_module("kokoro.model").KModel
        from loguru import logger
    except ImportError as exc:
        raise Skip(f"kokoro.model is not importable (transformers, loguru?): {exc}") from exc
    logger.disable("kokoro")  # as the skipped __init__ does: no per-call debug lines
    return kmodel


def _torch_state(kmodel: Any, state: dict[str, np.ndarray], torch: Any) -> dict[str, Any]:
    """KModel's state dict filled from a folded state (weight norm split back into g and v)."""
    out = {}
    for key, current in kmodel.state_dict().items():
        base = None
        for suffix in (".weight_g", ".weight_v", ".parametrizations.weight.original0",
                       ".parametrizations.weight.original1"):  # fmt: skip
            if key.endswith(suffix):
                base = key[: -len(suffix)] + ".weight"
        if base is not None:
            w = state[base]
            if key.endswith(("weight_g", "original0")):
                # weight_norm's g: the norm of v over every axis but the first, so g v / |v| = v.
                w = np.sqrt((w.astype(np.float64) ** 2).sum(axis=tuple(range(1, w.ndim))))
        elif key in state:
            w = state[key]
        else:
            out[key] = current  # buffers KModel makes itself (position ids...)
            continue
        out[key] = torch.from_numpy(np.ascontiguousarray(w, np.float32)).reshape(current.shape)
    return out


_KMODELS: dict[KokoroConfig, Any] = {}


def _kmodel(lib: Library, config: KokoroConfig) -> Any:
    """PyTorch's KModel on ``cuda`` with the same random weights as :func:`_model`."""
    if config in _KMODELS:
        return _KMODELS[config]
    kmodel_class = _import_kmodel()
    from kokoro.istftnet import Decoder
    from kokoro.modules import CustomAlbert, ProsodyPredictor, TextEncoder
    from transformers import AlbertConfig

    torch = lib.module
    cfg = config.to_dict()
    cfg.update(dropout=0.2, n_mels=80, multispeaker=True, max_conv_dim=512, dim_in=64)
    plbert = dict(cfg["plbert"])
    parts = {
        "bert": CustomAlbert(AlbertConfig(vocab_size=config.n_token, **plbert)),
        "bert_encoder": torch.nn.Linear(config.albert_hidden, config.hidden_dim),
        "predictor": ProsodyPredictor(
            style_dim=config.style_dim, d_hid=config.hidden_dim, nlayers=config.n_layer,
            max_dur=config.max_dur, dropout=0.2,
        ),
        "text_encoder": TextEncoder(
            channels=config.hidden_dim, kernel_size=config.text_encoder_kernel_size,
            depth=config.n_layer, n_symbols=config.n_token,
        ),
        "decoder": Decoder(
            dim_in=config.hidden_dim, style_dim=config.style_dim, dim_out=80, **cfg["istftnet"]
        ),
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "random.pth"
        torch.save({k: m.state_dict() for k, m in parts.items()}, path)
        model = kmodel_class(repo_id="hexgrad/Kokoro-82M", config=cfg, model=str(path))
    model.load_state_dict(_torch_state(model, _state(config), torch))
    _KMODELS[config] = model.to("cuda").eval()
    return _KMODELS[config]


def _torch_synthesize(lib: Library, kmodel: Any, phonemes: str, style: np.ndarray) -> Any:
    """One KModel call, waited for: ``(samples, frames)``."""
    torch = lib.module
    with torch.no_grad():
        out = kmodel(phonemes, torch.from_numpy(style).to("cuda"), 1.0, return_output=True)
    torch.cuda.synchronize()
    return out.audio.float().cpu().numpy(), int(out.pred_dur.sum())


def _onnxruntime_ms(ids: np.ndarray, ref: np.ndarray, reps: int = 5) -> float | None:
    path = env.path(ONNX_ENV)
    if path is None:
        return None
    import onnxruntime as ort

    providers = [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider")
                 if p in ort.get_available_providers()]  # fmt: skip
    session = ort.InferenceSession(str(path), providers=providers)
    feeds = {
        "tokens": ids[None].astype(np.int64),
        "style": ref.reshape(1, -1).astype(np.float32),
        "speed": np.ones(1, np.float32),
    }
    session.run(None, feeds)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append((time.perf_counter() - start) * 1e3)
    return float(np.median(times))


class _Clock:
    """Wall times of the measured calls and the audio seconds each made.

    The harness asks :meth:`measure` for a handful of times. KModel's wall time moves by tens
    of milliseconds from call to call (a host-bound Python loop of launches), so each answer
    here is the median of ``repeats`` calls on the same input, after ``warmup`` untimed calls
    on the first request (lazy initialization, allocator growth, clocks ramping up), with the
    garbage collector held off while timing. Both libraries are measured the same way.
    """

    def __init__(self, ctx: SuiteContext, *, single: bool = False) -> None:
        # The CPU backend's tiny shape only checks that the rows run: one call each.
        self.warmup, self.repeats = (1, 1) if single else (3, 5)
        if not ctx.on_gpu:
            self.warmup, self.repeats = 0, 1
        self.times_ms: list[float] = []
        self.seconds: list[float] = []
        self.extra: dict[str, float | str] = {}
        self._warm = False

    def measure(self, run: Callable[[int], Any]) -> Callable[[int], float]:
        def timed(i: int) -> float:
            if not self._warm:
                for j in range(self.warmup):
                    run(-1 - j)
                self._warm = True
            gc.collect()
            gc.disable()
            try:
                times = []
                for j in range(self.repeats):
                    start = time.perf_counter()
                    run(i * self.repeats + j)
                    times.append((time.perf_counter() - start) * 1e3)
            finally:
                gc.enable()
            self.times_ms.extend(times)
            return float(np.median(times))

        return timed

    def metrics(self) -> dict[str, float | str]:
        if not self.times_ms or not self.seconds:
            return dict(self.extra)
        per_s = float(np.median(self.seconds)) / (float(np.median(self.times_ms)) / 1e3)
        low, high = np.percentile(self.times_ms, [10, 90])
        return {**self.extra, "audio_s": round(float(np.median(self.seconds)), 2),
                "audio_s_per_s": round(per_s, 1), "calls": len(self.times_ms),
                "p10_ms": round(float(low), 2), "p90_ms": round(float(high), 2)}  # fmt: skip


def _need_torch_gpu(lib: Library) -> None:
    if lib.name != "torch":
        raise Skip(f"{lib.name}: no Kokoro implementation")
    if not lib.module.cuda.is_available():
        raise Skip("torch has no CUDA device: KModel runs on cuda only here")


def _style_row(config: KokoroConfig, phonemes: str) -> np.ndarray:
    """The random voice's style for an utterance of ``phonemes`` (as KModel's pipeline picks)."""
    return random_voice(config, 1)[min(len(phonemes), 510) - 1]


def _synthesize_case(ctx: SuiteContext, config: KokoroConfig, shape: str, n: int) -> Case:
    phonemes = _phonemes(config, ctx.rng, n)

    def setup(lib: Library, copies: int) -> Timed:
        clock = _Clock(ctx)
        if lib.name == "pygpukit":
            model = _model(config)

            def run(i: int) -> Any:
                audio = model.synthesize(phonemes=phonemes, voice="random")
                clock.seconds.append(audio.seconds)
                clock.extra["frames"] = len(audio.samples) // config.frame_samples
                if model.network.graphs is not None:  # evidence that the calls replayed graphs
                    clock.extra["graph_replays"] = model.network.graphs.frames.replays
                return audio.samples

            if shape == "kokoro-82m":
                from .text import as_token_array, phonemes_to_ids

                ids = as_token_array(phonemes_to_ids(phonemes, config.vocab))
                ms = _onnxruntime_ms(ids, _style_row(config, phonemes)[0])
                if ms is not None:
                    clock.extra["onnxruntime_ms"] = round(ms, 2)
        else:
            _need_torch_gpu(lib)
            kmodel = _kmodel(lib, config)
            style = _style_row(config, phonemes)

            def run(i: int) -> Any:
                samples, frames = _torch_synthesize(lib, kmodel, phonemes, style)
                clock.seconds.append(len(samples) / 24000)
                clock.extra["frames"] = frames  # the same random weights: the same alignment
                return samples

        return Timed(run=run, check=_check_audio(config), measure=clock.measure(run),
                     metrics=clock.metrics)  # fmt: skip

    params: dict[str, int | float | str] = {"model": shape, "phonemes": n, "batch": 1}
    return Case(NAME, "synthesize", params, dict.fromkeys(("pygpukit", "torch"), setup),
                timing="wall")  # fmt: skip


def _batch_case(ctx: SuiteContext, config: KokoroConfig, shape: str, n: int, batch: int) -> Case:
    texts = [_phonemes(config, ctx.rng, n) for _ in range(batch)]

    def setup(lib: Library, copies: int) -> Timed:
        clock = _Clock(ctx, single=True)  # a KModel call is 16 utterances: a second or two
        if lib.name == "pygpukit":
            model = _model(config)

            def run(i: int) -> Any:
                out = model.synthesize_batch(phonemes=texts, voice="random")
                clock.seconds.append(sum(a.seconds for a in out))
                return out[0].samples

        else:  # KModel takes one utterance per call: the batch is a loop, as its servers do
            _need_torch_gpu(lib)
            kmodel = _kmodel(lib, config)
            styles = [_style_row(config, t) for t in texts]

            def run(i: int) -> Any:
                pairs = zip(texts, styles, strict=True)
                outs = [_torch_synthesize(lib, kmodel, t, s) for t, s in pairs]
                clock.seconds.append(sum(len(a) for a, _ in outs) / 24000)
                return outs[0][0]

        return Timed(run=run, check=_check_audio(config), measure=clock.measure(run),
                     metrics=clock.metrics)  # fmt: skip

    params: dict[str, int | float | str] = {"model": shape, "phonemes": n, "batch": batch}
    return Case(NAME, "synthesize_batch", params, dict.fromkeys(("pygpukit", "torch"), setup),
                timing="wall")  # fmt: skip


def _stream_case(ctx: SuiteContext, config: KokoroConfig, shape: str, n: int) -> Case:
    text = " ".join(_phonemes(config, ctx.rng, 200) for _ in range(n // 200))

    def setup(lib: Library, copies: int) -> Timed:
        clock = _Clock(ctx)
        if lib.name == "pygpukit":
            model = _model(config)

            def run(i: int) -> Any:
                first = next(iter(model.stream(phonemes=text, voice="random")))
                clock.extra["first_chunk_phonemes"] = len(first.phonemes)
                return first.samples

        else:  # KModel's pipeline speaks the text in chunks of up to 510 phonemes
            _need_torch_gpu(lib)
            kmodel = _kmodel(lib, config)
            first_chunk = chunk_phonemes(text, config.max_phonemes)[0]
            style = _style_row(config, first_chunk)
            clock.extra["first_chunk_phonemes"] = len(first_chunk)

            def run(i: int) -> Any:
                return _torch_synthesize(lib, kmodel, first_chunk, style)[0]

        return Timed(run=run, check=_check_audio(config), measure=clock.measure(run),
                     metrics=clock.metrics)  # fmt: skip

    params: dict[str, int | float | str] = {"model": shape, "phonemes": len(text)}
    return Case(NAME, "stream_first_chunk", params, dict.fromkeys(("pygpukit", "torch"), setup),
                timing="wall")  # fmt: skip


def _cases(ctx: SuiteContext) -> Iterator[Case]:
    if not ctx.on_gpu:
        config, shape = TINY_CONFIG, "tiny"
        yield _synthesize_case(ctx, config, shape, 24)
        yield _batch_case(ctx, config, shape, 24, 2)
        yield _stream_case(ctx, config, shape, 400)
        return
    config, shape = KokoroConfig(), "kokoro-82m"
    # ~ 10 s of speech at Kokoro's pace is about 150 phonemes.
    yield _synthesize_case(ctx, config, shape, 150)
    if not ctx.quick:
        yield _synthesize_case(ctx, config, shape, 400)
    yield _batch_case(ctx, config, shape, 150, 16)
    yield _stream_case(ctx, config, shape, 2000)


SUITE = Suite(
    NAME,
    "Kokoro-82M synthesis (random weights at the real shape): batch 1, batch 16 and the first "
    "streamed chunk, vs the kokoro package's KModel in PyTorch and onnxruntime",
    _cases,
)


def suites() -> list[Suite]:
    """The suites of pygpukit-tts (the entry point's target)."""
    return [SUITE]
