"""Reference Whisper input features from transformers' WhisperFeatureExtractor, for tests/ops.

Run where transformers is installed (CI has it not; the GPU machine has it)::

    python tools/audio_reference.py [--out tests/ops/references/whisper_log_mel.npz]

Two short test clips are synthesized here in closed form (a harmonic chirp with amplitude
modulation, a louder mixture of tones, both with deterministic integer-hash noise) and quantized
to int16, so the stored file holds exactly the samples the features were computed from. The
extractor pads every clip to 30 s, as it does for real use, and returns ``input_features``
``[batch, n_mels, 3000]``: a batch of both clips with 80 mels (each clip clamped with its own
maximum) and the first clip with 128 mels (large-v3). Saved compressed (the padded tail is
constant) with the transformers version; ``tests/ops/test_audio_whisper_reference.py`` compares
``pygpukit.ops.log_mel_spectrogram(pad_or_trim(audio))`` with it within 1e-4.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "ops" / "references" / "whisper_log_mel.npz"
SR = 16000


def hash_noise(n: int, seed: int) -> np.ndarray:
    """Uniform noise in [-1, 1) from an integer hash of the sample index (no RNG stream)."""
    offset = (seed * 0x9E3779B97F4A7C15) % (1 << 64)  # wrapping, in Python integers
    i = np.arange(n, dtype=np.uint64) + np.uint64(offset)
    i ^= i >> np.uint64(33)
    i *= np.uint64(0xFF51AFD7ED558CCD)
    i ^= i >> np.uint64(33)
    i *= np.uint64(0xC4CEB9FE1A85EC53)
    i ^= i >> np.uint64(33)
    return (i >> np.uint64(40)).astype(np.float64) / float(1 << 23) - 1.0


def test_clips() -> tuple[np.ndarray, np.ndarray]:
    """The two int16 clips: 1.2 s (chirp, quiet) and 2.0 s (tones, loud)."""
    t = np.arange(int(1.2 * SR)) / SR
    phase = 2 * np.pi * (150.0 * t + 0.5 * 2500.0 * t**2 / 1.2)
    a = sum(np.sin(k * phase) / k for k in (1, 2, 3)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
    a = 0.05 * a + 0.005 * hash_noise(t.size, 1)
    t = np.arange(int(2.0 * SR)) / SR
    b = sum(np.sin(2 * np.pi * f * t + f) for f in (220.0, 440.0, 1375.0, 5200.0))
    b = 0.2 * b * (t < 1.5) + 0.05 * hash_noise(t.size, 2)
    return tuple(np.round(np.clip(v, -1, 1) * 32767).astype(np.int16) for v in (a, b))  # type: ignore[return-value]


def as_float(pcm: np.ndarray) -> np.ndarray:
    """int16 PCM to float32 in [-1, 1), as the tests read it."""
    return pcm.astype(np.float32) / 32768.0


def _has_torch() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


def main() -> int:
    """Compute and save the reference; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    try:
        import transformers
        from transformers import WhisperFeatureExtractor
    except ImportError:
        print("transformers is needed: pip install transformers", file=sys.stderr)
        return 2
    clip_a, clip_b = test_clips()
    audio = [as_float(clip_a), as_float(clip_b)]
    f80 = WhisperFeatureExtractor(feature_size=80)
    f128 = WhisperFeatureExtractor(feature_size=128)
    feats_80 = f80(audio, sampling_rate=SR, return_tensors="np")["input_features"]
    feats_128 = f128(audio[:1], sampling_rate=SR, return_tensors="np")["input_features"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out,
        clip_a=clip_a,
        clip_b=clip_b,
        features_80=np.asarray(feats_80, dtype=np.float32),
        features_128=np.asarray(feats_128, dtype=np.float32),
        transformers_version=np.array(transformers.__version__),
        # The extractor computes with torch when it is importable, else with NumPy.
        extractor_backend=np.array("torch" if _has_torch() else "numpy"),
    )
    print(
        f"wrote {args.out} ({args.out.stat().st_size} bytes): 80 mels {feats_80.shape}, "
        f"128 mels {feats_128.shape}, transformers {transformers.__version__}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
