"""Whisper's hyperparameters: a frozen dataclass read from a model directory's config files.

Two ecosystems describe the same network differently. A Hugging Face directory has every size
in ``config.json`` (``d_model``, ``encoder_layers``, ...) and the decoding defaults in
``generation_config.json``; a CTranslate2 (faster-whisper) directory keeps only decoding lists
in ``config.json`` and the sizes in the weights' shapes. Both end here, as one
:class:`WhisperConfig`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["NAMED_CONFIGS", "SAMPLE_RATE", "WhisperConfig"]

#: Whisper's fixed audio constants: 16 kHz, a mel frame every 10 ms, 30-second windows.
SAMPLE_RATE = 16000
HOP_LENGTH = 160
CHUNK_SECONDS = 30
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000 samples in a window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in a window
#: Seconds per encoder position (the stem's second convolution halves the frame rate).
SECONDS_PER_TOKEN = 2 * HOP_LENGTH / SAMPLE_RATE  # 0.02 s


@dataclass(frozen=True)
class WhisperConfig:
    """The sizes of a Whisper encoder-decoder (OpenAI's names in parentheses).

    ``n_mels`` mel bins (80, or 128 for large-v3); ``d_model`` the width (``n_state``);
    ``encoder_layers``/``decoder_layers``, ``encoder_heads``/``decoder_heads``; ``ffn_dim``
    the MLP width (4 x ``d_model``); ``max_source_positions`` 1500 encoder positions (30 s);
    ``max_target_positions`` 448 decoder positions; ``vocab_size`` 51864 (English-only) or
    51865/51866 (multilingual). ``alignment_heads`` are the ``(layer, head)`` pairs of the
    decoder's cross-attention that follow the audio (word timestamps); ``suppress_tokens`` and
    ``begin_suppress_tokens`` the ids never sampled (and not as the first token).
    """

    n_mels: int = 80
    d_model: int = 384
    encoder_layers: int = 4
    encoder_heads: int = 6
    decoder_layers: int = 4
    decoder_heads: int = 6
    ffn_dim: int = 1536
    vocab_size: int = 51864
    max_source_positions: int = 1500
    max_target_positions: int = 448
    alignment_heads: tuple[tuple[int, int], ...] = ()
    suppress_tokens: tuple[int, ...] = ()
    begin_suppress_tokens: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in (
            "n_mels", "d_model", "encoder_layers", "encoder_heads", "decoder_layers",
            "decoder_heads", "ffn_dim", "vocab_size", "max_source_positions",
            "max_target_positions",
        ):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for heads in (self.encoder_heads, self.decoder_heads):
            if self.d_model % heads:
                raise ValueError(f"d_model {self.d_model} is not a multiple of {heads} heads")

    @property
    def head_dim(self) -> int:
        """Width of one attention head (64 in every released Whisper)."""
        return self.d_model // self.encoder_heads

    @property
    def is_multilingual(self) -> bool:
        """Multilingual checkpoints have the 51865+ token vocabulary (English-only: 51864)."""
        return self.vocab_size >= 51865

    @classmethod
    def from_hf(
        cls, cfg: dict[str, Any], generation: dict[str, Any] | None = None
    ) -> WhisperConfig:
        """From a Hugging Face ``config.json`` (and ``generation_config.json``, if any)."""
        gen = generation or {}

        def pick(key: str, default: Any = None) -> Any:
            return cfg.get(key, default)

        return cls(
            n_mels=int(pick("num_mel_bins", 80)),
            d_model=int(pick("d_model")),
            encoder_layers=int(pick("encoder_layers")),
            encoder_heads=int(pick("encoder_attention_heads")),
            decoder_layers=int(pick("decoder_layers")),
            decoder_heads=int(pick("decoder_attention_heads")),
            ffn_dim=int(pick("encoder_ffn_dim", 4 * int(pick("d_model")))),
            vocab_size=int(pick("vocab_size")),
            max_source_positions=int(pick("max_source_positions", 1500)),
            max_target_positions=int(pick("max_target_positions", 448)),
            alignment_heads=_pairs(gen.get("alignment_heads", ())),
            suppress_tokens=_ids(gen.get("suppress_tokens", cfg.get("suppress_tokens")) or ()),
            begin_suppress_tokens=_ids(
                gen.get("begin_suppress_tokens", cfg.get("begin_suppress_tokens")) or ()
            ),
            extra={"generation": gen},
        )

    def to_hf(self) -> dict[str, Any]:
        """A Hugging Face ``config.json`` for these sizes (what ``random_model`` writes)."""
        return {
            "architectures": ["WhisperForConditionalGeneration"],
            "model_type": "whisper",
            "num_mel_bins": self.n_mels,
            "d_model": self.d_model,
            "encoder_layers": self.encoder_layers,
            "encoder_attention_heads": self.encoder_heads,
            "decoder_layers": self.decoder_layers,
            "decoder_attention_heads": self.decoder_heads,
            "encoder_ffn_dim": self.ffn_dim,
            "decoder_ffn_dim": self.ffn_dim,
            "vocab_size": self.vocab_size,
            "max_source_positions": self.max_source_positions,
            "max_target_positions": self.max_target_positions,
            "activation_function": "gelu",
            "scale_embedding": False,
        }


def _pairs(value: Any) -> tuple[tuple[int, int], ...]:
    return tuple((int(a), int(b)) for a, b in value)


def _ids(value: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _named(n_mels: int, width: int, layers: int, heads: int, vocab: int) -> WhisperConfig:
    return WhisperConfig(
        n_mels=n_mels, d_model=width, encoder_layers=layers, encoder_heads=heads,
        decoder_layers=layers, decoder_heads=heads, ffn_dim=4 * width, vocab_size=vocab,
    )  # fmt: skip


#: The released sizes (OpenAI's model card), for random-weight benchmarks and tests.
NAMED_CONFIGS: dict[str, WhisperConfig] = {
    "tiny.en": _named(80, 384, 4, 6, 51864),
    "tiny": _named(80, 384, 4, 6, 51865),
    "base": _named(80, 512, 6, 8, 51865),
    "small": _named(80, 768, 12, 12, 51865),
    "medium": _named(80, 1024, 24, 16, 51865),
    "large-v2": _named(80, 1280, 32, 20, 51865),
    "large-v3": _named(128, 1280, 32, 20, 51866),
    "large-v3-turbo": WhisperConfig(
        n_mels=128,
        d_model=1280,
        encoder_layers=32,
        encoder_heads=20,
        decoder_layers=4,
        decoder_heads=20,
        ffn_dim=5120,
        vocab_size=51866,
    ),
}
