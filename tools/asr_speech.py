"""Synthesize the English test sentences of tests/asr/ with espeak-ng and sox.

Each sentence is spoken by espeak-ng (voice ``en-us``, 120 words a minute), resampled to
16 kHz mono by sox, and stored as int16 PCM in ``tests/asr/data/<name>.npy`` next to
``sentences.json`` (name -> text). CI has neither program, so the output is committed
(about 300 kB); rerun this only to change the sentences:

    python tools/asr_speech.py [--out tests/asr/data]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import tempfile
import wave

import numpy as np

VOICE, SPEED = "en-us", "120"
SENTENCES = {
    "fox": "The quick brown fox jumps over the lazy dog.",
    "stella": "Please call Stella and ask her to bring these things with her from the store.",
    "weather": "The weather today is sunny with a light breeze from the west.",
}


def require_speech_tools() -> None:
    """Exit with the install command unless espeak-ng and sox are on PATH."""
    for tool in ("espeak-ng", "sox"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: apt install espeak-ng sox)")


def synthesize(text: str, workdir: pathlib.Path) -> np.ndarray:
    """``text`` spoken at 16 kHz as int16 samples."""
    raw, out = workdir / "raw.wav", workdir / "16k.wav"
    subprocess.run(["espeak-ng", "-v", VOICE, "-s", SPEED, "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(out)], check=True)
    with wave.open(str(out), "rb") as w:
        assert w.getframerate() == 16000 and w.getnchannels() == 1 and w.getsampwidth() == 2
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").copy()


def main() -> None:
    """Write every sentence's clip and the sentence list."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(pathlib.Path(__file__).parents[1] / "tests/asr/data"))
    args = ap.parse_args()
    require_speech_tools()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in SENTENCES.items():
            pcm = synthesize(text, pathlib.Path(tmp))
            np.save(out / f"{name}.npy", pcm)
            print(f"{name}: {pcm.size / 16000:.2f} s")
    (out / "sentences.json").write_text(json.dumps(SENTENCES, indent=2) + "\n")


if __name__ == "__main__":
    main()
