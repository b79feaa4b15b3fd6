"""``pygpukit serve MODEL [MODEL ...]``: the OpenAI-compatible server.

Each MODEL is a model directory or ``.gguf`` file, optionally named (``chat=path/to/model``;
the default name is the file or folder name without ``.gguf``). With ``--partition
NAME=memory,compute,class`` the model NAME is loaded, and its KV cache allocated, inside a
scheduler partition of that size and QoS class, so models share one GPU with guarantees.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from typing import Any, TextIO

__all__ = ["build_engines", "serve_arguments", "serve_command"]

log = logging.getLogger("pygpukit.llm.serve")


def serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``serve`` (None when not given: the config file or the default fills it)."""
    from .config_file import DEFAULTS

    def default(key: str) -> str:
        return f"(default {DEFAULTS[key][0]})"

    parser.add_argument("models", metavar="MODEL", nargs="*",
                        help="a model directory or .gguf file, optionally NAME=PATH")  # fmt: skip
    parser.add_argument("--config", metavar="FILE.toml",
                        help="options and models from a TOML file (see docs/serve.md); "
                        "the command line wins over it")  # fmt: skip
    parser.add_argument("--host", help=default("host"))
    parser.add_argument("--port", type=int, help=default("port"))
    parser.add_argument("--max-batch", type=int,
                        help=f"requests per step at most {default('max_batch')}")  # fmt: skip
    parser.add_argument("--max-queue", type=int,
                        help=f"waiting requests at most; more are answered 429 "
                        f"{default('max_queue')}")  # fmt: skip
    parser.add_argument("--max-batched-tokens", type=int,
                        help=f"tokens per step (decode tokens + prefill chunks) "
                        f"{default('max_batched_tokens')}")  # fmt: skip
    parser.add_argument("--prefill-chunk", type=int,
                        help="prompt tokens per step at most while requests decode, so that "
                        "prefill rides beside the decode rows (0: no cap below "
                        f"--max-batched-tokens; see docs/serve.md) "
                        f"{default('prefill_chunk')}")  # fmt: skip
    parser.add_argument("--kv-memory",
                        help="KV cache size per model: a fraction of the device (or of the "
                        "model's partition, less its weights) or a size such as 4GiB "
                        f"{default('kv_memory')}")  # fmt: skip
    parser.add_argument("--max-model-len", type=int,
                        help=f"context length per request (prompt + answer) "
                        f"{default('max_model_len')}")  # fmt: skip
    parser.add_argument("--dtype", choices=["bfloat16", "float16", "float32"],
                        help=default("dtype"))  # fmt: skip
    parser.add_argument("--device", type=int, help=f"GPU ordinal {default('device')}")
    parser.add_argument("--partition", action="append", default=[], metavar="NAME=MEM,SHARE,CLASS",
                        help="run model NAME in a scheduler partition, e.g. "
                        "chat=8GiB,0.5,guaranteed (repeatable)")  # fmt: skip
    parser.add_argument("--no-prefix-caching", dest="prefix_caching", action="store_const",
                        const=False, help="do not share prompt prefixes")  # fmt: skip
    parser.add_argument("--no-lookahead", dest="lookahead", action="store_const", const=False,
                        help="plan every decode step from the host's tokens (no step queued "
                        "on the device-side ids of the previous one)")  # fmt: skip
    parser.add_argument("--batch-invariant", dest="batch_invariant", action="store_const",
                        const=True, help="a request's tokens do not depend on the batch, and "
                        "greedy answers equal CausalLM.generate's (slower decode at large "
                        "batches; no prefix caching)")  # fmt: skip
    parser.add_argument("--grace", type=float,
                        help=f"seconds running requests get to finish on SIGTERM "
                        f"{default('grace')}")  # fmt: skip
    parser.add_argument("--switch-interval", type=float, metavar="SECONDS",
                        help="the interpreter's switch interval (default: 0.0002 when a "
                        "guaranteed or burstable model shares the server with another model, "
                        "else 0.001; see docs/serve.md)")  # fmt: skip
    parser.add_argument("--log-level", help=default("log_level"))


