"""``pygpukit speak "text" --model DIR --voice NAME -o out.wav``: the TTS subcommand.

Registered in the runtime's command table (``pygpukit.cli.COMMANDS``) by module path, so the
runtime imports this package only when ``speak`` runs.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

__all__ = ["speak_arguments", "speak_command"]


def speak_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``speak``."""
    parser.add_argument("text", metavar="TEXT", nargs="?", help="the text to speak")
    parser.add_argument("--phonemes", help="Kokoro phonemes to speak instead of TEXT")
    parser.add_argument(
        "--model", required=True, help="a Kokoro folder, .safetensors or kokoro-onnx .onnx file"
    )
    parser.add_argument("--voices", default=None, help="voice-pack file or folder")
    parser.add_argument(
        "--voice", required=True, help="voice name (an unknown one lists the voices there are)"
    )
    parser.add_argument("-o", "--output", default="out.wav", help="output sound file")
    parser.add_argument("--speed", type=float, default=1.0, help="> 1 speaks faster")
    parser.add_argument("--lang", default="en-us", help="G2P language for TEXT (default en-us)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the source noise")
    parser.add_argument("--device", type=int, default=0, help="GPU ordinal (default 0)")


def speak_command(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Synthesize TEXT (or --phonemes) and write it to --output."""
    out = out or sys.stdout
    err = err or sys.stderr
    from . import load
    from .errors import TTSError

    if (args.text is None) == (args.phonemes is None):
        err.write("speak: pass TEXT or --phonemes (one of them)\n")
        return 2
    try:
        model = load(args.model, voices=args.voices, device=args.device)
        start = time.perf_counter()
        audio = model.synthesize(
            args.text,
            phonemes=args.phonemes,
            voice=args.voice,
            speed=args.speed,
            seed=args.seed,
            lang=args.lang,
        )
        elapsed = time.perf_counter() - start
        path = audio.save(args.output)
    except TTSError as exc:
        err.write(f"speak: {exc}\n")
        return 1
    out.write(f"{path}: {audio.seconds:.2f} s of audio in {elapsed:.2f} s\n")
    return 0
