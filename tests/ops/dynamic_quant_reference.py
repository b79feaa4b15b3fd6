"""onnxruntime's own DynamicQuantizeLinear -> DequantizeLinear, one row at a time: the definition
``pygpukit.ops.dynamic_quant`` must reproduce bit for bit (CPU tests and ``tests/ops/gpu``)."""

from __future__ import annotations

import functools

import numpy as np


@functools.cache
def _session():  # type: ignore[no-untyped-def]
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [
            helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "scale", "zero_point"]),
            helper.make_node("DequantizeLinear", ["q", "scale", "zero_point"], ["y"]),
        ],
        "quantize_dequantize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def onnxruntime_quant_dequant(x: np.ndarray, lengths: np.ndarray | None = None) -> np.ndarray:
    """Each ``x[b]`` (flattened over its first ``lengths[b]`` entries of axis 1, or all of it)
    through onnxruntime's DynamicQuantizeLinear and DequantizeLinear; the rest unchanged."""
    out = np.array(x, np.float32, copy=True)
    for b in range(x.shape[0]):
        part = out[b] if lengths is None else out[b, : int(lengths[b])]
        if part.size:
            (y,) = _session().run(None, {"x": part.reshape(-1)})
            part[...] = y.reshape(part.shape)
    return out


def awkward_rows(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random rows of different ranges: mixed signs, all positive (zero point 0), all negative
    (zero point 255), a narrow range, and a row with repeated values."""
    x = rng.standard_normal(shape).astype(np.float32)
    kinds = [lambda r: r * 3.0, np.abs, lambda r: -np.abs(r) - 0.5, lambda r: r * 1e-3 + 0.2,
             lambda r: np.round(r * 4) / 4]  # fmt: skip
    for b in range(shape[0]):
        x[b] = kinds[b % len(kinds)](x[b]).astype(np.float32)
    return x
