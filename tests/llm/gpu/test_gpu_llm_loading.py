"""Checkpoint loading on the GPU: upload through the transfer engine, conversion and
dequantization on the device, the real SmolLM2 GGUF, and no leak on failure."""

from __future__ import annotations

import numpy as np
import pytest
from ggml_reference import dequantize_reference, quantize
from llm_files import gguf_bytes, safetensors_bytes, write_hf_folder

import pygpukit as gp
from pygpukit.llm.errors import SafeTensorsError, UnsupportedModelError
from pygpukit.llm.loading import open_checkpoint

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("stored", [np.float32, np.float16, gp.bfloat16])
@pytest.mark.parametrize("target", ["float32", "float16", "bfloat16"])
def test_gpu_safetensors_convert_on_device(tmp_path, rng, stored, target):
    # 3 MiB and more: large enough for the transfer engine's staged upload path.
    big = rng.standard_normal((1024, 768)).astype(stored)
    small = rng.standard_normal(33).astype(stored)
    folder = write_hf_folder(tmp_path / "m", {"hidden_size": 768}, [{"big": big, "small": small}])
    with open_checkpoint(folder) as ck:
        loaded = ck.load(target, progress=False)
    for name, a in (("big", big), ("small", small)):
        assert loaded[name].device.startswith("cuda")
        np.testing.assert_array_equal(
            loaded[name].to_numpy(), a.astype(np.float32).astype(target), err_msg=name
        )


def test_gpu_gguf_dequantizes_and_unpermutes(tmp_path, rng):
    hidden, heads = 128, 4
    q = rng.standard_normal((hidden, hidden)).astype(np.float32)
    rows = hidden // heads
    stored = q.reshape(heads, 2, rows // 2, hidden).swapaxes(1, 2).reshape(q.shape)
    raw = quantize(stored, "Q4_1")
    meta = {
        "general.architecture": "llama",
        "llama.embedding_length": hidden,
        "llama.feed_forward_length": 256,
        "llama.block_count": 1,
        "llama.attention.head_count": heads,
    }
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(meta, [("blk.0.attn_q.weight", q.shape, "Q4_1", raw.tobytes())]))
    expected = dequantize_reference(raw, "Q4_1").reshape(q.shape)
    expected = expected.reshape(heads, rows // 2, 2, hidden).swapaxes(1, 2).reshape(q.shape)
    with open_checkpoint(path) as ck:
        got = ck.load("float32", progress=False)["model.layers.0.self_attn.q_proj.weight"]
    np.testing.assert_array_equal(got.to_numpy(), expected)


def test_gpu_smollm2_loads_like_the_cpu_reference(smollm2_path):
    with open_checkpoint(smollm2_path) as ck:
        weights = ck.load("bfloat16", progress=False)
        assert len(weights) == 272
        name = "model.layers.5.mlp.gate_proj.weight"
        ref = dequantize_reference(ck.file.raw(ck.gguf_name(name)), "Q4_1").reshape(1536, 576)
        np.testing.assert_array_equal(weights[name].to_numpy(), ref.astype(gp.bfloat16))
        name = "model.layers.5.self_attn.q_proj.weight"
        ref = dequantize_reference(ck.file.raw(ck.gguf_name(name)), "Q4_1").reshape(576, 576)
        ref = ref.reshape(9, 32, 2, 576).swapaxes(1, 2).reshape(576, 576)
        np.testing.assert_array_equal(weights[name].to_numpy(), ref.astype(gp.bfloat16))
        assert not weights[name].flags.writeable


def test_gpu_failed_loads_leave_the_pool_as_it_was(tmp_path, rng, pool_baseline):
    good = {"a": rng.standard_normal((512, 512)).astype(np.float32)}
    bad = safetensors_bytes(
        {**good, "b": rng.standard_normal(8).astype(np.float32)},
        header_patch={"b": {"dtype": "I32"}},
    )
    folder = tmp_path / "st"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(bad)
    with open_checkpoint(folder) as ck, pytest.raises(SafeTensorsError, match="'b'"):
        ck.load("bfloat16", progress=False)  # "a" is uploaded first, then released
    meta = {
        "general.architecture": "llama",
        "llama.embedding_length": 256,
        "llama.feed_forward_length": 256,
        "llama.block_count": 1,
        "llama.attention.head_count": 2,
    }
    tensors = [
        ("output_norm.weight", (256,), "F32", np.ones(256, np.float32).tobytes()),
        ("token_embd.weight", (4, 256), "Q4_K", b"\x01" * 4 * 144),
    ]
    path = tmp_path / "m.gguf"
    path.write_bytes(gguf_bytes(meta, tensors))
    with open_checkpoint(path) as ck, pytest.raises(UnsupportedModelError, match="Q4_K"):
        ck.load("bfloat16", progress=False)
    pool_baseline()
