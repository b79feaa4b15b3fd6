"""kokoro-onnx model files (``kokoro-v1.0.onnx``, ``kokoro-v1.0.int8.onnx``) as a KModel state dict.

The export is a traced ``KModel`` wrapped as ``encoder`` (bert, bert_encoder, predictor,
text_encoder) and ``decoder.decoder`` (KModel's decoder). Weight norm is already folded into
the exported convolutions, many weights lost their names (``onnx::MatMul_6547``,
``/decoder/decoder/decode.0/Mul_output_0``) and identical zero points were merged, so names are
taken from the graph: each weight is found as an input of the node that uses it (ConvInteger,
MatMulInteger, DynamicQuantizeLSTM, Gather + DequantizeLinear, Conv, ConvTranspose, MatMul),
whose node name is the PyTorch module path. The int8 file's quantized weights are dequantized
here, ``(q - zero_point) * scale``; whether the graph also rounds its activations to 8 bits
(``DynamicQuantizeLinear`` / ``DynamicQuantizeLSTM`` nodes) is reported by :func:`read_onnx`, and
:mod:`pygpukit.tts.int8_activations` can reproduce part of that rounding.

Parameters the export dropped because they held their untrained defaults (the affine weight
and bias of AdaIN's instance norm) are filled in with 1 and 0.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFileError

__all__ = ["fill_untrained_defaults", "module_path", "read_onnx", "read_onnx_state_dict"]

_GRAPH_INPUTS = ("tokens", "style", "speed")
_REQUIRED = (
    "bert.embeddings.word_embeddings.weight",
    "bert_encoder.weight",
    "predictor.duration_proj.linear_layer.weight",
    "text_encoder.lstm.weight_ih_l0",
    "decoder.generator.conv_post.weight",
)
#: Nodes of a graph that rounds activations to 8 bits at run time (onnxruntime's
#: ``quantize_dynamic``).
_DYNAMIC_QUANT_OPS = frozenset(
    {"DynamicQuantizeLinear", "DynamicQuantizeLSTM", "DynamicQuantizeMatMul"}
)
_PREDICTOR_CHILDREN = re.compile(r"^(?:F0|N)\.\d+$|^(?:shared|F0_proj|N_proj)$")
_CALL_SUFFIX = re.compile(r"_\d+$")
# PyTorch's LSTM gate blocks are (i, f, g, o); ONNX's are (i, o, f, c).
_ONNX_TO_TORCH_GATES = (0, 2, 3, 1)


def module_path(node_name: str) -> str:
    """The KModel module path of an exported node's name.

    ``/encoder/F0.0/conv1/Conv_quant`` -> ``predictor.F0.0.conv1``.
    """
    parts = [p for p in node_name.strip("/").split("/")[:-1] if p]
    if parts[:2] == ["decoder", "decoder"]:
        parts = ["decoder", *parts[2:]]
    elif parts[:1] == ["encoder"]:
        parts = parts[1:]
        if parts and _PREDICTOR_CHILDREN.match(parts[0]):
            parts = ["predictor", *parts]
    path: list[str] = []
    for raw in parts:
        # A module called twice (ALBERT's shared layer) gets "_1", "_2"... per call.
        part = _CALL_SUFFIX.sub("", raw)
        if path and part.startswith(path[-1] + "."):
            path[-1] = part  # Sequential children are named "cnn.0.0" under "cnn.0"
        else:
            path.append(part)
    return ".".join(path)


def _state_name(initializer: str) -> str:
    if initializer.startswith("decoder.decoder."):
        return initializer[len("decoder.") :]
    return initializer[len("encoder.") :]


class _Graph:
    def __init__(self, path: Path, model: Any) -> None:
        from onnx import numpy_helper

        self.path = path
        self._to_array = numpy_helper.to_array
        self.initializers = {i.name: i for i in model.graph.initializer}
        self._cache: dict[str, np.ndarray] = {}

    def has(self, name: str) -> bool:
        return name in self.initializers

    def array(self, name: str) -> np.ndarray:
        if name not in self._cache:
            if name not in self.initializers:
                raise ModelFileError(
                    f"{self.path}: the graph uses {name!r} but holds no such initializer; "
                    "the file is not a complete kokoro-onnx export",
                    path=str(self.path),
                )
            self._cache[name] = np.asarray(self._to_array(self.initializers[name]))
        return self._cache[name]

    def dequantize(self, weight: str, zero_point: str | None) -> np.ndarray:
        """A quantized weight with the ``_scale`` stored beside it and the node's zero point."""
        q = self.array(weight)
        if not weight.endswith("_quantized"):
            return q.astype(np.float32)
        scale = self.array(weight[: -len("_quantized")] + "_scale").astype(np.float32)
        zp = self.array(zero_point).astype(np.float32) if zero_point else np.float32(0.0)
        return ((q.astype(np.float32) - zp) * scale).astype(np.float32)


