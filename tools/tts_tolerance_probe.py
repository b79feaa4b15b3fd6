"""Measure, over several seeds, the two float32 comparisons the tts tests make with fixed limits.

1. ``test_tts_model.py::test_batch_matches_each_utterance_alone``: a batch of three utterances
   against each synthesized alone, relative L2 per utterance (the test's limit: 1e-5) and the
   largest sample error over the peak.
2. ``test_tts_ops.py::test_network_matches_the_numpy_reference``: the float32 network against
   the NumPy network: the largest sample error over the peak, how many samples pass 1e-4 of
   the peak (the test's limit), and where the error sits (near the largest harmonic phase).

Run from the repository root (random tiny model, no assets)::

    python tools/tts_tolerance_probe.py --seeds 6
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import tempfile

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "tts"))

from kokoro_numpy_reference import ReferenceNetwork  # noqa: E402
from tts_files import write_tiny_checkpoint  # noqa: E402

import pygpukit as gp  # noqa: E402
from pygpukit import tts  # noqa: E402
from pygpukit.tts.kokoro import KokoroNetwork  # noqa: E402
from pygpukit.tts.random_model import TINY_CONFIG, random_state, random_voice  # noqa: E402

PHONEMES = "hɛlˈoʊ wˈɜːld, ðɪs ɪz ə tˈɛst."
TEXTS = [PHONEMES, "ə tˈɛst.", "ðɪs ɪz ə lˈɔŋɡɚ tˈɛst, wɪð tˈu klˈɔzᵻz."]


def _rel(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def batch_vs_alone(seed: int) -> str:
    """Relative L2 and largest sample error (over the peak) of batch vs alone, per utterance."""
    with tempfile.TemporaryDirectory() as folder:
        write_tiny_checkpoint(pathlib.Path(folder), seed=seed)
        model = tts.load(folder, vocoder_dtype="float32")
        table = random_voice(TINY_CONFIG, seed=seed + 7)
        voices: list[str | np.ndarray] = ["af_test", table, "af_test"]
        batch = model.synthesize_batch(phonemes=TEXTS, voice=voices)
        alone = [model.synthesize(phonemes=t, voice=v) for t, v in zip(TEXTS, voices, strict=True)]
        parts = []
        for got, want in zip(batch, alone, strict=True):
            peak = np.abs(want.samples).max()
            parts.append(
                f"rel L2 {_rel(got.samples, want.samples):.2e} "
                f"max {np.abs(got.samples - want.samples).max() / peak:.2e} of peak "
                f"({len(want.samples)} samples)"
            )
        return "; ".join(parts)


class _F0Reference(ReferenceNetwork):
    """The NumPy network, keeping the F0 curve it computed (to see voicing-threshold flips)."""

    f0: np.ndarray

    def f0_energy(self, *args: object) -> tuple[np.ndarray, np.ndarray]:
        f0, n = super().f0_energy(*args)
        self.f0 = np.asarray(f0)
        return f0, n


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(start, length)`` of each run of True in ``mask``."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    return [(int(a), int(b - a)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def network_vs_numpy(seed: int) -> str:
    """The test's comparison with its random draw replaced by ``seed``."""
    state = random_state(TINY_CONFIG, seed=seed)
    voice = random_voice(TINY_CONFIG, seed=seed + 1)
    ids = np.array([0, *np.random.default_rng(seed).integers(1, 150, 23), 0])
    net = KokoroNetwork(TINY_CONFIG, state, vocoder_dtype="float32")
    reference = _F0Reference(TINY_CONFIG, state)
    ref = reference(ids, voice[22, 0], 1.0)
    ours = net(ids, voice[22, 0], 1.0, durations=ref.durations)
    scale = np.abs(ref.audio).max()
    err = np.abs(ours.audio - ref.audio) / scale
    up = len(ref.audio) // reference.f0.shape[-1]
    near = np.abs(reference.f0 - 10.0)  # the voiced threshold, Hz
    return (
        f"max {err.max():.2e} of peak, over 1e-4: {int((err > 1e-4).sum())}/{err.size}, "
        f"rel L2 {_rel(ours.audio, ref.audio):.2e}; runs over 1e-4 (start, length) "
        f"{_runs(err > 1e-4)[:6]}; {up} samples per F0 frame, F0 nearest the 10 Hz "
        f"threshold {near.min():.2e} Hz away at frame {int(near.argmin())}"
    )


def main() -> None:
    """Both comparisons for ``--seeds`` seeds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--first-seed", type=int, default=1)
    args = parser.parse_args()
    print(f"backend {gp.backend_name()}")
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        print(f"seed {seed} network/numpy: {network_vs_numpy(seed)}", flush=True)
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        try:
            print(f"seed {seed} batch: {batch_vs_alone(seed)}", flush=True)
        except Exception as exc:  # a probe: report and go on with the next seed
            print(f"seed {seed} batch: {type(exc).__name__}: {exc}", flush=True)


if __name__ == "__main__":
    main()
