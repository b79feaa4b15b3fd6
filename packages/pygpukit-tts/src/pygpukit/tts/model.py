"""``KokoroModel``: load a checkpoint and its voices, turn text or phonemes into speech."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from .audio import Audio
from .config import KokoroConfig
from .errors import PhonemeError, VoiceError
from .kokoro import KokoroNetwork
from .loading import Checkpoint, read_checkpoint, read_voices
from .loading.voices import check_voice
from .text import as_token_array, chunk_phonemes, phonemes_to_ids, text_to_phonemes

__all__ = ["FIRST_CHUNK", "MAX_BATCH", "KokoroModel", "load"]

#: Utterance chunks per network call in :meth:`KokoroModel.synthesize_batch`.
MAX_BATCH = 16
#: The longest first chunk of :meth:`KokoroModel.stream` (phonemes): a short first chunk is
#: the first audio sooner.
FIRST_CHUNK = 64

Voice = str | np.ndarray


class KokoroModel:
    """A Kokoro-82M text-to-speech model with its voice packs.

    Build it with :func:`load` (or :meth:`from_pretrained`, the same call).
    """

    def __init__(
        self,
        network: KokoroNetwork,
        voices: dict[str, np.ndarray],
        *,
        path: Path | None = None,
        device: int = 0,
    ) -> None:
        self.network = network
        self.config: KokoroConfig = network.config
        self._voices = dict(voices)
        self.path = path
        self.device = device

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        voices: str | Path | None = None,
        device: int = 0,
        vocoder_dtype: str = "auto",
        int8_activations: bool = False,
    ) -> KokoroModel:
        """Same as :func:`load` (the original project's name)."""
        return load(
            path, voices=voices, device=device, vocoder_dtype=vocoder_dtype,
            int8_activations=int8_activations,
        )  # fmt: skip

    def __repr__(self) -> str:
        return f"KokoroModel({self.path}, voices={self.voices})"

    # -- voices -----------------------------------------------------------------------------
    @property
    def voices(self) -> list[str]:
        """The names of the loaded voice packs."""
        return sorted(self._voices)

    def add_voice(self, name: str, table: np.ndarray) -> None:
        """Add (or replace) a voice from a ``[510, 1, 256]`` style table (e.g. a blend)."""
        self._voices[name] = check_voice(name, table, 2 * self.config.style_dim)

    def _style_table(self, voice: Voice) -> np.ndarray:
        if isinstance(voice, str):
            if voice not in self._voices:
                known = ", ".join(self.voices) or "none loaded: pass voices= to load()"
                raise VoiceError(f"unknown voice {voice!r} (voices: {known})")
            return self._voices[voice]
        return check_voice("<array>", voice, 2 * self.config.style_dim)

    # -- requests ---------------------------------------------------------------------------
    def _chunks(
        self, text: str | None, phonemes: str | None, lang: str, first_chunk: int | None = None
    ) -> list[str]:
        if (text is None) == (phonemes is None):
            raise PhonemeError("pass exactly one of text= or phonemes=")
        if phonemes is None:
            assert text is not None
            phonemes = text_to_phonemes(text, self.config.vocab, lang)
        if not phonemes.strip():
            raise PhonemeError("the phoneme string is empty; pass phonemes to speak")
        phonemes_to_ids(phonemes, self.config.vocab)  # reject unknown symbols up front
        return chunk_phonemes(phonemes, self.config.max_phonemes, first_limit=first_chunk)

    @staticmethod
    def _check_speed(speed: float) -> float:
        if not isinstance(speed, (int, float)) or not math.isfinite(speed) or speed <= 0:
            raise PhonemeError(f"speed must be a finite number > 0 (1.0 is normal), got {speed!r}")
        return float(speed)

    def _synthesize_chunks(
        self,
        chunks: Sequence[str],
        tables: Sequence[np.ndarray],
        speed: float,
        rng: np.random.Generator | None,
    ) -> list[Audio]:
        """Chunks (each with its voice table) through the network in padded batches.

        Chunks of similar length share a batch (sorted by length), at most
        :data:`MAX_BATCH` at a time; the results come back in the given order.
        """
        ids = [phonemes_to_ids(c, self.config.vocab) for c in chunks]
        order = sorted(range(len(chunks)), key=lambda i: len(ids[i]))
        results: list[Audio | None] = [None] * len(chunks)
        for start in range(0, len(order), MAX_BATCH):
            group = order[start : start + MAX_BATCH]
            refs = [tables[i][min(len(ids[i]), len(tables[i])) - 1, 0] for i in group]
            outs = self.network.batch([as_token_array(ids[i]) for i in group], refs, speed, rng)
            for i, out in zip(group, outs, strict=True):
                results[i] = Audio(out.audio, chunks[i], out.durations[1:-1], chunks=[chunks[i]])
        return [r for r in results if r is not None]

    def stream(
        self,
        text: str | None = None,
        *,
        phonemes: str | None = None,
        voice: Voice,
        speed: float = 1.0,
        seed: int | None = None,
        lang: str = "en-us",
        first_chunk: int | None = FIRST_CHUNK,
    ) -> Iterator[Audio]:
        """Yield one :class:`Audio` per chunk (≤ 510 phonemes, cut at punctuation) as it is made.

        The first chunk is cut shorter (at most ``first_chunk`` phonemes, at a punctuation mark
        or between words; None: no special first chunk) so the first audio comes quickly.
        Errors in the request (empty text, unknown symbols or voice, bad speed) are raised at
        the call, before the first chunk.
        """
        table = self._style_table(voice)
        speed = self._check_speed(speed)
        chunks = self._chunks(text, phonemes, lang, first_chunk)
        rng = np.random.default_rng(seed) if seed is not None else None

        def generate() -> Iterator[Audio]:
            for chunk in chunks:
                yield self._synthesize_chunks([chunk], [table], speed, rng)[0]

        return generate()

    def synthesize(
        self,
        text: str | None = None,
        *,
        phonemes: str | None = None,
        voice: Voice,
        speed: float = 1.0,
        seed: int | None = None,
        lang: str = "en-us",
    ) -> Audio:
        """Speech for ``text`` (through G2P) or ``phonemes`` (Kokoro's alphabet).

        ``voice`` is a loaded voice's name or a ``[510, 1, 256]`` style table; ``speed`` > 1
        speaks faster. Without ``seed`` the harmonic source is deterministic (no noise, as
        kokoro-onnx exports it); with one, KModel's source noise is drawn from that seed. Text
        longer than 510 phonemes is synthesized in chunks and concatenated.
        """
        parts = self.stream(
            text, phonemes=phonemes, voice=voice, speed=speed, seed=seed, lang=lang,
            first_chunk=None,
        )  # fmt: skip
        return _join(list(parts))

    def synthesize_batch(
        self,
        texts: Sequence[str] | None = None,
        *,
        phonemes: Sequence[str] | None = None,
        voice: Voice | Sequence[Voice],
        speed: float = 1.0,
        seed: int | None = None,
        lang: str = "en-us",
    ) -> list[Audio]:
        """Several utterances in one call (one voice for all, or one per utterance).

        Every request is validated before any is synthesized. The utterances (their chunks)
        run through the network as padded batches of up to :data:`MAX_BATCH`; each one's audio
        is what it gets alone up to float rounding, except in its last few milliseconds (the
        vocoder's STFT edges see the batch's padding instead of the signal's end).
        """
        items = list(texts) if texts is not None else list(phonemes or [])
        if not items:
            raise PhonemeError("the batch is empty; pass texts= or phonemes=")
        if texts is not None and phonemes is not None:
            raise PhonemeError("pass exactly one of texts= or phonemes=")
        voices = [voice] * len(items) if isinstance(voice, (str, np.ndarray)) else list(voice)
        if len(voices) != len(items):
            raise VoiceError(f"{len(voices)} voices for {len(items)} utterances")
        speed = self._check_speed(speed)
        tables = [self._style_table(v) for v in voices]
        plans = [
            self._chunks(item, None, lang) if texts is not None else self._chunks(None, item, lang)
            for item in items
        ]
        rng = np.random.default_rng(seed) if seed is not None else None
        flat = [c for chunks in plans for c in chunks]
        flat_tables = [t for chunks, t in zip(plans, tables, strict=True) for _ in chunks]
        audio = iter(self._synthesize_chunks(flat, flat_tables, speed, rng))
        return [_join([next(audio) for _ in chunks]) for chunks in plans]


def _join(parts: list[Audio]) -> Audio:
    """One Audio from consecutive chunks; the space joining two chunks lasts 0 frames."""
    durations: list[np.ndarray] = []
    for i, part in enumerate(parts):
        if i:
            durations.append(np.zeros(1, np.int64))
        durations.append(part.durations)
    return Audio(
        np.concatenate([p.samples for p in parts]).astype(np.float32),
        " ".join(p.phonemes for p in parts),
        np.concatenate(durations),
        chunks=[c for p in parts for c in p.chunks],
    )


def load(
    path: str | Path,
    *,
    voices: str | Path | None = None,
    device: int = 0,
    vocoder_dtype: str = "auto",
    int8_activations: bool = False,
) -> KokoroModel:
    """Load a Kokoro model and its voices.

    ``path``: an HF ``hexgrad/Kokoro-82M``-style folder (``config.json`` + safetensors with
    KModel names), a ``.safetensors`` file, or a kokoro-onnx ``.onnx`` file (fp32 or int8, read
    with the ``onnx`` package). ``voices``: a voice-pack file or folder (``.safetensors``,
    ``.npy``, ``.npz``, kokoro-onnx ``voices-*.bin``); by default the packs found beside the
    model (a ``voices/`` folder or ``voices*.bin``/``.npz``/``.safetensors`` files).
    ``vocoder_dtype``: the decoder's and generator's dtype, ``"auto"`` (bfloat16 on the GPU, where
    their convolutions run on tensor cores; float32 on the CPU backend), ``"float32"``,
    ``"bfloat16"`` or ``"float16"``; the prosody half (durations) is always float32.
    ``int8_activations``: for kokoro-onnx's int8 file only, round the prosody path's activations
    after ALBERT to 8 bits as that graph does (:mod:`pygpukit.tts.int8_activations`; docs/tts.md
    says what it changes); ``ValueError`` for a model whose graph does not round them.
    """
    if not isinstance(device, int) or device < 0:
        raise ValueError(f"device must be a GPU ordinal >= 0, got {device!r}")
    checkpoint = read_checkpoint(path)
    style = 2 * checkpoint.config.style_dim
    tables: dict[str, np.ndarray] = {}
    if voices is not None:
        tables.update(read_voices(Path(voices), style))
    else:
        for source in checkpoint.voice_sources:
            tables.update(read_voices(source, style))
    network = _network_type(checkpoint, int8_activations)(
        checkpoint.config, checkpoint.state, device=device, vocoder_dtype=vocoder_dtype
    )
    return KokoroModel(network, tables, path=checkpoint.path, device=device)


def _network_type(checkpoint: Checkpoint, int8_activations: bool) -> type[KokoroNetwork]:
    """The network class for ``load(..., int8_activations=...)``."""
    if not int8_activations:
        return KokoroNetwork
    if not checkpoint.int8_activations:
        raise ValueError(
            f"int8_activations=True reproduces the 8-bit activations of kokoro-onnx's int8 "
            f"graph, but {checkpoint.path} does not quantize its activations; leave it False"
        )
    from .int8_activations import Int8ActivationNetwork

    return Int8ActivationNetwork
