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


def _model(config: KokoroConfig) -> KokoroModel:
    network = KokoroNetwork(config, random_state(config, seed=0))
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


def _kmodel(lib: Library, config: KokoroConfig) -> Any:
    """PyTorch's KModel with random weights from its own modules (no download)."""
    try:
        from kokoro.istftnet import Decoder
        from kokoro.model import KModel
        from kokoro.modules import CustomAlbert, ProsodyPredictor, TextEncoder
        from transformers import AlbertConfig
    except ImportError as exc:
        raise Skip(f"the kokoro package (and transformers) is not importable: {exc}") from exc
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
        model = KModel(repo_id="hexgrad/Kokoro-82M", config=cfg, model=str(path))
    return model.to("cuda").eval()


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


def _synthesize_case(ctx: SuiteContext, config: KokoroConfig, shape: str, n: int) -> Case:
    phonemes = _phonemes(config, ctx.rng, n)

    def setup(lib: Library, copies: int) -> Timed:
        seconds: list[float] = []
        times: list[float] = []
        extra: dict[str, float | str] = {}
        if lib.name == "pygpukit":
            model = _model(config)

            def run(i: int) -> Any:
                audio = model.synthesize(phonemes=phonemes, voice="random")
                seconds.append(audio.seconds)
                return audio.samples

            if shape == "kokoro-82m":
                from .text import as_token_array, phonemes_to_ids

                ids = as_token_array(phonemes_to_ids(phonemes, config.vocab))
                ms = _onnxruntime_ms(ids, random_voice(config, 1)[len(phonemes) - 1, 0])
                if ms is not None:
                    extra["onnxruntime_ms"] = round(ms, 2)
        elif lib.name == "torch":
            torch = lib.module
            kmodel = _kmodel(lib, config)
            style = torch.from_numpy(random_voice(config, 1)[len(phonemes) - 1]).to("cuda")

            def run(i: int) -> Any:
                with torch.no_grad():
                    audio = kmodel(phonemes, style, 1.0)
                torch.cuda.synchronize()
                seconds.append(len(audio) / 24000)
                return audio.float().cpu().numpy()
        else:
            raise Skip(f"{lib.name}: no Kokoro implementation")

        def measure(i: int) -> float:
            start = time.perf_counter()
            run(i)
            times.append((time.perf_counter() - start) * 1e3)
            return times[-1]

        def metrics() -> dict[str, float | str]:
            if not times:
                return extra
            audio_per_s = float(np.median(seconds)) / (float(np.median(times)) / 1e3)
            return {**extra, "audio_s_per_s": round(audio_per_s, 1)}

        return Timed(run=run, check=_check_audio(config), measure=measure, metrics=metrics)

    params: dict[str, int | float | str] = {"model": shape, "phonemes": n, "batch": 1}
    return Case(NAME, "synthesize", params, dict.fromkeys(("pygpukit", "torch"), setup),
                timing="wall")  # fmt: skip


def _batch_case(ctx: SuiteContext, config: KokoroConfig, shape: str, n: int, batch: int) -> Case:
    texts = [_phonemes(config, ctx.rng, n) for _ in range(batch)]

    def setup(lib: Library, copies: int) -> Timed:
        if lib.name != "pygpukit":
            raise Skip(f"{lib.name}: no batched Kokoro call")
        model = _model(config)
        seconds: list[float] = []
        times: list[float] = []

        def run(i: int) -> Any:
            out = model.synthesize_batch(phonemes=texts, voice="random")
            seconds.append(sum(a.seconds for a in out))
            return out[0].samples

        def measure(i: int) -> float:
            start = time.perf_counter()
            run(i)
            times.append((time.perf_counter() - start) * 1e3)
            return times[-1]

        def metrics() -> dict[str, float | str]:
            if not times:
                return {}
            return {
                "audio_s_per_s": round(
                    float(np.median(seconds)) / (float(np.median(times)) / 1e3), 1
                )
            }

        return Timed(run=run, check=_check_audio(config), measure=measure, metrics=metrics)

    params: dict[str, int | float | str] = {"model": shape, "phonemes": n, "batch": batch}
    return Case(NAME, "synthesize_batch", params, {"pygpukit": setup}, timing="wall")


def _stream_case(ctx: SuiteContext, config: KokoroConfig, shape: str, n: int) -> Case:
    text = " ".join(_phonemes(config, ctx.rng, 200) for _ in range(n // 200))

    def setup(lib: Library, copies: int) -> Timed:
        if lib.name != "pygpukit":
            raise Skip(f"{lib.name}: no streaming Kokoro call")
        model = _model(config)

        def run(i: int) -> Any:
            return next(iter(model.stream(phonemes=text, voice="random"))).samples

        def measure(i: int) -> float:
            start = time.perf_counter()
            run(i)
            return (time.perf_counter() - start) * 1e3

        return Timed(run=run, check=_check_audio(config), measure=measure)

    params: dict[str, int | float | str] = {"model": shape, "phonemes": len(text)}
    return Case(NAME, "stream_first_chunk", params, {"pygpukit": setup}, timing="wall")


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
