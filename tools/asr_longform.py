"""Synthesize the long-form test speech of tests/asr/ with espeak-ng and sox.

Eight distinct English sentences (from the first Harvard sentence lists, IEEE 1969, public
domain) are spoken by espeak-ng (voice ``en-us``, 120 words a minute) and resampled to 16 kHz
mono by sox, as ``tools/asr_speech.py`` does. To keep the repository small the clips are stored
one after another as 8-bit mu-law codes (mu = 255: about 38 dB signal to quantization noise,
telephone quality, plenty for speech recognition) in ``tests/asr/data/longform.npz`` (``codes``
int8, and ``offsets``: where each clip starts and ends; compressed), the texts in
``tests/asr/data/longform.json``. ``tests/asr/asr_clips.py`` decodes them and lays them out,
with the three clips of ``tools/asr_speech.py``, with silences into recordings of any length
(a minute on the CPU, ten on the GPU), knowing where the synthesizer's voice starts and stops
in each. CI and the GPU machine have no espeak-ng, so the output is committed; rerun this only
to change the sentences:

    python tools/asr_longform.py [--out tests/asr/data]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from asr_speech import require_speech_tools, synthesize

SENTENCES = [
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well.",
    "Rice is often served in round bowls.",
    "The box was thrown beside the parked truck.",
    "Four hours of steady work faced us.",
    "The boy was there when the sun rose.",
    "Help the woman get back to her feet.",
]
MU = 255.0


def mu_law(pcm: np.ndarray) -> np.ndarray:
    """int16 samples as 8-bit mu-law codes (sign and log-magnitude in -127..127)."""
    x = pcm.astype(np.float64) / 32768.0
    y = np.sign(x) * np.log1p(MU * np.abs(x)) / np.log1p(MU)
    return np.round(y * 127.0).astype(np.int8)


def main() -> None:
    """Write the clips and their texts."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parents[1] / "tests/asr/data"))
    args = ap.parse_args()
    require_speech_tools()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    clips = []
    with tempfile.TemporaryDirectory() as tmp:
        for text in SENTENCES:
            clips.append(synthesize(text, pathlib.Path(tmp)))
    offsets = np.cumsum([0] + [c.size for c in clips]).astype(np.int64)
    codes = mu_law(np.concatenate(clips))
    np.savez_compressed(out / "longform.npz", codes=codes, offsets=offsets, mu=np.float64(MU))
    (out / "longform.json").write_text(json.dumps(SENTENCES, indent=1) + "\n")
    print(f"{len(clips)} clips, {offsets[-1] / 16000:.1f} s of speech")


if __name__ == "__main__":
    main()
