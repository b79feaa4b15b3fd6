"""Token sampling on the GPU: greedy argmax and temperature / top-k / top-p / min-p sampling.

Logits [B, V] (float32, float16 or bfloat16) stay on the device; the result is
an int32 [B] array of token ids, also on the device (download it when the host
needs it). One kernel launch per call, no synchronization, no host round trip.

Semantics (those of Hugging Face ``generate``): the repetition penalty divides
positive logits of tokens in ``prev_tokens`` by the penalty and multiplies
negative ones; then the logits are divided by the temperature; then top-k keeps
the k largest, top-p keeps the smallest set (largest first) of what top-k kept
whose probability reaches ``top_p``, min-p keeps tokens whose probability is at
least ``min_p`` times the largest. Ties at a threshold are all kept.
Temperature 0 (or below) is greedy: the argmax of the penalized logits, lowest
index on ties. NaN logits count as -inf.

Random numbers come from Philox4x32-10 keyed by the :class:`Generator`'s seed,
with the generator's offset and the row index as the counter: a fixed seed
reproduces, each call advances the offset by one. The CPU backend uses the same
Philox numbers, so CPU and GPU draw the same uniform per row; they pick the same
token except when the uniform lands within rounding of a boundary between two
tokens (the GPU sums probabilities in 32.32 fixed point, the CPU in float64; on
the GPU a token less than 2^-32 as likely as the top one is never drawn).
"""

from __future__ import annotations

import secrets
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

import pygpukit as gp
from pygpukit import validation
from pygpukit.array import GPUArray

from . import _common as c
from ._constants import SAMPLING_THREADS
from ._kernel_loader import kernel
from ._plan import per_backend
from .reference import sampling as reference

__all__ = ["Generator", "argmax", "sample"]

_THREADS = SAMPLING_THREADS
#: Shared memory for the bitmask of ``prev_tokens``: the 48 KiB a block gets without opt-in,
#: less the kernel's static ~5 KiB, rounded down.
_MASK_BYTES_MAX = 40 * 1024
#: Largest vocabulary with a repetition penalty (one bit per token in shared memory).
MAX_PENALTY_VOCAB = _MASK_BYTES_MAX * 8
_U64 = (1 << 64) - 1


class Generator:
    """A counter-based random stream for :func:`sample` (Philox4x32-10).

    ``Generator(seed)`` reproduces the same draws for the same sequence of calls;
    each :func:`sample` call uses the current :attr:`offset` and advances it by
    one, so a generator is never "consumed" by the device and nothing is copied.
    ``seed=None`` picks a random seed; a seed is an integer in ``[0, 2**64)`` (others are a
    ``ValueError``, never wrapped). Thread-safe.
    """

    def __init__(self, seed: int | None = None, *, offset: int = 0) -> None:
        if seed is None:
            seed = secrets.randbits(64)
        # Out-of-range seeds are refused rather than wrapped: -1 and 2**64 - 1 would otherwise
        # silently give the same stream.
        self._seed = validation.seed(seed, "seed", "Generator")
        offset = validation.index(offset, "offset", "Generator")
        if not 0 <= offset <= _U64:
            raise ValueError(f"Generator: offset must be in [0, 2**64), got {offset}")
        self._offset = offset
        self._lock = threading.Lock()

    @property
    def seed(self) -> int:
        """The 64-bit key of the stream."""
        return self._seed

    @property
    def offset(self) -> int:
        """The counter the next :func:`sample` call will use."""
        return self._offset

    def next_offset(self) -> int:
        """Return the current offset and advance it by one (what :func:`sample` does)."""
        with self._lock:
            value = self._offset
            self._offset = (value + 1) & _U64
            return value

    def __repr__(self) -> str:
        return f"Generator(seed={self._seed}, offset={self._offset})"


_default: Generator | None = None
_default_lock = threading.Lock()


def _default_generator() -> Generator:
    global _default
    with _default_lock:
        if _default is None:
            _default = Generator()
        return _default


def philox4x32_10(counter: np.ndarray, key: tuple[int, int]) -> np.ndarray:
    """Philox4x32-10 of ``counter`` [n, 4] (uint32) under ``key`` (two uint32): [n, 4] uint32.

    The NumPy twin of the kernel's generator (same constants, rounds and word order).
    """
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    mask = np.uint64(0xFFFFFFFF)
    ctr = np.asarray(counter, dtype=np.uint64).copy()
    k0, k1 = int(key[0]), int(key[1])
    for _ in range(10):
        p0 = ctr[:, 0] * m0
        p1 = ctr[:, 2] * m1
        hi0, lo0 = p0 >> np.uint64(32), p0 & mask
        hi1, lo1 = p1 >> np.uint64(32), p1 & mask
        ctr = np.stack(
            [hi1 ^ ctr[:, 1] ^ np.uint64(k0), lo1, hi0 ^ ctr[:, 3] ^ np.uint64(k1), lo0], axis=1
        )
        k0 = (k0 + 0x9E3779B9) & 0xFFFFFFFF
        k1 = (k1 + 0xBB67AE85) & 0xFFFFFFFF
    return ctr.astype(np.uint32)


