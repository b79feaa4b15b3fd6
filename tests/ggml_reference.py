"""ggml block formats written from the GGUF spec, element by element, for the tests.

``quantize`` packs float32 values into Q8_0, Q4_0 or Q4_1 blocks (llama.cpp's reference
rounding) and ``dequantize_reference`` reads blocks back one element at a time with
``struct``: slow and plain on purpose, so it shares nothing with the vectorized NumPy path
of ``pygpukit.ops.dequantize`` or its CUDA kernel.

Block layouts (32 elements each): Q8_0 = fp16 d, 32 x int8 q, x = q*d; Q4_0 = fp16 d,
16 bytes, x = (q - 8)*d; Q4_1 = fp16 d, fp16 m, 16 bytes, x = q*d + m. In the 4-bit types
byte j holds element j in its low nibble and element j + 16 in its high nibble.
"""

from __future__ import annotations

import struct

import numpy as np

BLOCK = 32
BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}


def _f16(x: float) -> float:
    return float(np.float16(x))


def quantize(values: np.ndarray, kind: str) -> np.ndarray:
    """Pack float32 ``values`` (size a multiple of 32) into ``kind`` blocks; uint8 bytes."""
    x = np.asarray(values, np.float32).reshape(-1, BLOCK)
    out = bytearray()
    for block in x:
        if kind == "Q8_0":
            amax = float(np.abs(block).max())
            d = amax / 127.0
            q = np.zeros(BLOCK, np.int8) if d == 0 else np.round(block / d).astype(np.int8)
            out += struct.pack("<e", d) + q.tobytes()
        elif kind == "Q4_0":
            peak = float(block[np.abs(block).argmax()])
            d = peak / -8.0
            inv = 0.0 if d == 0 else 1.0 / d
            q = np.minimum(15, (block * inv + 8.5).astype(np.int32)).astype(np.uint8)
            out += struct.pack("<e", d) + bytes((q[:16] | (q[16:] << 4)).tolist())
        elif kind == "Q4_1":
            lo, hi = float(block.min()), float(block.max())
            d = (hi - lo) / 15.0
            inv = 0.0 if d == 0 else 1.0 / d
            q = np.minimum(15, ((block - lo) * inv + 0.5).astype(np.int32)).astype(np.uint8)
            out += struct.pack("<ee", d, lo) + bytes((q[:16] | (q[16:] << 4)).tolist())
        else:
            raise ValueError(kind)
    return np.frombuffer(bytes(out), np.uint8).copy()


def dequantize_reference(raw: np.ndarray, kind: str) -> np.ndarray:
    """float32 values of the ``kind`` blocks in ``raw``, element by element."""
    data = bytes(np.asarray(raw, np.uint8))
    size = BLOCK_BYTES[kind]
    out: list[float] = []
    for start in range(0, len(data), size):
        blk = data[start : start + size]
        if kind == "Q8_0":
            (d,) = struct.unpack_from("<e", blk, 0)
            for j in range(BLOCK):
                (q,) = struct.unpack_from("<b", blk, 2 + j)
                out.append(float(np.float32(q) * np.float32(d)))
            continue
        (d,) = struct.unpack_from("<e", blk, 0)
        m = struct.unpack_from("<e", blk, 2)[0] if kind == "Q4_1" else 0.0
        qs = blk[4:] if kind == "Q4_1" else blk[2:]
        for j in range(BLOCK):
            q = qs[j] & 0x0F if j < 16 else qs[j - 16] >> 4
            if kind == "Q4_0":
                out.append(float(np.float32(q - 8) * np.float32(d)))
            else:
                out.append(float(np.float32(np.float32(q) * np.float32(d)) + np.float32(m)))
    return np.asarray(out, np.float32)
