"""Kokoro's hyper-parameters (``config.json`` of ``hexgrad/Kokoro-82M``) and its phoneme vocabulary.

The defaults are Kokoro-82M's. A model directory's ``config.json`` overrides them; files that
carry no config (kokoro-onnx's ONNX exports) use the defaults and the vocabulary shipped with
this package (Kokoro v1.0's 114 phoneme symbols, ids 1..177; id 0 pads both ends).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .errors import ModelFileError

__all__ = ["KokoroConfig", "default_vocab"]

SAMPLE_RATE = 24000
STYLE_TABLE_ROWS = 510  # a voice pack has one style vector per phoneme count 1..510


def default_vocab() -> dict[str, int]:
    """Kokoro v1.0's phoneme symbol -> token id table (shipped with this package)."""
    text = resources.files("pygpukit.tts").joinpath("vocab.json").read_text(encoding="utf-8")
    vocab: dict[str, int] = json.loads(text)
    return vocab


@dataclass(frozen=True)
class KokoroConfig:
    """The shape of a Kokoro model: ALBERT, prosody predictor, text encoder and iSTFTNet."""

    n_token: int = 178
    hidden_dim: int = 512
    style_dim: int = 128
    n_layer: int = 3
    max_dur: int = 50
    text_encoder_kernel_size: int = 5
    albert_hidden: int = 768
    albert_heads: int = 12
    albert_intermediate: int = 2048
    albert_layers: int = 12
    albert_embedding: int = 128
    max_position: int = 512
    upsample_rates: tuple[int, ...] = (10, 6)
    upsample_kernel_sizes: tuple[int, ...] = (20, 12)
    upsample_initial_channel: int = 512
    resblock_kernel_sizes: tuple[int, ...] = (3, 7, 11)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 3, 5), (1, 3, 5), (1, 3, 5))
    n_fft: int = 20
    hop_length: int = 5
    vocab: dict[str, int] = field(default_factory=default_vocab, compare=False)

    @property
    def max_phonemes(self) -> int:
        """The longest phoneme string one forward pass takes (two positions go to padding)."""
        return min(self.max_position - 2, STYLE_TABLE_ROWS)

    @property
    def frame_samples(self) -> int:
        """Output samples per duration frame (600, 25 ms at 24 kHz, for Kokoro-82M)."""
        return 2 * math.prod(self.upsample_rates) * self.hop_length

    def to_dict(self) -> dict[str, Any]:
        """The config in ``config.json``'s layout (KModel's field names)."""
        return {
            "n_token": self.n_token,
            "hidden_dim": self.hidden_dim,
            "style_dim": self.style_dim,
            "n_layer": self.n_layer,
            "max_dur": self.max_dur,
            "text_encoder_kernel_size": self.text_encoder_kernel_size,
            "plbert": {
                "hidden_size": self.albert_hidden,
                "num_attention_heads": self.albert_heads,
                "intermediate_size": self.albert_intermediate,
                "num_hidden_layers": self.albert_layers,
                "embedding_size": self.albert_embedding,
                "max_position_embeddings": self.max_position,
            },
            "istftnet": {
                "upsample_rates": list(self.upsample_rates),
                "upsample_kernel_sizes": list(self.upsample_kernel_sizes),
                "upsample_initial_channel": self.upsample_initial_channel,
                "resblock_kernel_sizes": list(self.resblock_kernel_sizes),
                "resblock_dilation_sizes": [list(d) for d in self.resblock_dilation_sizes],
                "gen_istft_n_fft": self.n_fft,
                "gen_istft_hop_size": self.hop_length,
            },
            "vocab": dict(self.vocab),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, path: str | None = None) -> KokoroConfig:
        """A config from the ``config.json`` of a Kokoro checkpoint (KModel's field names)."""
        try:
            plbert = data.get("plbert", {})
            ist = data.get("istftnet", {})
            vocab = data.get("vocab") or default_vocab()
            return cls(
                n_token=int(data.get("n_token", 178)),
                hidden_dim=int(data.get("hidden_dim", 512)),
                style_dim=int(data.get("style_dim", 128)),
                n_layer=int(data.get("n_layer", 3)),
                max_dur=int(data.get("max_dur", 50)),
                text_encoder_kernel_size=int(data.get("text_encoder_kernel_size", 5)),
                albert_hidden=int(plbert.get("hidden_size", 768)),
                albert_heads=int(plbert.get("num_attention_heads", 12)),
                albert_intermediate=int(plbert.get("intermediate_size", 2048)),
                albert_layers=int(plbert.get("num_hidden_layers", 12)),
                albert_embedding=int(plbert.get("embedding_size", 128)),
                max_position=int(plbert.get("max_position_embeddings", 512)),
                upsample_rates=tuple(ist.get("upsample_rates", (10, 6))),
                upsample_kernel_sizes=tuple(ist.get("upsample_kernel_sizes", (20, 12))),
                upsample_initial_channel=int(ist.get("upsample_initial_channel", 512)),
                resblock_kernel_sizes=tuple(ist.get("resblock_kernel_sizes", (3, 7, 11))),
                resblock_dilation_sizes=tuple(
                    tuple(d) for d in ist.get("resblock_dilation_sizes", ((1, 3, 5),) * 3)
                ),
                n_fft=int(ist.get("gen_istft_n_fft", 20)),
                hop_length=int(ist.get("gen_istft_hop_size", 5)),
                vocab={str(k): int(v) for k, v in vocab.items()},
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise ModelFileError(
                f"{path or 'config'}: not a Kokoro config.json ({exc}); expected the fields of "
                "hexgrad/Kokoro-82M's config (plbert, istftnet, hidden_dim, style_dim, vocab...)",
                path=path,
            ) from exc

    @classmethod
    def from_file(cls, path: Path) -> KokoroConfig:
        """Read a ``config.json``."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ModelFileError(
                f"{path}: cannot read it as JSON ({exc}); pass a Kokoro config.json",
                path=str(path),
            ) from exc
        if not isinstance(data, dict):
            raise ModelFileError(f"{path}: a JSON object was expected", path=str(path))
        return cls.from_dict(data, path=str(path))