def uniforms(seed: int, offset: int, rows: int) -> np.ndarray:
    """The uint64 draws (a uniform times 2**64) the kernel makes for ``rows`` rows."""
    counter = np.zeros((rows, 4), dtype=np.uint64)
    counter[:, 0] = offset & 0xFFFFFFFF
    counter[:, 1] = (offset >> 32) & 0xFFFFFFFF
    counter[:, 2] = np.arange(rows, dtype=np.uint64)
    r = philox4x32_10(counter, (seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF))
    return (r[:, 0].astype(np.uint64) << np.uint64(32)) | r[:, 1].astype(np.uint64)


def _check_logits(logits: Any) -> tuple[int, int]:
    c.check_array(logits, "logits", dtypes=c.FLOAT_DTYPES, ndim=2)
    b, v = (int(d) for d in logits.shape)
    if v == 0:
        raise ValueError("logits has an empty vocabulary (V = 0)")
    # On both backends, so that they agree: the kernels index a row with 32-bit ints.
    c.check_int32("logits", V=v)
    return b, v


def argmax(logits: GPUArray, *, out: GPUArray | None = None) -> GPUArray:
    """Greedy decoding: the index of the largest logit of each row, int32 [B].

    ``logits`` is [B, V] float32/float16/bfloat16; ties go to the lowest index,
    NaN counts as -inf. ``out`` (int32 [B]) receives the ids: nothing is allocated, as a
    decode loop needs.
    """
    b, v = _check_logits(logits)
    c.check_out(out, (b,), gp.int32)
    return _argmax(logits, b, v, out)


def _store(ids: np.ndarray, out: GPUArray | None) -> GPUArray:
    """CPU backend: the ids as a new int32 array, or written into ``out``."""
    if out is None:
        return c.to_array(ids, np.int32)
    c.write_into(out, ids)
    return out


def _argmax_numpy(logits: GPUArray, b: int, v: int, out: GPUArray | None) -> GPUArray:
    return _store(reference.argmax(c.host(logits)), out)


def _argmax_cuda(logits: GPUArray, b: int, v: int, out: GPUArray | None) -> GPUArray:
    out = c.result(out, (b,), gp.int32)
    if b:
        kernel("sampling", f"argmax_{c.kernel_suffix(logits.dtype)}").launch(
            b, _THREADS, (logits, out, v)
        )
    return out


_argmax = per_backend(cpu=_argmax_numpy, cuda=_argmax_cuda)


def _row_param(
    value: Any, name: str, b: int, dtype: Any, lo: float, hi: float | None
) -> tuple[float | int, GPUArray | None]:
    """A per-row parameter: a scalar in [lo, hi], or a [B] device array of ``dtype``."""
    if isinstance(value, GPUArray):
        c.check_array(value, name, dtypes=[dtype], ndim=1)
        c.check_shape(value, name, (b,))
        return 0, value
    kind = int if np.dtype(dtype).kind == "i" else float
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a number or a [B] GPUArray of {np.dtype(dtype)}")
    if kind is int and not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    scalar = kind(value)
    if not (scalar >= lo and (hi is None or scalar <= hi)):
        bound = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return scalar, None


