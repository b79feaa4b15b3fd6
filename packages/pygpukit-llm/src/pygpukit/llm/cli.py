"""``pygpukit chat MODEL`` and ``pygpukit generate MODEL PROMPT``: the LLM subcommands.

Registered in the runtime's command table (``pygpukit.cli.COMMANDS``) by module path, so the
runtime never imports this package until one of these commands runs. Each command has an
``*_arguments(parser)`` that adds its options and an entry that takes the parsed namespace.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["chat_arguments", "chat_command", "generate_arguments", "generate_command"]


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", help="a model directory or a .gguf file")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--max-seq-len", type=int, default=None, help="context to preallocate")
    parser.add_argument("--device", type=int, default=0, help="GPU ordinal (default 0)")
    s = parser.add_argument_group("sampling")
    s.add_argument("--max-new-tokens", type=int, default=256)
    s.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    s.add_argument("--top-k", type=int, default=0, help="0 keeps every token")
    s.add_argument("--top-p", type=float, default=1.0)
    s.add_argument("--min-p", type=float, default=0.0)
    s.add_argument("--repetition-penalty", type=float, default=1.0)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--stop", action="append", default=None, help="a stop string (repeatable)")


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "min_p": args.min_p,
        "repetition_penalty": args.repetition_penalty,
        "seed": args.seed,
        "stop": args.stop,
    }


def _load(args: argparse.Namespace, err: TextIO) -> Any:
    from . import load

    model = load(args.model, dtype=args.dtype, max_seq_len=args.max_seq_len, device=args.device)
    if model.tokenizer is None:
        raise SystemExit(f"{args.model}: no tokenizer files next to the weights; text needs one")
    err.write(f"{model!r}\n")
    return model


def _stats_line(stats: Any) -> str:
    return (
        f"[{stats.generated_tokens} tokens, {stats.decode_tokens_per_s:.1f} tok/s, "
        f"first token {stats.time_to_first_token_s * 1e3:.0f} ms]"
    )


def _print_stream(pieces: Any, out: TextIO) -> None:
    for piece in pieces:
        out.write(piece)
        out.flush()
    out.write("\n")


def generate_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``generate``."""
    _model_arguments(parser)
    parser.add_argument("prompt", metavar="PROMPT", help="the text to continue")


def generate_command(
    args: argparse.Namespace, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """Stream the continuation of PROMPT to stdout; the stats go to stderr."""
    model = _load(args, err)
    _print_stream(model.stream(args.prompt, **_sampling(args)), out)
    err.write(_stats_line(model.last_stats) + "\n")
    return 0


def chat_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``chat``."""
    _model_arguments(parser)
    parser.add_argument("--system", default=None, help="a system message to start with")


def chat_command(
    args: argparse.Namespace,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    read: Callable[[str], str] = input,
) -> int:
    """An interactive chat: each answer streams, then its tokens/s; ``/reset``, ``/exit``."""
    model = _load(args, err)
    start = [{"role": "system", "content": args.system}] if args.system else []
    messages = list(start)
    err.write("type a message; /reset forgets the conversation, /exit (or Ctrl-D) quits\n")
    while True:
        try:
            line = read("> ").strip()
        except (EOFError, KeyboardInterrupt):
            out.write("\n")
            return 0
        if line == "/exit":
            return 0
        if line == "/reset":
            messages = list(start)
            err.write("(conversation reset)\n")
            continue
        if not line:
            continue
        messages.append({"role": "user", "content": line})
        try:
            reply = model.chat(messages, stream=True, **_sampling(args))
        except ValueError as exc:  # too long for the context, a bad sampling value
            messages.pop()
            err.write(f"error: {exc} (/reset starts over)\n")
            continue
        pieces: list[str] = []
        for piece in reply:
            pieces.append(piece)
            out.write(piece)
            out.flush()
        out.write("\n")
        messages.append({"role": "assistant", "content": "".join(pieces)})
        err.write(_stats_line(model.last_stats) + "\n")
