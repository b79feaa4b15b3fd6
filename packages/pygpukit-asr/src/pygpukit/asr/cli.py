"""``pygpukit transcribe FILE... --model DIR``: the speech-recognition subcommand.

Registered in the runtime's command table (``pygpukit.cli.COMMANDS``) by module path, so the
runtime imports this package only when the command runs.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any, TextIO

from .formats import FORMATS, render

__all__ = ["transcribe_arguments", "transcribe_command"]


def transcribe_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``transcribe``."""
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help="audio files (wav, flac, ogg, mp3)"
    )
    parser.add_argument(
        "--model", required=True, help="a Whisper directory (Hugging Face or faster-whisper)"
    )
    parser.add_argument("--language", default=None, help="language code (default: detect)")
    parser.add_argument("--task", default="transcribe", choices=["transcribe", "translate"])
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=1, help="30 s windows decoded together")
    parser.add_argument(
        "--temperature", type=float, default=None, help="one temperature (no fallback)"
    )
    parser.add_argument("--without-timestamps", action="store_true")
    parser.add_argument("--dtype", default="float16", choices=["float16", "bfloat16", "float32"])
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--output-format", default="txt", choices=FORMATS)
    parser.add_argument(
        "--output-dir", default=None, help="write FILE-stem.FORMAT there (default: stdout)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")


def _bar(total: float, name: str, err: TextIO, enabled: bool) -> Any:
    from tqdm import tqdm

    fmt = "{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total:.1f} s [{elapsed}<{remaining}]"
    return tqdm(total=round(total, 1), desc=name, unit="s", file=err, disable=not enabled,
                bar_format=fmt)  # fmt: skip


def transcribe_command(
    args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Transcribe each FILE; print (or write) it in the chosen format. 1 if a file failed."""
    from . import ASRError, load

    model = load(args.model, dtype=args.dtype, device=args.device)
    err.write(f"{model!r}\n")
    options: dict[str, Any] = {"language": args.language, "task": args.task,
                               "beam_size": args.beam_size, "batch_size": args.batch_size,
                               "without_timestamps": args.without_timestamps}  # fmt: skip
    if args.temperature is not None:
        options["temperature"] = args.temperature
    folder = pathlib.Path(args.output_dir) if args.output_dir else None
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
    status = 0
    for name in args.files:
        bar = None

        def progress(done: float, total: float, name: str = name) -> None:
            nonlocal bar
            if bar is None:
                bar = _bar(total, pathlib.Path(name).name, err, not args.no_progress)
            bar.update(round(done, 1) - bar.n)

        try:
            result = model.transcribe(name, progress=progress, **options)
        except (ASRError, ValueError) as exc:
            err.write(f"{name}: {exc}\n")
            status = 1
            continue
        finally:
            if bar is not None:
                bar.close()
        text = render(result, args.output_format)
        if folder is None:
            out.write(text)
        else:
            target = folder / f"{pathlib.Path(name).stem}.{args.output_format}"
            target.write_text(text, encoding="utf-8")
            err.write(f"{name} -> {target}\n")
    return status
