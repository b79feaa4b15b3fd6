"""Equivalence with Hugging Face transformers on the same random weights.

``tools/asr_reference.py`` (run where PyTorch is installed) stored, per configuration of
``asr_reference_configs.py``, transformers' float32 decoder logits at the probe ids and the
argmax of every position. Here the weights and inputs are regenerated from the seed, written as
a safetensors directory, loaded with ``asr.load`` and compared: relative error <= 1e-3 in
float32, every argmax equal. The large-v3-shaped configuration runs on the GPU only.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
from asr_reference_configs import CONFIGS, inputs

import pygpukit as gp
from pygpukit import asr
from pygpukit.asr.random_model import write_checkpoint

REFERENCES = pathlib.Path(__file__).parent / "references"


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_decoder_logits_match_transformers(name, tmp_path):
    seed, cfg, on_cpu = CONFIGS[name]
    if not on_cpu and gp.backend_name() == "cpu":
        pytest.skip("a large-v3-shaped model: GPU only")
    path = REFERENCES / f"{name}.npz"
    if not path.is_file():
        pytest.skip(f"no transformers reference for {name}: run `python tools/asr_reference.py`")
    with np.load(path) as ref:
        logits, argmax = ref["logits"], ref["argmax"]
    model = asr.load(write_checkpoint(tmp_path / name, cfg, seed), dtype="float32")
    mel, ids, probes = inputs(seed, cfg)
    got = model.logits(mel, ids.tolist())
    assert got.shape == (*ids.shape, cfg.vocab_size)
    assert _rel(got[..., probes], logits) <= 1e-3
    assert np.array_equal(got.argmax(-1), argmax)


@pytest.mark.parametrize("name", ["multilingual_small", "v3_small"])
def test_cached_steps_equal_one_pass(name, tmp_path, rng):
    """Prefill + cached decode steps give the logits of the whole prompt in one pass."""
    seed, cfg, _ = CONFIGS[name]
    model = asr.load(write_checkpoint(tmp_path / name, cfg, seed), dtype="float32")
    mel = rng.uniform(-1, 1, (2, cfg.n_mels, 3000)).astype(np.float32)
    ids = rng.integers(0, cfg.vocab_size, (2, 5))
    whole = model.logits(mel, ids.tolist())
    dec = model.decoder
    from pygpukit.asr.whisper.model import DecoderState

    state = DecoderState(cfg, 2, model.dtype)
    dec.set_audio(state, model.encode(mel))
    first = dec.prefill(state, ids[:, :2].astype(np.int32), (1,)).to_numpy()[0]
    np.testing.assert_allclose(first, whole[:, 1], rtol=1e-4, atol=1e-4)
    for pos in range(2, 5):
        state.inputs[...] = np.stack([ids[:, pos], [pos, pos], [pos + 1, pos + 1]]).astype(np.int32)
        step = dec.step(state).to_numpy()
        np.testing.assert_allclose(step, whole[:, pos], rtol=1e-4, atol=1e-4)


def test_forward_matches_float64_numpy(tmp_path, rng):
    """The whole network against an independent float64 NumPy forward (no stored reference)."""
    from asr_reference_numpy import whisper_logits

    from pygpukit.asr.random_model import random_weights

    seed, cfg, _ = CONFIGS["v3_small"]
    model = asr.load(write_checkpoint(tmp_path / "m", cfg, seed), dtype="float32")
    mel = rng.uniform(-1, 1.5, (1, cfg.n_mels, 3000)).astype(np.float32)
    ids = rng.integers(0, cfg.vocab_size, 4)
    got = model.logits(mel, [ids.tolist()])[0]
    ref = whisper_logits(random_weights(cfg, seed), cfg.decoder_heads,
                         (cfg.encoder_layers, cfg.decoder_layers), mel[0], ids)  # fmt: skip
    assert _rel(got, ref) <= 1e-4


def test_device_greedy_equals_argmax_of_one_pass(tmp_path, rng):
    """``generate`` (argmax on the device, positions advanced there) follows the logits."""
    seed, cfg, _ = CONFIGS["multilingual_small"]
    model = asr.load(write_checkpoint(tmp_path / "m", cfg, seed), dtype="float32")
    mel = rng.uniform(-1, 1, (2, cfg.n_mels, 3000)).astype(np.float32)
    prompt = rng.integers(0, cfg.vocab_size, (2, 3))
    ids = model.generate(mel, prompt.tolist(), 6)
    assert ids.shape == (2, 6)
    whole = model.logits(mel, np.concatenate([prompt, ids], axis=1).tolist())
    assert np.array_equal(whole[:, 2:-1].argmax(-1), ids)
