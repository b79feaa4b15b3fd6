"""Malformed and unsupported checkpoints: each a typed error naming the file (and tensor).

Every case also checks that nothing stays allocated and that a good checkpoint still loads
afterwards.
"""

from __future__ import annotations

import json
import pathlib
import struct
from collections.abc import Callable

import numpy as np
import pytest
from llm_files import gguf_bytes, gguf_nbytes, safetensors_bytes, write_hf_folder

from pygpukit.llm.errors import (
    CheckpointError,
    GGUFError,
    LLMError,
    SafeTensorsError,
    UnsupportedModelError,
)
from pygpukit.llm.loading import open_checkpoint

CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4}
GGUF_META = {
    "general.architecture": "llama",
    "llama.embedding_length": 256,
    "llama.feed_forward_length": 64,
    "llama.block_count": 1,
    "llama.attention.head_count": 2,
}


def _weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    return {
        "model.embed_tokens.weight": rng.standard_normal((6, 4)).astype(np.float32),
        "model.norm.weight": rng.standard_normal(4).astype(np.float32),
    }


def _folder(tmp: pathlib.Path, data: bytes) -> pathlib.Path:
    folder = tmp / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "model.safetensors").write_bytes(data)
    return folder


# ---- SafeTensors headers -------------------------------------------------------------------


def truncated_file(tmp):
    data = safetensors_bytes(_weights())
    return _folder(tmp, data[:-10]), SafeTensorsError, "model.norm.weight"


def header_longer_than_file(tmp):
    data = safetensors_bytes(_weights())
    bad = struct.pack("<Q", len(data)) + data[8:]
    return _folder(tmp, bad), SafeTensorsError, "truncated"


def header_over_the_bound(tmp):
    data = safetensors_bytes(_weights())
    return _folder(tmp, struct.pack("<Q", 2**40) + data[8:]), SafeTensorsError, "header claims"


def shorter_than_the_length_field(tmp):
    return _folder(tmp, b"\x01\x02\x03"), SafeTensorsError, "8-byte header length"


def header_not_json(tmp):
    blob = b"{not json}"
    return _folder(tmp, struct.pack("<Q", len(blob)) + blob), SafeTensorsError, "JSON"


def offsets_out_of_range(tmp):
    patch = {"model.norm.weight": {"data_offsets": [96, 96 + 16 + 4096]}}
    data = safetensors_bytes(_weights(), header_patch=patch)
    return _folder(tmp, data), SafeTensorsError, "model.norm.weight"


def negative_offsets(tmp):
    patch = {"model.norm.weight": {"data_offsets": [-16, 0]}}
    data = safetensors_bytes(_weights(), header_patch=patch)
    return _folder(tmp, data), SafeTensorsError, "model.norm.weight"


def overlapping_offsets(tmp):
    patch = {"model.norm.weight": {"data_offsets": [80, 96]}}  # ends inside the embedding
    data = safetensors_bytes(_weights(), header_patch=patch)
    return _folder(tmp, data), SafeTensorsError, "overlaps"


def unknown_dtype(tmp):
    data = safetensors_bytes(_weights(), header_patch={"model.norm.weight": {"dtype": "F8_E9"}})
    return _folder(tmp, data), SafeTensorsError, "F8_E9"


def shape_contradicts_bytes(tmp):
    data = safetensors_bytes(_weights(), header_patch={"model.norm.weight": {"shape": [5]}})
    return _folder(tmp, data), SafeTensorsError, "model.norm.weight"


def non_integer_shape(tmp):
    data = safetensors_bytes(_weights(), header_patch={"model.norm.weight": {"shape": [2.0, 2]}})
    return _folder(tmp, data), SafeTensorsError, "model.norm.weight"


# ---- folders ------------------------------------------------------------------------------


def missing_shard(tmp):
    w = _weights()
    folder = write_hf_folder(tmp / "model", CONFIG, [dict([next(iter(w.items()))]), {}])
    (folder / "model-00002-of-00002.safetensors").unlink()
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder, CheckpointError, "model-00002-of-00002.safetensors"


def tensor_missing_from_its_shard(tmp):
    w = _weights()
    folder = write_hf_folder(tmp / "model", CONFIG, [w, {"lm_head.weight": w["model.norm.weight"]}])
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["model.layers.0.mlp.up_proj.weight"] = "model-00001-of-00002.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder, CheckpointError, "model.layers.0.mlp.up_proj.weight"


def index_escapes_the_folder(tmp):
    w = _weights()
    folder = write_hf_folder(tmp / "model", CONFIG, [w, {"lm_head.weight": w["model.norm.weight"]}])
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    index["weight_map"]["lm_head.weight"] = "../elsewhere.safetensors"
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder, CheckpointError, "lm_head.weight"


def pickle_only_folder(tmp):
    folder = tmp / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIG))
    (folder / "pytorch_model.bin").write_bytes(b"\x80\x04this would be a pickle")
    return folder, CheckpointError, "pytorch_model.bin"


def no_config(tmp):
    folder = tmp / "model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(safetensors_bytes(_weights()))
    return folder, CheckpointError, "config.json"


def missing_path(tmp):
    return tmp / "nowhere", CheckpointError, "nowhere"


# ---- GGUF -----------------------------------------------------------------------------------


def _gguf(tmp: pathlib.Path, data: bytes) -> pathlib.Path:
    path = tmp / "model.gguf"
    path.write_bytes(data)
    return path


def _gguf_tensors(kind="F32"):
    shape = (8, 256)
    return [
        ("output_norm.weight", (256,), "F32", np.ones(256, np.float32).tobytes()),
        ("token_embd.weight", shape, kind, b"\x11" * gguf_nbytes(shape, kind)),
    ]


