"""The ops package's tuning knobs, read from the environment once into one :class:`OpsConfig`.

Every environment variable the ops read is listed in :data:`ENV`, registered with the runtime's
:mod:`pygpukit.env` (so it is validated and documented with the others, docs/errors.md) and read
here only, through ``env.choice``, the first time an op plans a launch (never per call). Later
changes to the environment have no effect until :func:`reload`; :func:`set` and
:func:`override` (a ``with`` block) set knobs from code.
Launch plans made under one configuration are dropped when it changes, so the next call plans
again; a layer keeps the plans it already holds.

=============================  ===========================================  =========
variable                       values                                        default
=============================  ===========================================  =========
``PYGPUKIT_GEMV_VARIANT``      ``auto`` (simt for one row, mma for more),    ``auto``
                               ``simt``, ``mma``
``PYGPUKIT_ATTENTION_KERNEL``  ``auto`` (wgmma_persist on SM 9.0 for head  ``auto``
                               dims 64 and 128, else mma), ``mma``,
                               ``wgmma_pipe``, ``wgmma_tma``,
                               ``wgmma_persist``
``PYGPUKIT_DECODE_KERNEL``     ``tma2`` (bulk2 where tensor maps cannot      ``tma2``
                               take the head dim or block size, mma2
                               before SM 9.0), ``tma3``, ``bulk2``,
                               ``bulk3``, ``mma2``, ``mma``, ``simt``
``PYGPUKIT_DECODE_COMBINE``    ``fused`` (the last split CTA merges the      ``fused``
                               partials), ``kernel`` (a second kernel)
``PYGPUKIT_CONV_KERNEL``       ``auto`` (the tap-major implicit GEMM for     ``auto``
                               16-bit types), ``igemm`` (the same),
                               ``mma_64x64``, ``mma_64x128``,
                               ``mma_128x64`` (the channel-major one),
                               ``gemm`` (im2col + matmul)
``PYGPUKIT_DEPENDENT_LAUNCH``  ``on`` (programmatic dependent launch of the  ``on``
                               kernels written for it, SM 9.0+), ``off``
``PYGPUKIT_LSTM_KERNEL``       ``auto`` (one launch per sequence on SM 9.0+  ``auto``
                               for hidden sizes 8 to 256, else one per
                               step), ``step``
=============================  ===========================================  =========

An unknown value in the environment raises :class:`~pygpukit.errors.EnvironmentVariableError`
(a ``ValueError``) naming the variable and the valid values; in :func:`set` a ``ValueError``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pygpukit import env

__all__ = ["ENV", "OpsConfig", "get", "override", "reload", "set"]

#: Field of :class:`OpsConfig` -> (environment variable, accepted values; the first is the default).
ENV: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemv_variant": ("PYGPUKIT_GEMV_VARIANT", ("auto", "simt", "mma")),
    "attention_kernel": (
        "PYGPUKIT_ATTENTION_KERNEL",
        ("auto", "mma", "wgmma_pipe", "wgmma_tma", "wgmma_persist"),
    ),
    # tma2 is the default: on an H100 at 8K cached tokens, batch 8, 96.9 us against bulk2's
    # 99.9 and PyTorch's 97.6 (paged 101.1 against 104.5).
    "decode_kernel": (
        "PYGPUKIT_DECODE_KERNEL",
        ("tma2", "tma3", "bulk2", "bulk3", "mma2", "mma", "simt"),
    ),
    "decode_combine": ("PYGPUKIT_DECODE_COMBINE", ("fused", "kernel")),
    "conv_kernel": (
        "PYGPUKIT_CONV_KERNEL",
        ("auto", "igemm", "mma_64x64", "mma_64x128", "mma_128x64", "gemm"),
    ),
    "dependent_launch": ("PYGPUKIT_DEPENDENT_LAUNCH", ("on", "off")),
    "lstm_kernel": ("PYGPUKIT_LSTM_KERNEL", ("auto", "step")),
}


_DESCRIPTIONS = {
    "gemv_variant": "Which GEMV vector kernel ops.gemv / ops.linear run for up to 8 rows: simt "
    "(one row) or mma (more) under auto, or one of them pinned for every M.",
    "attention_kernel": "Which prefill attention kernel runs: auto (wgmma_persist on SM 9.0 for "
    "head dims 64 and 128, else mma), mma everywhere, or one Hopper kernel (wgmma_pipe, "
    "wgmma_tma, wgmma_persist) where auto would pick one.",
    "decode_kernel": "Which decode attention kernel runs: tma2 (tensor cores, two K/V stages "
    "filled by tensor copies of whole swizzled tiles; bulk2 for head dims other than 64, 128 and "
    "256 or paged blocks the copies cannot box, mma2 before SM 9.0), tma3 (three such stages), "
    "bulk2 / bulk3 (two / three stages filled by one bulk copy per cached row; mma2 before SM "
    "9.0, bulk2 where three do not fit), mma2 (two stages filled by cp.async), mma "
    "(one stage) or simt (CUDA cores).",
    "decode_combine": "How split decode attention merges its per-split partial results: fused "
    "(the last CTA of each sequence and head group to finish merges them, one launch) or kernel "
    "(a second, combine kernel).",
    "conv_kernel": "Which kernel runs conv1d / conv_transpose1d: auto or igemm (the tap-major "
    "tensor-core implicit GEMM for 16-bit types, the transposed convolution as interleaved "
    "ordinary ones; float32 and what it cannot take on the matmul path), a tile of the older "
    "channel-major implicit GEMM pinned (float32 too, as 3xTF32), or gemm (im2col + matmul).",
    "dependent_launch": "Whether the kernels written for it (ops.decode_linear, the split "
    "decode attention and its combine) are launched "
    "with programmatic dependent launch on SM 9.0+: their weight loads start while the previous "
    "kernel drains (on), or plain launches (off).",
    "lstm_kernel": "Which kernel runs ops.lstm's recurrence: auto (the sequence kernel, one "
    "launch per call with the recurrent weights held on chip, on SM 9.0+ for hidden sizes 8 to "
    "256; the step kernel elsewhere) or step (one launch per time step everywhere).",
}
for _field, (_name, _choices) in ENV.items():
    env.register(
        _name,
        "choice",
        allowed=_choices,
        default=_choices[0],
        description=_DESCRIPTIONS[_field],
        read="first launch plan (ops.config)",
        package="pygpukit-ops",
        on_invalid="raise",
    )


@dataclass(frozen=True)
class OpsConfig:
    """The knobs every launch plan reads (see the module docstring for their meaning)."""

    gemv_variant: str = "auto"
    attention_kernel: str = "auto"
    decode_kernel: str = "tma2"
    decode_combine: str = "fused"
    conv_kernel: str = "auto"
    dependent_launch: str = "on"
    lstm_kernel: str = "auto"

    def __post_init__(self) -> None:
        for name, (variable, choices) in ENV.items():
            value = getattr(self, name)
            if value not in choices:
                raise ValueError(
                    f"{name} ({variable}) must be one of {', '.join(choices)}, got {value!r}"
                )


_lock = threading.Lock()
_current: OpsConfig | None = None
_listeners: list[Callable[[], None]] = []


def _from_environment() -> OpsConfig:
    values: dict[str, Any] = {name: env.choice(variable) for name, (variable, _) in ENV.items()}
    return OpsConfig(**values)


def get() -> OpsConfig:
    """The configuration in force: read from the environment on the first call, then kept."""
    current = _current
    if current is None:
        with _lock:
            current = _current if _current is not None else _set(_from_environment())
    return current


def _set(cfg: OpsConfig) -> OpsConfig:
    global _current
    changed = _current is not None and _current != cfg
    _current = cfg
    if changed:
        for listener in list(_listeners):
            listener()
    return cfg


def reload() -> OpsConfig:
    """Read the environment again (after changing it in-process); drops stale launch plans.

    Raises ``ValueError`` for an unknown value, keeping the configuration in force.
    """
    cfg = _from_environment()
    with _lock:
        return _set(cfg)


def set(**knobs: str) -> OpsConfig:
    """Set knob values (``gemv_variant="mma"``, ...) for the process; returns the previous config.

    Unknown names raise ``TypeError``, unknown values ``ValueError`` (nothing changes then).
    ``set(**dataclasses.asdict(previous))`` restores the previous configuration.
    """
    before = get()
    cfg = dataclasses.replace(before, **knobs)
    with _lock:
        _set(cfg)
    return before


@contextlib.contextmanager
def override(**knobs: str) -> Iterator[OpsConfig]:
    """Use these knob values inside a ``with`` block (as :func:`set`, restored on exit).

    Not for use from several threads at once: the configuration is process-wide.
    """
    before = set(**knobs)
    try:
        yield get()
    finally:
        with _lock:
            _set(before)


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener()`` whenever the configuration changes (plan caches clear themselves)."""
    _listeners.append(listener)
