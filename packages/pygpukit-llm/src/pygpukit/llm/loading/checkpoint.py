"""The format-independent view of a model checkpoint: config, tensor names, load to the GPU."""

from __future__ import annotations

import abc
import pathlib
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from pygpukit.array import GPUArray
from pygpukit.dtypes import normalize

from ..errors import CheckpointError

__all__ = ["Checkpoint", "TensorInfo", "freeze", "progress_bar", "resolve_dtype"]

_MODEL_DTYPES = ("float32", "float16", "bfloat16")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a checkpoint, under its Hugging Face name.

    ``shape`` is the shape ``load`` returns (row-major, HF order); ``stored`` names the stored
    element type (``"bfloat16"``, ``"float16"``, ``"float32"``, or a GGUF quant type such as
    ``"Q4_1"``); ``nbytes`` is its size in the file.
    """

    name: str
    shape: tuple[int, ...]
    stored: str
    nbytes: int


def resolve_dtype(dtype: Any) -> np.dtype[Any]:
    """The NumPy dtype of a model dtype given as a name or dtype: float32, float16 or bfloat16."""
    dt = normalize(dtype)
    if dt.name not in _MODEL_DTYPES:
        raise ValueError(
            f"dtype must be float32, float16 or bfloat16 (a model's weight dtype), got {dtype!r}"
        )
    return dt


def freeze(array: GPUArray) -> GPUArray:
    """Mark a loaded weight read-only so an in-place write raises instead of corrupting it."""
    array.setflags(write=False)
    return array


def progress_bar(total_bytes: int, desc: str, enabled: bool) -> Any:
    """A tqdm byte counter shown on a TTY after one second (so short loads print nothing).

    Returns an object with ``update(n)`` and ``close()`` in every case.
    """
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is a dependency; a trimmed install only loses the bar
        enabled = False
        tqdm = None
    if not enabled or tqdm is None or not sys.stderr.isatty():
        return _NoBar()
    return tqdm(total=total_bytes, desc=desc, unit="B", unit_scale=True, delay=1.0, leave=False)


class _NoBar:
    def update(self, n: int) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


class Checkpoint(abc.ABC):
    """An opened checkpoint: a Hugging Face SafeTensors directory or a llama.cpp GGUF file.

    Use as a context manager (or call :meth:`close`): the files stay memory-mapped until then.
    Tensor names are always the Hugging Face ones (``model.layers.0.self_attn.q_proj.weight``);
    a GGUF file's names are mapped, and a tied ``lm_head.weight`` is absent.
    """

    #: ``"safetensors"`` or ``"gguf"``.
    format: str
    #: The file or directory given to :func:`open_checkpoint`.
    path: pathlib.Path
    #: A Hugging Face ``config.json``-style dict (for GGUF, built from the metadata).
    hf_config: dict[str, Any]
    #: ``generation_config.json`` (or the GGUF equivalent: eos/bos ids), ``{}`` when absent.
    generation_config: dict[str, Any]

    @abc.abstractmethod
    def tensor_infos(self) -> dict[str, TensorInfo]:
        """Every tensor of the checkpoint by HF name, in file order, without reading data."""

    def tensor_names(self) -> list[str]:
        """The HF names of the checkpoint's tensors, in file order."""
        return list(self.tensor_infos())

    @abc.abstractmethod
    def _load_one(self, name: str, dtype: np.dtype[Any]) -> GPUArray:
        """Upload tensor ``name`` and convert it to ``dtype`` on the device."""

    def load(
        self,
        dtype: Any = "bfloat16",
        *,
        progress: bool = True,
        names: Iterable[str] | None = None,
    ) -> dict[str, GPUArray]:
        """Upload tensors to the current device as read-only GPUArrays of ``dtype``.

        ``names`` (HF names) selects tensors (all by default; a name not in the checkpoint is a
        :class:`~pygpukit.llm.errors.CheckpointError`). Raw bytes are uploaded and converted
        (or dequantized) on the device. ``progress`` shows a tqdm bar on a TTY when the load
        takes over a second. On an error, nothing stays allocated.
        """
        dt = resolve_dtype(dtype)
        infos = self.tensor_infos()
        wanted = list(infos) if names is None else list(names)
        for name in wanted:
            if name not in infos:
                raise CheckpointError(
                    f"{self.path}: no tensor {name!r} in the checkpoint "
                    f"({len(infos)} tensors; e.g. {', '.join(list(infos)[:3])})",
                    path=str(self.path),
                    tensor=name,
                )
        bar = progress_bar(sum(infos[n].nbytes for n in wanted), self.path.name, progress)
        out: dict[str, GPUArray] = {}
        try:
            for name in wanted:
                out[name] = freeze(self._load_one(name, dt))
                bar.update(infos[name].nbytes)
        except BaseException:
            out.clear()  # drop the partial result so its device memory returns to the pool
            raise
        finally:
            bar.close()
        return out

    @abc.abstractmethod
    def close(self) -> None:
        """Unmap the files. Loaded GPUArrays stay valid."""

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        arch = (self.hf_config.get("architectures") or ["?"])[0]
        n = len(self.tensor_infos())
        return f"<{type(self).__name__} {self.format} {arch} {n} tensors at {self.path}>"
