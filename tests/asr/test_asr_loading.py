"""Loading Whisper directories: CTranslate2 model.bin (the reader and its errors), Hugging Face
safetensors, and the two giving the same network on the same weights."""

from __future__ import annotations

import json

import numpy as np
import pytest
from asr_ct2_files import ct2_variables, write_ct2_dir, write_model_bin
from asr_reference_configs import CONFIGS

from pygpukit import asr
from pygpukit.asr.loading import _map_hf, read_model
from pygpukit.asr.loading.ctranslate2 import CTranslate2File
from pygpukit.asr.random_model import random_weights, write_checkpoint

SEED, CFG, _ = CONFIGS["multilingual_small"]


@pytest.fixture(scope="module")
def weights():
    return _map_hf(random_weights(CFG, SEED), CFG, "random")


def test_model_bin_round_trip(tmp_path, rng):
    a = rng.standard_normal((3, 5)).astype(np.float16)
    b = rng.standard_normal(7).astype(np.float32)
    write_model_bin(tmp_path / "m.bin", {"x/a": a, "y/b": b, "n": np.array(6, np.int16)},
                    aliases={"z/a": "x/a"})  # fmt: skip
    f = CTranslate2File(tmp_path / "m.bin")
    assert f.spec == "WhisperSpec" and f.version == 6
    assert np.array_equal(f.variables["x/a"], a) and np.array_equal(f.variables["y/b"], b)
    assert f.variables["z/a"] is f.variables["x/a"] and f.scalar("n") == 6
    assert f.dtypes == {"x/a": "float16", "y/b": "float32", "n": "int16", "z/a": "float16"}


def test_ctranslate2_and_huggingface_dirs_give_the_same_model(tmp_path, weights, rng):
    hf = asr.load(write_checkpoint(tmp_path / "hf", CFG, SEED), dtype="float32")
    ct2 = asr.load(write_ct2_dir(tmp_path / "ct2", weights, CFG.encoder_heads, "float32"),
                   dtype="float32")  # fmt: skip
    sizes = ("d_model", "n_mels", "encoder_layers", "decoder_layers", "encoder_heads", "vocab_size")
    assert all(getattr(ct2.config, k) == getattr(hf.config, k) for k in sizes)
    mel = rng.uniform(-1, 1, (1, CFG.n_mels, 3000)).astype(np.float32)
    ids = [[50258, 50259, 50359, 440, 1002]]
    a, b = hf.logits(mel, ids), ct2.logits(mel, ids)
    assert a.shape == (1, 5, CFG.vocab_size) and np.std(a) > 0.1
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-4)


def test_ctranslate2_config_json_lists(tmp_path, weights):
    files = read_model(write_ct2_dir(tmp_path / "ct2", weights, CFG.encoder_heads))
    assert files.format == "ctranslate2"
    assert files.config.alignment_heads == ((1, 0),)
    assert files.config.begin_suppress_tokens == (220, 50256)
    assert files.weights["enc.0.qkv.w"].dtype == np.float16


