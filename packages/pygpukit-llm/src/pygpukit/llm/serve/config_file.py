"""``pygpukit serve --config serve.toml``: the server's options and models in a TOML file.

::

    port = 8000
    max_batch = 64
    kv_memory = 0.6

    [models.chat]
    path = "Qwen2.5-0.5B-Instruct"          # relative paths: from the file's folder
    partition = "8GiB,0.25,guaranteed"       # or {memory = "8GiB", compute = 0.25,
                                             #     class = "guaranteed"}
    [models.batch]
    path = "Llama-3.1-8B-Instruct"
    partition = { memory = "56GiB", compute = 0, class = "besteffort" }

Top-level keys are the command-line options with underscores (``max_batched_tokens``,
``prefix_caching = false``, ...). What the command line gives wins over the file: an option,
a ``MODEL`` (added to the file's), a ``--partition`` (replacing the file's for that model).
Unknown keys and wrong types are errors that name the key (:class:`ServeConfigError`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import LLMError

__all__ = ["DEFAULTS", "ServeConfigError", "load_config", "resolve_options"]


class ServeConfigError(LLMError, ValueError):
    """A ``serve`` config file that cannot be used (unreadable, unknown key, wrong type)."""


#: Every option of ``serve``: its default and the TOML types it takes.
DEFAULTS: dict[str, tuple[Any, tuple[type, ...]]] = {
    "host": ("127.0.0.1", (str,)),
    "port": (8000, (int,)),
    "max_batch": (64, (int,)),
    "max_queue": (256, (int,)),
    "max_batched_tokens": (512, (int,)),
    # The engine's DEFAULT_PREFILL_CHUNK (not imported: the engine pulls in the GPU runtime);
    # 0: no cap (prompts take the whole step budget even while requests decode).
    "prefill_chunk": (0, (int,)),
    "kv_memory": ("0.5", (str, int, float)),
    "max_model_len": (4096, (int,)),
    "dtype": ("bfloat16", (str,)),
    "device": (0, (int,)),
    # None: the engine decides (on, except in batch-invariant mode, which cannot share prefixes).
    "prefix_caching": (None, (bool,)),
    "lookahead": (True, (bool,)),
    "batch_invariant": (False, (bool,)),
    "grace": (30.0, (int, float)),
    "switch_interval": (None, (int, float)),
    "log_level": ("info", (str,)),
}

_PARTITION_KEYS = ("memory", "compute", "class")


def _check_type(where: str, value: Any, types: tuple[type, ...]) -> None:
    # TOML booleans are Python bools, which are ints too: keep them apart.
    ok = isinstance(value, types) and (bool in types or not isinstance(value, bool))
    if not ok:
        names = " or ".join(t.__name__ for t in types)
        raise ServeConfigError(f"{where} must be {names}, got {value!r}")


def _partition(name: str, value: Any, source: str) -> str:
    """A model's ``partition`` entry as the ``--partition`` text ``NAME=MEM,SHARE,CLASS``."""
    where = f"{source}: models.{name}.partition"
    if isinstance(value, str):
        return f"{name}={value}"
    if not isinstance(value, Mapping):
        raise ServeConfigError(
            f"{where} must be a string 'MEM,SHARE,CLASS' or a table with "
            f"{', '.join(_PARTITION_KEYS)}; got {value!r}"
        )
    unknown = sorted(set(value) - set(_PARTITION_KEYS))
    missing = [k for k in _PARTITION_KEYS if k not in value]
    if unknown or missing:
        raise ServeConfigError(
            f"{where} needs exactly the keys {', '.join(_PARTITION_KEYS)}"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
            + (f"; missing: {', '.join(missing)}" if missing else "")
        )
    _check_type(f"{where}.memory", value["memory"], (str, int))
    _check_type(f"{where}.compute", value["compute"], (int, float))
    _check_type(f"{where}.class", value["class"], (str,))
    return f"{name}={value['memory']},{value['compute']},{value['class']}"


def load_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a config file.

    Returns the options it sets (by option name), ``models`` (``NAME=PATH`` texts, paths
    relative to the file's folder made absolute) and ``partitions`` (``NAME=MEM,SHARE,CLASS``
    texts).
    """
    try:
        import tomllib
    except ImportError:  # Python 3.10
        raise ServeConfigError("--config needs Python 3.11 or newer (tomllib)") from None
    file = Path(path)
    try:
        with open(file, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ServeConfigError(f"cannot read the config file {str(file)!r}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ServeConfigError(f"{file} is not valid TOML: {exc}") from None
    allowed = [*DEFAULTS, "models"]
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ServeConfigError(
            f"{file}: unknown key(s) {', '.join(unknown)}; the keys are {', '.join(allowed)}"
        )
    out: dict[str, Any] = {"models": [], "partitions": []}
    for key, value in data.items():
        if key != "models":
            _check_type(f"{file}: {key}", value, DEFAULTS[key][1])
            out[key] = value
    models = data.get("models", {})
    if not isinstance(models, Mapping):
        raise ServeConfigError(f"{file}: models must be tables [models.NAME], got {models!r}")
    for name, entry in models.items():
        if not isinstance(entry, Mapping) or not isinstance(entry.get("path"), str):
            raise ServeConfigError(f'{file}: [models.{name}] needs path = "..." (a string)')
        extra = sorted(set(entry) - {"path", "partition"})
        if extra:
            raise ServeConfigError(
                f"{file}: [models.{name}] has unknown key(s) {', '.join(extra)}; "
                "the keys are path, partition"
            )
        model_path = Path(os.path.expanduser(entry["path"]))
        if not model_path.is_absolute():
            model_path = file.parent / model_path
        out["models"].append(f"{name}={model_path}")
        if "partition" in entry:
            out["partitions"].append(_partition(name, entry["partition"], str(file)))
    return out


def resolve_options(args: argparse.Namespace) -> argparse.Namespace:
    """Fill ``args`` from ``args.config`` (if any) and the defaults; the command line wins.

    Raises :class:`ServeConfigError` for a bad file and when no model is given at all.
    """
    file = load_config(args.config) if getattr(args, "config", None) else {}
    for key, (default, _) in DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, file.get(key, default))
    args.kv_memory = str(args.kv_memory)
    cli_models = list(args.models or [])
    args.models = list(file.get("models", [])) + cli_models
    if not args.models:
        raise ServeConfigError("give at least one MODEL, or a --config file with [models.NAME]")
    cli_parts = list(args.partition or [])
    overridden = {p.partition("=")[0] for p in cli_parts}
    kept = [p for p in file.get("partitions", []) if p.partition("=")[0] not in overridden]
    args.partition = kept + cli_parts
    return args