def _input(node: Any, index: int) -> str | None:
    return node.input[index] if len(node.input) > index and node.input[index] else None


def _lstm(graph: _Graph, node: Any) -> dict[str, np.ndarray]:
    """DynamicQuantizeLSTM (or LSTM) -> PyTorch's ``weight_ih_l0``... of a bidirectional LSTM."""
    w_name, r_name, b_name = _input(node, 1), _input(node, 2), _input(node, 3)
    if w_name is None or r_name is None or b_name is None:
        raise ModelFileError(f"{graph.path}: LSTM {node.name} lacks weights", path=str(graph.path))
    if node.op_type == "DynamicQuantizeLSTM":
        w = _per_direction(graph, w_name, _input(node, 8), _input(node, 9))
        r = _per_direction(graph, r_name, _input(node, 10), _input(node, 11))
        # DynamicQuantizeLSTM stores [dirs, input, 4H]; plain LSTM [dirs, 4H, input].
        w, r = w.transpose(0, 2, 1), r.transpose(0, 2, 1)
    else:
        w, r = graph.array(w_name).astype(np.float32), graph.array(r_name).astype(np.float32)
    b = graph.array(b_name).astype(np.float32)
    hidden = r.shape[2]

    def torch_order(m: np.ndarray) -> np.ndarray:
        blocks = np.split(m, 4, axis=0)
        return np.ascontiguousarray(np.concatenate([blocks[i] for i in _ONNX_TO_TORCH_GATES]))

    out = {}
    for d, suffix in enumerate(("", "_reverse")):
        out[f"weight_ih_l0{suffix}"] = torch_order(w[d])
        out[f"weight_hh_l0{suffix}"] = torch_order(r[d])
        out[f"bias_ih_l0{suffix}"] = torch_order(b[d, : 4 * hidden])
        out[f"bias_hh_l0{suffix}"] = torch_order(b[d, 4 * hidden :])
    return out


def _per_direction(graph: _Graph, weight: str, scale: str | None, zp: str | None) -> np.ndarray:
    q = graph.array(weight).astype(np.float32)
    if scale is None:
        return q
    s = graph.array(scale).astype(np.float32).reshape(-1, 1, 1)
    z = graph.array(zp).astype(np.float32).reshape(-1, 1, 1) if zp else np.float32(0.0)
    return ((q - z) * s).astype(np.float32)


def _load_model(path: Path) -> Any:
    try:
        import onnx
    except ImportError as exc:
        raise ModelFileError(
            f"{path}: reading ONNX files needs the onnx package: pip install 'pygpukit-tts[onnx]'",
            path=str(path),
        ) from exc
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ModelFileError(f"{path}: cannot read: {exc}", path=str(path)) from exc
    if size == 0:
        raise ModelFileError(f"{path}: the file is empty; re-download it", path=str(path))
    try:
        return onnx.load(str(path))
    except Exception as exc:  # onnx raises protobuf DecodeError, ValueError...
        raise ModelFileError(
            f"{path}: not a readable ONNX file ({type(exc).__name__}: {exc}); it is truncated "
            "or corrupt: re-download it (or join all its parts, in order)",
            path=str(path),
        ) from exc