def _named(spec: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    if sep and name and not os.path.exists(spec):
        return name, path
    base = os.path.basename(os.path.normpath(spec))
    return (base[: -len(".gguf")] if base.endswith(".gguf") else base), spec


#: What a --kv-memory fraction is a fraction of on the CPU backend (host memory is shared
#: with everything else, so it is not the machine's whole memory).
_CPU_KV_BASE = 1 << 30


def build_engines(args: argparse.Namespace, err: TextIO) -> tuple[dict[str, Any], Any]:
    """Load every model (in its partition) and make its engine; ``(engines, scheduler)``."""
    import pygpukit as gp
    from pygpukit import llm

    from ..engine import Engine
    from .partitions import create_partitions, parse_partition, parse_size
    from .qos import share_host_turns

    named = [_named(m) for m in args.models]
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        raise SystemExit(f"two models are named alike ({names}); name them: NAME=PATH")
    specs = [parse_partition(p) for p in args.partition]
    unknown = [s.name for s in specs if s.name not in names]
    if unknown:
        raise SystemExit(f"--partition names {unknown}, which are not models here ({names})")
    try:
        kv_memory = gp.memory.parse_size(args.kv_memory)  # bytes or a fraction
    except ValueError:
        raise ValueError(
            f"--kv-memory {args.kv_memory!r} is not a size (4GiB, bytes) or a fraction of the "
            "device (0.5)"
        ) from None
    scheduler: Any = None
    parts: dict[str, Any] = {}
    if specs:
        total = int(gp.get_device_info(args.device)["total_memory"])
        scheduler, parts = create_partitions(specs, total)
    engines = {}
    for name, path in named:
        part = parts.get(name)
        kv = kv_memory
        with gp.Device(args.device):
            if part is not None:
                with part:
                    model = llm.load(path, dtype=args.dtype, max_seq_len=args.max_model_len,
                                     device=args.device, progress=False)  # fmt: skip
                if isinstance(kv, float):
                    spec = next(s for s in specs if s.name == name)
                    weights = part.usage()["memory_allocated"]
                    kv = int((parse_size(spec.memory) - weights) * kv)
            else:
                model = llm.load(path, dtype=args.dtype, max_seq_len=args.max_model_len,
                                 device=args.device, progress=False)  # fmt: skip
                if isinstance(kv, float) and gp.backend_name() != "cuda":
                    kv = int(kv * _CPU_KV_BASE)
        engines[name] = Engine(
            model, name=name, max_batch=args.max_batch, max_queue=args.max_queue,
            max_batched_tokens=args.max_batched_tokens,
            prefill_chunk=args.prefill_chunk or None, kv_memory=kv, partition=part,
            prefix_caching=args.prefix_caching,
            lookahead=args.lookahead, batch_invariant=args.batch_invariant,
        )  # fmt: skip
        e = engines[name]
        err.write(
            f"{name}: {model!r}, {e.blocks.num_blocks} KV blocks "
            f"({e.cache.nbytes / 2**20:.0f} MiB)"
            f"{f', partition {part.id} ({part.qos_class.value})' if part else ''}\n"
        )
    share_host_turns(engines, {s.name: s.qos for s in specs})
    return engines, scheduler


def _warm_up(engines: dict[str, Any]) -> None:
    """Warm every model up: the first clients pay for no kernel compilation or GEMM planning.

    One short request per model, then (on the GPU, where GEMMs are planned per row count) one
    prefill step of each power-of-two token count.
    """
    import pygpukit as gp

    from ..engine import RequestParams

    for engine in engines.values():
        engine.generate([engine.model.config.bos_token_id or 0], RequestParams(max_tokens=2))
        if gp.backend_name() == "cuda":
            engine.warm_up_prefill()


def _switch_interval(args: argparse.Namespace) -> float:
    """The switch interval to serve with (:mod:`.qos`), checked before any model loads."""
    from .partitions import parse_partition
    from .qos import host_switch_interval

    try:
        classes = [parse_partition(p).qos for p in args.partition]
        return host_switch_interval(len(args.models), classes, args.switch_interval)
    except ValueError as exc:
        raise SystemExit(f"pygpukit serve: {exc}") from None


def _exit_cleanly(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def serve_command(args: argparse.Namespace, err: TextIO = sys.stderr) -> int:
    """Load the models, then serve until SIGTERM or Ctrl-C (running requests finish first)."""
    try:
        import uvicorn

        from .app import create_app
    except ImportError as exc:
        raise SystemExit(
            f"`serve` needs FastAPI and uvicorn ({exc}): pip install 'pygpukit-llm[serve]'"
        ) from None

    from .config_file import ServeConfigError, resolve_options
    from .qos import apply_switch_interval

    start = time.perf_counter()
    try:
        args = resolve_options(args)
    except ServeConfigError as exc:
        raise SystemExit(f"pygpukit serve: {exc}") from None
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    interval = _switch_interval(args)
    try:
        engines, scheduler = build_engines(args, err)
    except ValueError as exc:  # a model or options that cannot be served (say which)
        err.write(f"pygpukit serve: {exc}\n")
        raise SystemExit(1) from None
    _warm_up(engines)
    # The engine threads and the event loop share the interpreter lock (see .qos).
    apply_switch_interval(interval)
    err.write(f"pygpukit serve: interpreter switch interval {interval * 1e3:g} ms\n")
    app = create_app(engines, grace_s=args.grace)

    class _Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            if not self.should_exit:
                err.write(
                    f"pygpukit serve: ready in {time.perf_counter() - start:.1f} s on "
                    f"http://{args.host}:{args.port} (models: {', '.join(engines)})\n"
                )
                err.flush()

    config = uvicorn.Config(app, host=args.host, port=args.port, log_level=args.log_level,
                            timeout_graceful_shutdown=args.grace)  # fmt: skip
    server = _Server(config)
    # uvicorn finishes the running requests on SIGTERM, then raises the signal again: exit 0
    # then, as a graceful stop should, instead of dying by the signal.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    try:
        server.run()
    finally:
        if scheduler is not None:
            scheduler.shutdown()
    return 0
