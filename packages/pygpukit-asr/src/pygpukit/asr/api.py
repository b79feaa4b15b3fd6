"""``asr.load`` and :class:`WhisperModel`: a model directory in, transcriptions out."""

from __future__ import annotations

import pathlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from .errors import AudioError, ModelFormatError, UnsupportedModelError
from .loading import read_model
from .whisper.audio import as_waveform, load_audio, log_mel_spectrogram
from .whisper.config import N_SAMPLES, SAMPLE_RATE, WhisperConfig
from .whisper.decoding import WindowDecoder, sot_sequence
from .whisper.model import Decoder, Encoder
from .whisper.tokenizer import WhisperTokenizer
from .whisper.transcribe import (
    Segment,
    TranscribeOptions,
    Transcription,
    run_batched,
    run_transcription,
)

__all__ = ["DTYPES", "WhisperModel", "load"]

DTYPES = {"float16": np.float16, "bfloat16": gp.bfloat16, "float32": np.float32}
DEFAULT_TEMPERATURES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def _dtype(dtype: Any) -> Any:
    key = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if key not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return DTYPES[key]


class WhisperModel:
    """A loaded Whisper model: encoder and decoder on the device, tokenizer, config.

    Made by :func:`load` (or :meth:`from_pretrained`, the same call).
    """

    def __init__(
        self, config: WhisperConfig, weights: dict[str, np.ndarray],
        tokenizer: WhisperTokenizer | None, *, dtype: Any = "float16", path: str = "",
    ) -> None:  # fmt: skip
        self.config, self.path = config, path
        self.dtype = np.dtype(_dtype(dtype))
        self.encoder = Encoder(weights, config, self.dtype)
        self.decoder = Decoder(weights, config, self.dtype)
        self.tokenizer = tokenizer
        self._windows = WindowDecoder(self.decoder, tokenizer)

    @classmethod
    def from_pretrained(
        cls, path: str | pathlib.Path, *, dtype: Any = "float16", device: int = 0
    ) -> WhisperModel:
        """Load a Hugging Face or CTranslate2 Whisper directory (see :func:`load`)."""
        return load(path, dtype=dtype, device=device)

    def __repr__(self) -> str:
        c = self.config
        kind = "multilingual" if c.is_multilingual else "English-only"
        return (
            f"WhisperModel({c.d_model} wide, {c.encoder_layers}+{c.decoder_layers} layers, "
            f"{c.n_mels} mels, {kind}, {self.dtype.name}, path={self.path!r})"
        )

    # --- the pieces -----------------------------------------------------------------------------

    def encode(self, mel: np.ndarray | GPUArray) -> GPUArray:
        """Encoder output ``[B, 1500, d_model]`` of log-mel windows ``[B, n_mels, 3000]``."""
        x = mel if isinstance(mel, GPUArray) else gp.from_numpy(np.asarray(mel, np.float32))
        if x.ndim != 3 or x.shape[1] != self.config.n_mels:
            raise ValueError(
                f"mel must be [B, {self.config.n_mels}, frames] for this model, got {x.shape}"
            )
        return self.encoder(x.astype(self.dtype).contiguous())

    def logits(self, mel: np.ndarray | GPUArray, tokens: Sequence[Sequence[int]]) -> np.ndarray:
        """Decoder logits ``[B, S, vocab]`` (float32) for token prompts ``[B, S]`` over ``mel``.

        The whole prompt in one pass (teacher forcing): what the equivalence tests compare.
        """
        ids = np.asarray(tokens, np.int32)
        feats = self.encode(mel)
        state = self._windows.state(ids.shape[0])
        self.decoder.set_audio(state, feats)
        out = self.decoder.prefill(state, ids, tuple(range(ids.shape[1]))).to_numpy()
        return np.asarray(out).transpose(1, 0, 2)

    def generate(
        self, mel: np.ndarray | GPUArray, prompt: Sequence[Sequence[int]], max_new_tokens: int,
        *, suppress: bool = True,
    ) -> np.ndarray:  # fmt: skip
        """Exactly ``max_new_tokens`` greedy ids ``[B, n]`` after ``prompt`` ``[B, S]`` per window.

        Raw decoding on the device (one CUDA graph a token, no host round trip until the end):
        no timestamp rules and no stop at ``<|endoftext|>``; ``suppress`` masks the model's
        suppressed tokens and the timestamps (when it has a tokenizer). ``transcribe`` is the
        path with Whisper's rules; this one is for scoring and benchmarks.
        """
        if (
            isinstance(max_new_tokens, bool)
            or not isinstance(max_new_tokens, int)
            or max_new_tokens < 0
        ):
            raise ValueError(f"max_new_tokens must be an int >= 0, got {max_new_tokens!r}")
        ids = np.asarray(prompt, np.int64)
        if ids.ndim != 2 or ids.shape[1] + max_new_tokens > self.config.max_target_positions:
            raise ValueError(
                f"prompt must be [B, S] with S + max_new_tokens <= "
                f"{self.config.max_target_positions}, got {ids.shape} + {max_new_tokens}"
            )
        feats = self.encode(mel)
        return self._windows.greedy(feats, ids, max_new_tokens, suppress=suppress)

    def detect_language(self, mel: np.ndarray | GPUArray) -> tuple[str, dict[str, float]]:
        """The likeliest language of a window ``[n_mels, 3000]`` and each language's probability."""
        tok = self._tok()
        if not self.config.is_multilingual or not tok.languages:
            return "en", {"en": 1.0}
        codes = list(tok.languages)
        ids = np.array([tok.languages[c] for c in codes])
        window = mel.reshape(1, *mel.shape) if isinstance(mel, GPUArray) else np.asarray(mel)[None]
        row = self.logits(window, [[tok.sot]])[0, 0, ids].astype(np.float64)
        p = np.exp(row - row.max())
        p /= p.sum()
        probs = {c: float(v) for c, v in zip(codes, p, strict=True)}
        return codes[int(np.argmax(p))], probs

    def _tok(self) -> WhisperTokenizer:
        if self.tokenizer is None:
            raise ModelFormatError(
                f"{self.path}: no tokenizer.json next to the weights; text needs one"
            )
        return self.tokenizer

    # --- transcription ----------------------------------------------------------------------------

    def transcribe(
        self,
        audio: str | pathlib.Path | np.ndarray | GPUArray,
        *,
        language: str | None = None,
        task: str = "transcribe",
        beam_size: int = 1,
        temperature: float | Sequence[float] = DEFAULT_TEMPERATURES,
        condition_on_previous_text: bool = True,
        without_timestamps: bool = False,
        word_timestamps: bool = False,
        batch_size: int = 1,
        sample_rate: int = SAMPLE_RATE,
        max_new_tokens: int | None = None,
        progress: Callable[[float, float], None] | None = None,
    ) -> Transcription:
        """Transcribe (or translate to English) ``audio``: a file path, or 16 kHz samples.

        ``language`` is a code (``"en"``, ``"ja"``, ...) or None to detect it from the first
        30 s; ``task`` ``"transcribe"`` or ``"translate"`` (multilingual models);
        ``beam_size`` > 1 runs beam search at temperature 0; ``temperature`` one value or the
        fallback sequence; ``batch_size`` > 1 decodes independent 30 s windows together.
        ``max_new_tokens`` caps the tokens of a window (default: half the decoder's
        context, 224). ``progress(done_s, total_s)`` is called after each window. Silence
        gives an empty ``text`` and no segments. Errors: :class:`AudioError` (unreadable,
        empty, wrong rank, dtype or rate, NaN), :class:`UnsupportedModelError` (unknown
        language, translation on an English-only model), ``ValueError`` for bad options.
        """
        tok = self._tok()
        opts = self._options(task, beam_size, temperature, without_timestamps, batch_size,
                             word_timestamps, condition_on_previous_text)  # fmt: skip
        cap = self._cap(max_new_tokens)
        wave, mel = self._audio(audio, sample_rate)
        language = self._language(mel, language)
        sot = tuple(sot_sequence(tok, self.config.is_multilingual, language, task))
        o = TranscribeOptions(opts[0], beam_size, condition_on_previous_text, without_timestamps,
                              batch_size, sot, word_timestamps, language, cap)  # fmt: skip
        duration = wave.size / SAMPLE_RATE
        report = (lambda done: progress(done, duration)) if progress is not None else None
        segments = run_transcription(wave, mel, self.encode, self._windows, o, report)
        return _result(segments, language, duration)

    def transcribe_many(
        self,
        audios: Sequence[str | pathlib.Path | np.ndarray | GPUArray],
        *,
        language: str | None = None,
        task: str = "transcribe",
        temperature: float | Sequence[float] = DEFAULT_TEMPERATURES,
        without_timestamps: bool = False,
        word_timestamps: bool = False,
        batch_size: int = 8,
        sample_rate: int = SAMPLE_RATE,
        max_new_tokens: int | None = None,
        progress: Callable[[float, float], None] | None = None,
    ) -> list[Transcription]:
        """Transcribe several recordings, their 30 s windows decoded together.

        ``batch_size`` windows at a time across all of them (throughput; each window on its
        own, as ``transcribe`` with ``batch_size > 1`` does). Options as :meth:`transcribe`;
        ``language=None`` detects each recording's language; ``progress(done_s, total_s)``
        counts all recordings together.
        """
        tok = self._tok()
        opts = self._options(task, 1, temperature, without_timestamps, batch_size,
                             word_timestamps, False)  # fmt: skip
        cap = self._cap(max_new_tokens)
        items = []
        for audio in audios:
            wave, mel = self._audio(audio, sample_rate)
            lang = self._language(mel, language)
            sot = tuple(sot_sequence(tok, self.config.is_multilingual, lang, task))
            o = TranscribeOptions(opts[0], 1, False, without_timestamps, batch_size, sot,
                                  word_timestamps, lang, cap)  # fmt: skip
            items.append((wave, mel, o))
        total = sum(w.size for w, _, _ in items) / SAMPLE_RATE
        report = (lambda done: progress(done, total)) if progress is not None else None
        per_file = run_batched(items, self.encode, self._windows, batch_size, report)
        return [_result(segs, o.language, w.size / SAMPLE_RATE)
                for segs, (w, _, o) in zip(per_file, items, strict=True)]  # fmt: skip

    def _audio(self, audio: Any, sample_rate: int) -> tuple[np.ndarray, GPUArray]:
        """Checked 16 kHz samples and their log-mel with 30 s of zeros appended."""
        if isinstance(audio, (str, pathlib.Path)):
            wave = load_audio(audio)
        else:
            wave = as_waveform(audio, sample_rate)
        if wave.size == 0:
            raise AudioError("the audio has no samples")
        return wave, log_mel_spectrogram(wave, self.config.n_mels, padding=N_SAMPLES)

    def _language(self, mel: GPUArray, language: str | None) -> str:
        """The language to decode in: checked, or detected from the first window."""
        if language is None:
            if not self.config.is_multilingual:
                return "en"
            return self.detect_language(mel[:, :3000].copy())[0]
        if self.config.is_multilingual:
            self._tok().language_id(language)
        elif language != "en":
            raise UnsupportedModelError(
                f"language {language!r} on an English-only model: it only transcribes English "
                "(load a multilingual checkpoint)"
            )
        return language

    def _cap(self, max_new_tokens: int | None) -> int:
        cap = self.config.max_target_positions // 2
        if max_new_tokens is None:
            return cap
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
            raise TypeError(f"max_new_tokens must be an int, got {max_new_tokens!r}")
        if not 1 <= max_new_tokens <= cap:
            raise ValueError(f"max_new_tokens must be in [1, {cap}], got {max_new_tokens}")
        return max_new_tokens

    def _options(
        self, task: str, beam_size: int, temperature: Any, without_timestamps: bool,
        batch_size: int, word_timestamps: bool, condition: bool,
    ) -> tuple[tuple[float, ...]]:  # fmt: skip
        if task not in ("transcribe", "translate"):
            raise ValueError(f"task must be 'transcribe' or 'translate', got {task!r}")
        if task == "translate" and not self.config.is_multilingual:
            raise UnsupportedModelError(
                "task='translate' on an English-only model: only multilingual Whisper models "
                "translate (load e.g. whisper-small rather than whisper-small.en)"
            )
        for name, value in (("beam_size", beam_size), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        for name, value in (("without_timestamps", without_timestamps),
                            ("condition_on_previous_text", condition),
                            ("word_timestamps", word_timestamps)):  # fmt: skip
            if not isinstance(value, bool):
                raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
        temps = (temperature,) if isinstance(temperature, (int, float)) else tuple(temperature)
        if not temps or any(isinstance(t, bool) or not isinstance(t, (int, float)) or not
                            0 <= t <= 2 or t != t for t in temps):  # fmt: skip
            raise ValueError(
                f"temperature must be a number in [0, 2] or a sequence of them, got {temperature!r}"
            )
        return (tuple(float(t) for t in temps),)


def _result(segments: list[Segment], language: str, duration: float) -> Transcription:
    text = "".join(s.text for s in segments)
    return Transcription(text=text, language=language, segments=segments, duration=duration)


def load(path: str | pathlib.Path, *, dtype: Any = "float16", device: int = 0) -> WhisperModel:
    """Load a Whisper model directory onto GPU ``device`` (or the CPU backend).

    Hugging Face directories (``config.json`` + ``model.safetensors`` + ``tokenizer.json``)
    and faster-whisper / CTranslate2 directories (``model.bin`` + ``config.json`` +
    ``tokenizer.json``, float16/float32/bfloat16 weights). ``dtype`` is the compute and
    storage dtype: ``"float16"`` (default), ``"bfloat16"`` or ``"float32"``. Raises
    :class:`ModelFormatError` (missing or malformed files, pickle checkpoints) and
    :class:`UnsupportedModelError` (int8 CTranslate2 weights, not Whisper).
    """
    _dtype(dtype)
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ValueError(f"device must be a GPU ordinal >= 0, got {device!r}")
    files = read_model(path)
    tok = WhisperTokenizer(files.tokenizer_file) if files.tokenizer_file is not None else None
    if gp.backend_name() == "cuda":
        gp.set_device(device)
    start = time.perf_counter()
    model = WhisperModel(files.config, files.weights, tok, dtype=dtype, path=str(files.path))
    model.load_seconds = time.perf_counter() - start  # type: ignore[attr-defined]
    return model
