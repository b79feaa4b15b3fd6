"""Whisper's log-mel frontend against transformers' WhisperFeatureExtractor.

The reference (``references/whisper_log_mel.npz``) is made by ``tools/audio_reference.py``:
two synthesized int16 clips and the extractor's ``input_features`` (each clip padded to 30 s;
80 mels for the batch of both, 128 mels for the first). The same check runs on the GPU in
``gpu/test_gpu_audio.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pygpukit as gp
from pygpukit import ops

REFERENCE = Path(__file__).resolve().parent / "references" / "whisper_log_mel.npz"


def load_reference() -> dict[str, np.ndarray]:
    with np.load(REFERENCE) as data:
        return {k: data[k] for k in data.files}


def clip(pcm: np.ndarray) -> np.ndarray:
    return pcm.astype(np.float32) / 32768.0


def test_reference_is_not_degenerate() -> None:
    ref = load_reference()
    feats = ref["features_80"]
    assert feats.shape == (2, 80, 3000) and ref["features_128"].shape == (1, 128, 3000)
    # Audio frames vary; each item's floor (max - 8, scaled) fills its padded tail.
    assert feats[:, :, :100].std() > 0.1
    for item in feats:
        np.testing.assert_allclose(item[:, -1], item.max() - 2.0, atol=1e-5)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_log_mel_spectrogram_equals_whisper_feature_extractor(n_mels: int) -> None:
    ref = load_reference()
    want = ref[f"features_{n_mels}"]
    clips = [clip(ref["clip_a"]), clip(ref["clip_b"])][: want.shape[0]]
    padded = [ops.pad_or_trim(gp.from_numpy(c)) for c in clips]
    batch = gp.stack(padded) if len(padded) > 1 else padded[0].reshape(1, -1)
    got = ops.log_mel_spectrogram(batch, n_mels).to_numpy()
    assert got.shape == want.shape
    assert np.abs(got - want).max() < 1e-4
