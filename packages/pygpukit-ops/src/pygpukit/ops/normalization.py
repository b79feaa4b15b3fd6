"""pygpukit.ops.normalization (being written; see docs/ops.md)."""

from __future__ import annotations

__all__: list[str] = []