def sample(
    logits: GPUArray,
    *,
    temperature: float | GPUArray = 1.0,
    top_k: int | GPUArray = 0,
    top_p: float | GPUArray = 1.0,
    min_p: float = 0.0,
    repetition_penalty: float = 1.0,
    prev_tokens: GPUArray | None = None,
    generator: Generator | None = None,
    out: GPUArray | None = None,
) -> GPUArray:
    """Draw one token per row of ``logits`` [B, V]; returns int32 [B] on the device.

    - ``temperature``: > 0 divides the logits; 0 is greedy (:func:`argmax` after
      the penalty). A scalar or a float32 [B] array (per row; <= 0 is greedy).
    - ``top_k``: keep the k most likely tokens; 0 (or >= V) keeps all. Scalar or int32 [B].
    - ``top_p``: keep the smallest most-likely set of what top-k kept whose
      probability reaches ``top_p``; 1 keeps all, 0 keeps the top token. Scalar or float32 [B].
    - ``min_p``: keep tokens at least ``min_p`` times as likely as the top one (0: off).
    - ``repetition_penalty`` (> 0, 1 = off) with ``prev_tokens`` int32 [B, P]: the
      tokens already generated per row; entries outside [0, V) (e.g. -1 padding)
      are ignored. A penalty other than 1 without ``prev_tokens`` is a ``ValueError``.
      With a penalty, V may be at most ``MAX_PENALTY_VOCAB``.
    - ``generator``: a :class:`Generator` (seed + offset); None uses a process-wide
      one with a random seed. Each call advances its offset by one.
    - ``out``: an int32 [B] array that receives the ids (none is allocated).

    Per-row arrays are read by the kernel: their values are not validated.
    """
    b, v = _check_logits(logits)
    temp, temps = _row_param(temperature, "temperature", b, gp.float32, 0.0, None)
    k, ks = _row_param(top_k, "top_k", b, gp.int32, 0, None)
    p, ps = _row_param(top_p, "top_p", b, gp.float32, 0.0, 1.0)
    if isinstance(min_p, GPUArray):  # the kernel has no per-row min_p: do not drop it silently
        raise TypeError("min_p must be a number (one min_p for every row)")
    mp, _ = _row_param(min_p, "min_p", b, gp.float32, 0.0, 1.0)
    if isinstance(repetition_penalty, GPUArray):
        raise TypeError("repetition_penalty must be a number (one penalty for every row)")
    pen, _ = _row_param(repetition_penalty, "repetition_penalty", b, gp.float32, 0.0, None)
    if pen == 0.0:
        raise ValueError("repetition_penalty must be > 0 (1.0 turns it off)")
    if pen != 1.0 and prev_tokens is None:
        raise ValueError(
            f"repetition_penalty={pen} needs prev_tokens (the int32 [B, P] tokens to penalize);"
            " pass them, or leave repetition_penalty at 1.0"
        )
    n_prev = 0
    if prev_tokens is not None:
        c.check_array(prev_tokens, "prev_tokens", dtypes=[gp.int32], ndim=2)
        if int(prev_tokens.shape[0]) != b:
            raise ValueError(
                f"prev_tokens must be [B, P] with B = {b} (rows of logits), "
                f"got {tuple(prev_tokens.shape)}"
            )
        n_prev = int(prev_tokens.shape[1])
        c.check_int32("prev_tokens", P=n_prev)
    use_penalty = prev_tokens is not None and n_prev > 0 and pen != 1.0
    if use_penalty and v > MAX_PENALTY_VOCAB:
        raise ValueError(
            f"a repetition penalty supports V <= {MAX_PENALTY_VOCAB} tokens, got V = {v}"
        )
    if generator is not None and not isinstance(generator, Generator):
        raise TypeError(
            f"generator must be a pygpukit.ops.Generator, got {validation.describe(generator)}"
        )
    c.check_out(out, (b,), gp.int32)
    gen = generator if generator is not None else _default_generator()
    offset = gen.next_offset()

    args = _SampleArgs(temp, temps, k, ks, p, ps, float(mp), float(pen), n_prev, use_penalty)
    return _sample(logits, b, v, args, prev_tokens, gen.seed, offset, out)


@dataclass(frozen=True)
class _SampleArgs:
    """The checked sampling parameters: scalars, or per-row arrays where given."""

    temp: float | int
    temps: GPUArray | None
    k: float | int
    ks: GPUArray | None
    p: float | int
    ps: GPUArray | None
    min_p: float
    penalty: float
    n_prev: int
    use_penalty: bool


def _sample_numpy(
    logits: GPUArray,
    b: int,
    v: int,
    a: _SampleArgs,
    prev_tokens: GPUArray | None,
    seed: int,
    offset: int,
    out: GPUArray | None,
) -> GPUArray:
    def host(x: GPUArray | None, scalar: float | int) -> Any:
        return scalar if x is None else c.host(x)

    tokens = reference.sample(
        c.host(logits),
        host(a.temps, a.temp),
        host(a.ks, a.k),
        host(a.ps, a.p),
        a.min_p,
        a.penalty,
        c.host(prev_tokens) if a.use_penalty and prev_tokens is not None else None,
        uniforms(seed, offset, b),
    )
    return _store(tokens, out)


def _sample_cuda(
    logits: GPUArray,
    b: int,
    v: int,
    a: _SampleArgs,
    prev_tokens: GPUArray | None,
    seed: int,
    offset: int,
    out: GPUArray | None,
) -> GPUArray:
    out = c.result(out, (b,), gp.int32)
    if b == 0:
        return out
    mask_bytes = ((v + 31) // 32) * 4 if a.use_penalty else 0
    kernel("sampling", f"sample_{c.kernel_suffix(logits.dtype)}")(
        logits,
        out,
        v,
        float(a.temp),
        a.temps if a.temps is not None else 0,
        int(min(a.k, v)),  # k >= V keeps all, as 0 does: clamped to fit the kernel's int
        a.ks if a.ks is not None else 0,
        float(a.p),
        a.ps if a.ps is not None else 0,
        a.min_p,
        a.penalty,
        prev_tokens if a.use_penalty else 0,
        a.n_prev if a.use_penalty else 0,
        seed,
        offset,
        grid=b,
        block=_THREADS,
        shared_mem=mask_bytes,
    )
    return out


_sample = per_backend(cpu=_sample_numpy, cuda=_sample_cuda)
