"""The random Whisper configurations compared with transformers, and their inputs.

Shared by ``tools/asr_reference.py`` (which stores transformers' logits under
``tests/asr/references/``) and the tests (which regenerate the same weights and inputs from the
seeds). Logits are stored at ``PROBES`` vocabulary ids drawn from the seed (a fair sample of
the 51865-wide rows that keeps the files small) plus each position's argmax over the whole row.
"""

from __future__ import annotations

import numpy as np

from pygpukit.asr import WhisperConfig

#: name -> (seed, config, runs on the CPU in CI).
CONFIGS: dict[str, tuple[int, WhisperConfig, bool]] = {
    # Multilingual vocabulary, 80 mels, 2 + 2 layers.
    "multilingual_small": (2001, WhisperConfig(
        n_mels=80, d_model=128, encoder_layers=2, encoder_heads=2, decoder_layers=2,
        decoder_heads=2, ffn_dim=512, vocab_size=51865), True),
    # large-v3's 128 mels and 51866 tokens, a turbo-like shallow decoder.
    "v3_small": (2002, WhisperConfig(
        n_mels=128, d_model=192, encoder_layers=2, encoder_heads=3, decoder_layers=1,
        decoder_heads=3, ffn_dim=768, vocab_size=51866), True),
    # large-v3's widths (1280, 20 heads of 64, MLP 5120), one layer each: GPU only.
    "large_v3_shape": (2003, WhisperConfig(
        n_mels=128, d_model=1280, encoder_layers=1, encoder_heads=20, decoder_layers=1,
        decoder_heads=20, ffn_dim=5120, vocab_size=51866), False),
}  # fmt: skip
BATCH, TOKENS, PROBES = 2, 6, 2048


def inputs(seed: int, cfg: WhisperConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(mel [B, n_mels, 3000] float32, decoder ids [B, S] int64, probe ids [PROBES])``."""
    rng = np.random.default_rng(seed + 7)
    mel = rng.uniform(-1.0, 1.5, (BATCH, cfg.n_mels, 3000)).astype(np.float32)
    ids = rng.integers(0, cfg.vocab_size, (BATCH, TOKENS))
    probes = np.sort(rng.choice(cfg.vocab_size, PROBES, replace=False))
    return mel, ids, probes