def test_truncated_model_bin(tmp_path, weights):
    folder = write_ct2_dir(tmp_path / "ct2", weights, CFG.encoder_heads)
    raw = (folder / "model.bin").read_bytes()
    for cut in (len(raw) // 2, len(raw) - 3, 10):
        (folder / "model.bin").write_bytes(raw[:cut])
        with pytest.raises(asr.CTranslate2FormatError, match="truncated"):
            asr.load(folder)


def test_int8_model_bin_is_refused_saying_what_is_supported(tmp_path, weights):
    var = ct2_variables(weights, CFG.encoder_heads)
    var["encoder/layer_0/ffn/linear_0/weight"] = np.ones(
        var["encoder/layer_0/ffn/linear_0/weight"].shape, np.int8
    )
    var["encoder/layer_0/ffn/linear_0/weight_scale"] = np.ones(CFG.ffn_dim, np.float32)
    tmp_path.joinpath("q").mkdir()
    write_model_bin(tmp_path / "q" / "model.bin", var)
    with pytest.raises(asr.UnsupportedModelError, match=r"int8.*float16, float32 and bfloat16"):
        asr.load(tmp_path / "q")


def test_not_whisper_and_unknown_version(tmp_path):
    tmp_path.joinpath("a").mkdir()
    write_model_bin(tmp_path / "a" / "model.bin", {"x": np.zeros(2, np.float32)},
                    spec="TransformerSpec")  # fmt: skip
    with pytest.raises(asr.UnsupportedModelError, match="not Whisper"):
        asr.load(tmp_path / "a")
    tmp_path.joinpath("b").mkdir()
    write_model_bin(tmp_path / "b" / "model.bin", {"x": np.zeros(2, np.float32)}, version=9)
    with pytest.raises(asr.CTranslate2FormatError, match="binary version 9"):
        asr.load(tmp_path / "b")


def test_pickle_checkpoint_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CFG.to_hf()))
    (tmp_path / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + b"\0" * 64)
    with pytest.raises(asr.ModelFormatError, match="pickle"):
        asr.load(tmp_path)


def test_missing_and_misshaped_tensors(tmp_path):
    folder = write_checkpoint(tmp_path / "hf", CFG, SEED)
    bad = {**CFG.to_hf(), "d_model": 256}
    (folder / "config.json").write_text(json.dumps(bad))
    with pytest.raises(asr.ModelFormatError, match="shape"):
        asr.load(folder)
    with pytest.raises(asr.ModelFormatError, match="no such file"):
        asr.load(tmp_path / "nowhere")
    tmp_path.joinpath("empty").mkdir()
    with pytest.raises(asr.ModelFormatError, match="no Whisper weights"):
        asr.load(tmp_path / "empty")


def test_sharded_bfloat16_safetensors(tmp_path, rng):
    """Indexed shards (one bfloat16) load as the single float32 file does (to bf16 rounding)."""
    import ml_dtypes

    from pygpukit.asr.loading.safetensors import read_safetensors
    from pygpukit.safetensors import write_safetensors

    single = write_checkpoint(tmp_path / "one", CFG, SEED)
    tensors = read_safetensors(single / "model.safetensors")
    names = sorted(tensors)
    half = len(names) // 2
    sharded = tmp_path / "two"
    sharded.mkdir()
    (sharded / "config.json").write_bytes((single / "config.json").read_bytes())
    write_safetensors(sharded / "a.safetensors", {n: tensors[n] for n in names[:half]})
    second = {n: np.asarray(tensors[n]).astype(ml_dtypes.bfloat16) for n in names[half:]}
    write_safetensors(sharded / "b.safetensors", second)
    index = {"weight_map": {**dict.fromkeys(names[:half], "a.safetensors"),
                            **dict.fromkeys(names[half:], "b.safetensors")}}  # fmt: skip
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    mel = rng.uniform(-1, 1, (1, CFG.n_mels, 3000)).astype(np.float32)
    ids = [[50258, 50259, 50359]]
    a = asr.load(single, dtype="float32").logits(mel, ids)
    b = asr.load(sharded, dtype="float32").logits(mel, ids)
    assert np.linalg.norm(b - a) / np.linalg.norm(a) < 3e-2
    index["weight_map"][names[0]] = "../evil.safetensors"
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(asr.ModelFormatError, match="leaves the directory"):
        asr.load(sharded)


def test_truncated_safetensors(tmp_path):
    folder = write_checkpoint(tmp_path / "hf", CFG, SEED)
    raw = (folder / "model.safetensors").read_bytes()
    for cut in (4, 100, len(raw) - 10):
        (folder / "model.safetensors").write_bytes(raw[:cut])
        with pytest.raises(asr.ModelFormatError, match=r"truncated|shorter|outside"):
            asr.load(folder)
