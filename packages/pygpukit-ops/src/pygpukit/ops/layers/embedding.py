"""The token embedding layer."""

from __future__ import annotations

from typing import Any

import numpy as np

from pygpukit.array import GPUArray

from .. import _common as c
from .. import activations as act_ops
from . import _checks

_ID_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


class Embedding:
    """Rows of ``table`` ``[V, D]`` at integer ids: ``emb(ids)`` is ``[*ids.shape, D]``.

    ids are int32 or int64 on the device; an id outside ``[0, V)`` gives a row of zeros on the
    GPU (checking would need a synchronisation) and raises ``IndexError`` on the CPU backend.
    """

    def __init__(self, table: GPUArray) -> None:
        self.table = c.check_array(table, "table", ndim=2)
        self.num_embeddings, self.dim = (int(d) for d in table.shape)
        self.dtype = table.dtype
        self._plans: _checks.PlanDict[tuple[int, int], Any] = _checks.PlanDict()

    def __call__(self, ids: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
        """The rows at ``ids`` (any shape); ``out`` receives them (nothing allocated then)."""
        c.check_array(ids, "ids", dtypes=_ID_DTYPES)
        y = _checks.output(out, (*ids.shape, self.dim), self.dtype)
        n = ids.size
        if n == 0 or self.dim == 0:
            return y
        key = (n, y.data_ptr % 16)  # the copy word size depends on the alignment
        plan = self._plans.get(key)
        if plan is None:
            plan = act_ops.embedding_plan(ids, self.table, y)
            self._plans[key] = plan
        plan(ids, int(ids.dtype == np.int64), self.table, y)
        return y

    def __repr__(self) -> str:
        return f"Embedding({self.num_embeddings}, {self.dim}, dtype={self.dtype})"
