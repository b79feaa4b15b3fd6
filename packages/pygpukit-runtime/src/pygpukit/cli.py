"""The ``pygpukit`` command (also ``python -m pygpukit``): one table of subcommands.

A subcommand is one :class:`Command` in :data:`COMMANDS`: its name, a one-line
summary, and ``"module:function"`` references that are imported only when that
command runs (so ``pygpukit --help`` imports nothing heavy and a command from a
distribution that is not installed says what to install). The module gives:

- ``arguments(parser)`` (optional): adds the command's options to its
  ``argparse`` sub-parser, so ``pygpukit NAME --help`` describes them;
- ``entry(args)``: runs the command with the parsed ``argparse.Namespace`` and
  returns the exit status. A ``passthrough`` command gets the list of its raw
  arguments instead and parses them itself (``bench`` forwards to the benchmark CLI).

Adding a subcommand is one entry in :data:`COMMANDS`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclass(frozen=True)
class Command:
    """One subcommand of ``pygpukit``.

    ``entry`` and ``arguments`` are ``"module:function"`` references, imported when the
    command is chosen. ``distribution`` is what ``pip install`` gives the module, named in
    the error when it is missing.
    """

    name: str
    summary: str
    entry: str
    arguments: str | None = None
    distribution: str = "pygpukit-runtime"
    passthrough: bool = False


COMMANDS: tuple[Command, ...] = (
    Command(
        "info",
        "backend, device and where CUDA's libraries were found",
        "pygpukit.info:command",
    ),
    Command(
        "demo",
        "a short tour of the API on the current backend",
        "pygpukit.demo:command",
    ),
    Command(
        "bench",
        "the benchmark suite (python -m pygpukit.benchmark; `bench --help` for its options)",
        "pygpukit.benchmark.cli:main",
        passthrough=True,
    ),
    Command(
        "chat",
        "chat with an LLM (a model directory or .gguf file): streaming, /reset, /exit",
        "pygpukit.llm.cli:chat_command",
        arguments="pygpukit.llm.cli:chat_arguments",
        distribution="pygpukit-llm",
    ),
    Command(
        "generate",
        "continue a prompt with an LLM and print the text as it is generated",
        "pygpukit.llm.cli:generate_command",
        arguments="pygpukit.llm.cli:generate_arguments",
        distribution="pygpukit-llm",
    ),
    Command(
        "serve",
        "an OpenAI-compatible HTTP server for LLMs (continuous batching, paged KV cache)",
        "pygpukit.llm.serve.cli:serve_command",
        arguments="pygpukit.llm.serve.cli:serve_arguments",
        distribution="pygpukit-llm[serve]",
    ),
    Command(
        "transcribe",
        "transcribe audio files with Whisper (--model DIR): txt, srt, vtt or json",
        "pygpukit.asr.cli:transcribe_command",
        arguments="pygpukit.asr.cli:transcribe_arguments",
        distribution="pygpukit-asr",
    ),
    Command(
        "speak",
        "text or phonemes to speech with Kokoro (a model folder or kokoro-onnx .onnx file)",
        "pygpukit.tts.cli:speak_command",
        arguments="pygpukit.tts.cli:speak_arguments",
        distribution="pygpukit-tts",
    ),
)


class CommandUnavailableError(Exception):
    """The module of a command cannot be imported (its distribution is not installed)."""


def _resolve(reference: str, command: Command) -> Callable[..., Any]:
    module_name, _, function = reference.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CommandUnavailableError(
            f"`{command.name}` needs {command.distribution} ({exc}); "
            f"install it with: pip install {command.distribution}"
        ) from exc
    target: Callable[..., Any] = getattr(module, function)
    return target


def _program_name() -> str:
    """``pygpukit`` for the console command, ``python -m pygpukit`` otherwise."""
    launched = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return (
        "pygpukit"
        if launched.startswith("pygpukit") and not launched.endswith(".py")
        else ("python -m pygpukit")
    )


def _version() -> str:
    from . import __version__

    return f"PyGPUkit {__version__} (Python {platform.python_version()})"


def build_parser(
    chosen: str | None = None, commands: Sequence[Command] = COMMANDS, prog: str | None = None
) -> argparse.ArgumentParser:
    """The parser of the ``pygpukit`` command.

    Only the sub-parser of ``chosen`` gets its options (importing that command's module);
    the others carry just their summary, so listing commands stays cheap.
    """
    return _build(chosen, commands, prog)[0]


def _build(
    chosen: str | None, commands: Sequence[Command], prog: str | None
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    children: dict[str, argparse.ArgumentParser] = {}
    parser = argparse.ArgumentParser(
        prog=prog or _program_name(),
        description="PyGPUkit: a small, fast GPU runtime for Python.",
        epilog="Run `%(prog)s COMMAND --help` for a command's options.",
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for command in commands:
        child = sub.add_parser(
            command.name,
            help=command.summary,
            description=command.summary,
            add_help=not command.passthrough,
            prefix_chars="-" if not command.passthrough else "\0",
        )
        children[command.name] = child
        if command.passthrough:
            child.add_argument("forwarded", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
        elif command.name == chosen and command.arguments is not None:
            _resolve(command.arguments, command)(child)
    return parser, children


def _chosen(argv: Sequence[str], commands: Sequence[Command]) -> str | None:
    names = {c.name for c in commands}
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in names else None
    return None


def main(argv: Sequence[str] | None = None, commands: Sequence[Command] = COMMANDS) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the chosen command, return its status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = _chosen(args_list, commands)
    try:
        parser, children = _build(chosen, commands, None)
    except CommandUnavailableError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    try:
        args, extra = parser.parse_known_args(args_list)
        if extra:  # reported with the usage of the command they were given to
            children.get(args.command, parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    if args.command is None:
        parser.print_help()
        return 0
    command = next(c for c in commands if c.name == args.command)
    try:
        entry = _resolve(command.entry, command)
    except CommandUnavailableError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    try:
        status = entry(list(args.forwarded)) if command.passthrough else entry(args)
    except SystemExit as exc:  # a forwarded CLI that exits by itself
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return int(status or 0)