def read_onnx_state_dict(path: Path) -> dict[str, np.ndarray]:
    """The float32 KModel state dict (weight norm folded) of a kokoro-onnx model file.

    Raises :class:`ModelFileError` for a file that is missing, truncated, not ONNX or not a
    Kokoro export.
    """
    return read_onnx(path)[0]


def read_onnx(path: Path) -> tuple[dict[str, np.ndarray], bool]:
    """:func:`read_onnx_state_dict` and whether the graph rounds its activations to 8 bits.

    The second result is True for ``kokoro-v1.0.int8.onnx`` (dynamically quantized), False for
    the float ``kokoro-v1.0.onnx``.
    """
    model = _load_model(path)
    quantized = any(node.op_type in _DYNAMIC_QUANT_OPS for node in model.graph.node)
    inputs = {i.name for i in model.graph.input}
    if not set(_GRAPH_INPUTS) <= inputs:
        raise ModelFileError(
            f"{path}: an ONNX graph with inputs {sorted(inputs)}, not a kokoro-onnx export "
            f"(inputs {list(_GRAPH_INPUTS)}); pass kokoro-v1.0.onnx or kokoro-v1.0.int8.onnx",
            path=str(path),
        )
    graph = _Graph(path, model)
    state: dict[str, np.ndarray] = {}
    for name, init in graph.initializers.items():
        named = name.startswith(("encoder.", "decoder.decoder."))
        quant_part = name.endswith(("_quantized", "_scale", "_zero_point"))
        if named and init.data_type == 1 and not quant_part and ".stft." not in name:
            state[_state_name(name)] = graph.array(name).astype(np.float32)
    for node in model.graph.node:
        op = node.op_type
        if op in ("ConvInteger", "MatMulInteger", "Conv", "ConvTranspose", "MatMul", "Gemm"):
            weight = _input(node, 1)
            if weight is None or not graph.has(weight) or "istft" in node.name:
                continue
            zero_point = _input(node, 3) if op.endswith("Integer") else None
            w = graph.dequantize(weight, zero_point)
            if op in ("MatMulInteger", "MatMul"):
                w = np.ascontiguousarray(w.T)  # [in, out] -> nn.Linear's [out, in]
            state.setdefault(module_path(node.name) + ".weight", w)
        elif op in ("DynamicQuantizeLSTM", "LSTM"):
            prefix = module_path(node.name)
            for key, value in _lstm(graph, node).items():
                state.setdefault(f"{prefix}.{key}", value)
        elif op == "DequantizeLinear" and node.name.endswith("Gather_quant_DequantizeLinear"):
            scale = _input(node, 1)
            if scale is None or not scale.endswith("_scale"):
                continue
            weight = scale[: -len("_scale")] + "_quantized"
            state.setdefault(
                module_path(node.name) + ".weight", graph.dequantize(weight, _input(node, 2))
            )
    missing = [k for k in _REQUIRED if k not in state]
    if missing:
        raise ModelFileError(
            f"{path}: an ONNX graph without Kokoro's {missing}; it is not a kokoro-onnx export",
            path=str(path),
        )
    fill_untrained_defaults(state)
    return state, quantized


def fill_untrained_defaults(state: dict[str, np.ndarray]) -> None:
    """Add AdaIN's instance-norm affine parameters (1 and 0) where a checkpoint omits them."""
    for name in [k for k in state if k.endswith(".fc.weight")]:
        module = name[: -len(".fc.weight")]
        leaf = module.rsplit(".", 1)[-1]
        if not (leaf.startswith(("norm", "adain")) or re.search(r"\.adain\d\.\d+$", module)):
            continue
        if module.startswith("predictor.text_encoder.lstms"):
            continue  # AdaLayerNorm: plain layer norm, no affine parameters
        channels = state[name].shape[0] // 2
        state.setdefault(f"{module}.norm.weight", np.ones(channels, np.float32))
        state.setdefault(f"{module}.norm.bias", np.zeros(channels, np.float32))