def gguf_bad_magic(tmp):
    return _gguf(tmp, gguf_bytes(GGUF_META, _gguf_tensors(), magic=b"GGML")), GGUFError, "magic"


def gguf_bad_version(tmp):
    data = gguf_bytes(GGUF_META, _gguf_tensors(), version=7)
    return _gguf(tmp, data), GGUFError, "version 7"


def gguf_truncated(tmp):
    data = gguf_bytes(GGUF_META, _gguf_tensors())
    return _gguf(tmp, data[:-100]), GGUFError, "token_embd.weight"


def gguf_truncated_metadata(tmp):
    data = gguf_bytes(GGUF_META, _gguf_tensors())
    return _gguf(tmp, data[:60]), GGUFError, "model.gguf"


def gguf_string_longer_than_file(tmp):
    meta = {**GGUF_META, "general.name": "x"}
    data = gguf_bytes(meta, _gguf_tensors())
    key = b"general.name" + struct.pack("<I", 8)
    at = data.index(key) + len(key)
    data = data[:at] + struct.pack("<Q", 2**50) + data[at + 8 :]
    return _gguf(tmp, data), GGUFError, "general.name"


def gguf_overlapping_tensors(tmp):
    data = gguf_bytes(GGUF_META, _gguf_tensors(), offsets=[0, 0])
    return _gguf(tmp, data), GGUFError, "overlaps"


def gguf_misaligned_offset(tmp):
    data = gguf_bytes(GGUF_META, _gguf_tensors(), offsets=[0, 1040])
    return _gguf(tmp, data), GGUFError, "token_embd.weight"


def gguf_unsupported_architecture(tmp):
    meta = {**GGUF_META, "general.architecture": "mamba"}
    return _gguf(tmp, gguf_bytes(meta, _gguf_tensors())), UnsupportedModelError, "mamba"


def gguf_unknown_tensor_name(tmp):
    tensors = [*_gguf_tensors(), ("blk.0.ssm_conv1d.weight", (32,), "F32", b"\0" * 128)]
    return _gguf(tmp, gguf_bytes(GGUF_META, tensors)), UnsupportedModelError, "ssm_conv1d"


CASES: list[Callable[[pathlib.Path], tuple[pathlib.Path, type[LLMError], str]]] = [
    truncated_file,
    header_longer_than_file,
    header_over_the_bound,
    shorter_than_the_length_field,
    header_not_json,
    offsets_out_of_range,
    negative_offsets,
    overlapping_offsets,
    unknown_dtype,
    shape_contradicts_bytes,
    non_integer_shape,
    missing_shard,
    tensor_missing_from_its_shard,
    index_escapes_the_folder,
    pickle_only_folder,
    no_config,
    missing_path,
    gguf_bad_magic,
    gguf_bad_version,
    gguf_truncated,
    gguf_truncated_metadata,
    gguf_string_longer_than_file,
    gguf_overlapping_tensors,
    gguf_misaligned_offset,
    gguf_unsupported_architecture,
    gguf_unknown_tensor_name,
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.__name__)
def test_bad_checkpoint_is_a_typed_error(tmp_path, pool_baseline, case):
    path, error, needle = case(tmp_path)
    with pytest.raises(error) as info, open_checkpoint(path) as ck:
        ck.load("float32", progress=False)
    message = str(info.value)
    assert needle in message
    assert info.value.path is not None and pathlib.Path(info.value.path).name in message
    pool_baseline()
    good = write_hf_folder(tmp_path / "good", CONFIG, [_weights()])
    with open_checkpoint(good) as ck:
        assert len(ck.load("float32", progress=False)) == 2


def test_pickle_refusal_says_how_to_convert(tmp_path):
    path, _, _ = pickle_only_folder(tmp_path)
    with pytest.raises(CheckpointError, match="safe_serialization=True"):
        open_checkpoint(path)


def test_missing_tensor_named_in_load(tmp_path, pool_baseline):
    folder = write_hf_folder(tmp_path / "m", CONFIG, [_weights()])
    with open_checkpoint(folder) as ck, pytest.raises(CheckpointError) as info:
        ck.load("float32", names=["model.norm.weight", "model.layers.9.mlp.up_proj.weight"])
    assert info.value.tensor == "model.layers.9.mlp.up_proj.weight"
    assert "model.layers.9.mlp.up_proj.weight" in str(info.value)
    pool_baseline()


def test_unsupported_quant_type_names_type_and_tensor(tmp_path, pool_baseline):
    # The F32 tensor before it loads first: the error must release it too.
    path = _gguf(tmp_path, gguf_bytes(GGUF_META, _gguf_tensors("Q4_K")))
    with open_checkpoint(path) as ck:
        assert ck.tensor_infos()["model.embed_tokens.weight"].stored == "Q4_K"
        with pytest.raises(UnsupportedModelError) as info:
            ck.load("bfloat16", progress=False)
    message = str(info.value)
    assert "Q4_K" in message and "token_embd.weight" in message and "model.gguf" in message
    assert info.value.tensor == "token_embd.weight"
    pool_baseline()


def test_deeply_nested_gguf_arrays_are_refused(tmp_path):
    nested: list = [1]
    for _ in range(20):
        nested = [nested]
    path = _gguf(tmp_path, gguf_bytes({**GGUF_META, "deep": nested}, _gguf_tensors()))
    with pytest.raises(GGUFError, match="nested more than 8"):
        open_checkpoint(path)
