"""Reading and writing sizes and times: ``64M`` on the command line, ``12.3 us`` in tables."""

from __future__ import annotations

import re

__all__ = ["format_bytes", "format_count", "format_rate", "format_time", "parse_size"]

_SUFFIX = {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}
_SIZE = re.compile(r"^\s*(\d+)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"4096"`` -> 4096, ``"64M"``/``"64MiB"`` -> 64 * 2**20, ``"1G"`` -> 2**30.

    Suffixes are binary (K = 1024). ``ValueError`` for anything else or zero.
    """
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"bad size {text!r}: expected an integer with an optional K/M/G suffix")
    value = int(match.group(1)) << _SUFFIX[match.group(2).lower()]
    if value <= 0:
        raise ValueError(f"bad size {text!r}: must be positive")
    return value


def format_count(n: int) -> str:
    """``1048576`` -> ``"1M"``, ``4096`` -> ``"4K"``, ``1000`` -> ``"1000"`` (exact only)."""
    for suffix, shift in (("T", 40), ("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def format_bytes(n: int) -> str:
    """``67108864`` -> ``"64MiB"``; exact multiples only, else plain bytes (``"1000B"``)."""
    count = format_count(n)
    return f"{count}iB" if count[-1].isalpha() else f"{count}B"


def format_time(ms: float | None) -> str:
    """Milliseconds as a short human string in ns, us, ms or s (``"-"`` for ``None``)."""
    if ms is None:
        return "-"
    if ms < 1e-3:
        return f"{ms * 1e6:.0f} ns"
    if ms < 1.0:
        return f"{ms * 1e3:.3g} us"
    if ms < 1e3:
        return f"{ms:.3g} ms"
    return f"{ms / 1e3:.3g} s"


def format_rate(value: float | None, unit: str | None) -> str:
    """A derived rate with its unit, three significant digits (``"-"`` when absent)."""
    if value is None or unit is None:
        return "-"
    return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
