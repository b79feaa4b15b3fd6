"""Make the real-speech clip of the audio-op tests: ``tests/ops/references/speech_espeak.flac``.

    python tools/audio_speech_fixture.py [--out PATH]

Runs ``espeak-ng`` (the Debian package; CI does not need it, the clip is stored) on one English
sentence, keeps its 22.05 kHz 16-bit mono output as FLAC (lossless, ~60 KB). The tests load it
with ``pygpukit.ops.load_audio`` and compare the audio ops on it with librosa and soxr.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "ops" / "references" / "speech_espeak.flac"
SENTENCE = "Hello, this is a short test of speech on the graphics card."


def main() -> int:
    """Synthesize and store the clip; return the exit code."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        print("espeak-ng is needed: apt-get install espeak-ng", file=sys.stderr)
        return 2
    import soundfile as sf

    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        subprocess.run([espeak, "-v", "en-us", "-s", "160", "-w", str(wav), SENTENCE], check=True)
        data, rate = sf.read(wav, dtype="int16")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sf.write(args.out, data, rate, format="FLAC", subtype="PCM_16")
    seconds = data.shape[0] / rate
    print(f"wrote {args.out}: {seconds:.2f} s at {rate} Hz, {args.out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
