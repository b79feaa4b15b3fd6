"""``python -m pygpukit info | demo | bench [args...]``."""

from __future__ import annotations

import sys

_USAGE = """usage: python -m pygpukit COMMAND [ARGS]

commands:
  info    backend, device and where CUDA's libraries were found
  demo    a short tour of the API on the current backend
  bench   the benchmark suite (python -m pygpukit.benchmark; --help for options)
"""


def _bench(rest: list[str]) -> int:
    """Run ``python -m pygpukit.benchmark`` with ``rest`` as its arguments."""
    import runpy

    saved = sys.argv
    sys.argv = ["python -m pygpukit.benchmark", *rest]
    try:
        runpy.run_module("pygpukit.benchmark", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> int:
    """Dispatch a subcommand; returns the exit status."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(_USAGE)
        return 0
    command, rest = args[0], args[1:]
    if command == "info":
        from .info import main as run
    elif command == "demo":
        from .demo import main as run
    elif command == "bench":
        return _bench(rest)
    else:
        sys.stderr.write(f"unknown command {command!r}\n\n{_USAGE}")
        return 2
    return int(run(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
