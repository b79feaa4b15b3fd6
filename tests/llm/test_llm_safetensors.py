"""Loading Hugging Face SafeTensors folders: single and sharded files, dtype conversion."""

from __future__ import annotations

import json

import numpy as np
import pytest
from llm_files import safetensors_bytes, write_hf_folder

import pygpukit as gp
from pygpukit.array import GPUArray
from pygpukit.errors import ReadOnlyArrayError
from pygpukit.llm.errors import CheckpointError
from pygpukit.llm.loading import open_checkpoint
from pygpukit.llm.loading.safetensors import SafeTensorsFile

STORED = [np.float32, np.float16, gp.bfloat16]
TARGETS = ["float32", "float16", "bfloat16"]
CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 8, "eos_token_id": 2}


def _tensors(rng, dtype):
    return {
        "model.embed_tokens.weight": rng.standard_normal((11, 8)).astype(dtype),
        "model.layers.0.self_attn.q_proj.weight": rng.standard_normal((8, 8)).astype(dtype),
        "model.norm.weight": rng.standard_normal(8).astype(dtype),
        "model.scalar": np.asarray(rng.standard_normal(), dtype=dtype),
    }


@pytest.mark.parametrize("stored", STORED)
@pytest.mark.parametrize("target", TARGETS)
def test_single_file_loads_and_converts(tmp_path, rng, stored, target):
    tensors = _tensors(rng, stored)
    folder = write_hf_folder(tmp_path / "m", CONFIG, [tensors])
    with open_checkpoint(folder) as ck:
        assert ck.format == "safetensors"
        assert ck.hf_config == CONFIG
        assert ck.tensor_names() == list(tensors)
        info = ck.tensor_infos()["model.embed_tokens.weight"]
        assert info.shape == (11, 8) and info.stored == np.dtype(stored).name
        loaded = ck.load(target, progress=False)
    assert set(loaded) == set(tensors)
    for name, a in tensors.items():
        got = loaded[name]
        assert isinstance(got, GPUArray)
        assert got.dtype == np.dtype(target) and got.shape == a.shape
        np.testing.assert_array_equal(got.to_numpy(), a.astype(np.float32).astype(target))


def test_sharded_folder_and_name_selection(tmp_path, rng):
    first, second = _tensors(rng, np.float32), {"lm_head.weight": rng.standard_normal((11, 8))}
    second = {k: v.astype(gp.bfloat16) for k, v in second.items()}
    folder = write_hf_folder(tmp_path / "m", CONFIG, [first, second])
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))
    with open_checkpoint(folder) as ck:
        assert set(ck.tensor_names()) == set(first) | set(second)
        assert ck.generation_config == {"eos_token_id": [2, 7]}
        loaded = ck.load("float32", names=["lm_head.weight", "model.norm.weight"])
    assert set(loaded) == {"lm_head.weight", "model.norm.weight"}
    np.testing.assert_array_equal(
        loaded["lm_head.weight"].to_numpy(), second["lm_head.weight"].astype(np.float32)
    )


def test_host_view_maps_the_file_without_copying(tmp_path, rng):
    a = rng.standard_normal((5, 3)).astype(np.float16)
    path = tmp_path / "x.safetensors"
    path.write_bytes(safetensors_bytes({"a": a}, metadata={"format": "pt"}))
    f = SafeTensorsFile(path)
    view = f.host_view("a")
    assert f.metadata == {"format": "pt"}
    assert not view.flags.writeable and not view.flags.owndata
    np.testing.assert_array_equal(view, a)
    f.close()


def test_loaded_weights_are_read_only(tmp_path, rng):
    folder = write_hf_folder(tmp_path / "m", CONFIG, [_tensors(rng, np.float32)])
    with open_checkpoint(folder) as ck:
        w = ck.load("float32", progress=False)["model.norm.weight"]
    assert not w.flags.writeable
    with pytest.raises(ReadOnlyArrayError, match="read-only"):
        w[0] = 1.0
    with pytest.raises(ReadOnlyArrayError):
        w += 1.0


def test_unknown_model_dtype_is_refused(tmp_path, rng):
    folder = write_hf_folder(tmp_path / "m", CONFIG, [_tensors(rng, np.float32)])
    with open_checkpoint(folder) as ck, pytest.raises(ValueError, match="float32, float16"):
        ck.load("int8")


def test_a_single_differently_named_file_is_found(tmp_path, rng):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "weights.safetensors").write_bytes(safetensors_bytes(_tensors(rng, np.float16)))
    with open_checkpoint(folder) as ck:
        assert "model.norm.weight" in ck.tensor_names()


def test_a_plain_file_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(CheckpointError, match=r"notes\.txt"):
        open_checkpoint(path)
