"""Bad input to pygpukit.tts: each a typed error that says what was wrong, nothing crashes."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from tts_files import write_tiny_checkpoint

from pygpukit import tts
from pygpukit.errors import PyGPUkitError
from pygpukit.tts import text as text_module


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kokoro_bad")
    write_tiny_checkpoint(folder)
    return folder


@pytest.fixture(scope="module")
def tiny(tiny_dir):
    return tts.load(tiny_dir)


def test_unknown_phoneme_symbols(tiny):
    with pytest.raises(tts.PhonemeError, match=r"\['Z', '€'\]"):
        tiny.synthesize(phonemes="hˈɛloʊ Z€", voice="af_test")


def test_empty_text_and_phonemes(tiny):
    with pytest.raises(tts.PhonemeError, match="empty"):
        tiny.synthesize("   ", voice="af_test")
    with pytest.raises(tts.PhonemeError, match="empty"):
        tiny.synthesize(phonemes="", voice="af_test")
    with pytest.raises(tts.PhonemeError, match="exactly one"):
        tiny.synthesize("hi", phonemes="hˈaɪ", voice="af_test")
    with pytest.raises(tts.PhonemeError, match="empty"):
        tiny.synthesize_batch([], voice="af_test")


def test_text_without_g2p(tiny, monkeypatch):
    monkeypatch.setattr(text_module, "find_g2p", lambda lang, vocab: None)
    with pytest.raises(tts.G2PUnavailableError, match=r"pygpukit-tts\[g2p\].*espeak-ng"):
        tiny.synthesize("Hello world", voice="af_test")


def test_unknown_voice(tiny):
    with pytest.raises(tts.VoiceError, match=r"unknown voice 'nobody'.*af_test"):
        tiny.synthesize(phonemes="hˈaɪ", voice="nobody")


def test_voice_table_of_the_wrong_shape(tiny, tiny_dir, tmp_path):
    with pytest.raises(tts.VoiceError, match=r"shape \(100, 1, 32\).*\[510, 1, 32\]"):
        tiny.synthesize(phonemes="hˈaɪ", voice=np.ones((100, 1, 32), np.float32))
    np.save(tmp_path / "wide.npy", np.ones((510, 1, 100), np.float32))
    with pytest.raises(tts.VoiceError, match="'wide'"):
        tts.load(tiny_dir, voices=tmp_path / "wide.npy")
    with pytest.raises(tts.VoiceError, match="NaN"):
        tiny.add_voice("nan", np.full((510, 1, 32), np.nan, np.float32))


def test_pickled_voice_archive_is_refused(tiny_dir, tmp_path):
    path = tmp_path / "voices-v1.0.bin"
    path.write_bytes(pickle.dumps({"af": np.ones((510, 1, 32))}))
    with pytest.raises(tts.VoiceError, match="pickled voices are refused"):
        tts.load(tiny_dir, voices=path)
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(tts.VoiceError):
        tts.load(tiny_dir, voices=tmp_path / "obj.npy")


@pytest.mark.parametrize("speed", [0, -1.0, float("nan"), float("inf")])
def test_bad_speed(tiny, speed):
    with pytest.raises(tts.PhonemeError, match="speed"):
        tiny.synthesize(phonemes="hˈaɪ", voice="af_test", speed=speed)


def _tiny_onnx(path):
    onnx = pytest.importorskip("onnx")
    h = onnx.helper
    graph = h.make_graph(
        [h.make_node("Add", ["a", "b"], ["c"], name="/add/Add")],
        "not_kokoro",
        [h.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [2]) for n in ("a", "b")],
        [h.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [2])],
    )
    onnx.save(h.make_model(graph), str(path))


def test_non_kokoro_onnx(tmp_path):
    _tiny_onnx(tmp_path / "add.onnx")
    with pytest.raises(tts.ModelFileError, match="not a kokoro-onnx export"):
        tts.load(tmp_path / "add.onnx")


def test_truncated_onnx(tmp_path):
    _tiny_onnx(tmp_path / "add.onnx")
    data = (tmp_path / "add.onnx").read_bytes()
    (tmp_path / "cut.onnx").write_bytes(data[: len(data) // 2])
    with pytest.raises(tts.ModelFileError, match="truncated or corrupt"):
        tts.load(tmp_path / "cut.onnx")
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(tts.ModelFileError, match="empty"):
        tts.load(tmp_path / "empty.onnx")


def test_pth_is_refused_with_the_conversion(tmp_path):
    (tmp_path / "kokoro-v1_0.pth").write_bytes(pickle.dumps({"bert": {}}))
    for target in (tmp_path / "kokoro-v1_0.pth", tmp_path):
        with pytest.raises(tts.ModelFileError, match=r"pickle.*safetensors"):
            tts.load(target)


def test_config_that_contradicts_the_weights(tiny_dir, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes((tiny_dir / "model.safetensors").read_bytes())
    config = json.loads((tiny_dir / "config.json").read_text())
    config["hidden_dim"] = 48
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(tts.ModelFileError, match="contradicts the weights"):
        tts.load(folder)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(tts.ModelFileError, match="JSON"):
        tts.load(folder)


def test_truncated_safetensors_and_missing_paths(tiny_dir, tmp_path):
    data = (tiny_dir / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[: len(data) - 100])
    with pytest.raises(tts.ModelFileError, match="truncated"):
        tts.load(tmp_path / "model.safetensors")
    with pytest.raises(tts.ModelFileError, match="no such file"):
        tts.load(tmp_path / "missing")
    with pytest.raises(tts.VoiceError, match="no such voice"):
        tts.load(tiny_dir, voices=tmp_path / "nowhere")


def test_ten_thousand_characters_are_chunked_not_refused(tiny, monkeypatch):
    sentence = "hˈɛloʊ wˈɜːld, ðɪs ɪz ə lˈɔŋ tˈɛkst. "
    text = (sentence * (10_000 // len(sentence) + 1))[:10_000]
    # Text goes through G2P: an identity converter stands in for misaki here.
    monkeypatch.setattr(text_module, "find_g2p", lambda lang, vocab: lambda t: t)
    chunks = tiny.stream(text, voice="af_test")
    first = next(chunks)
    assert 0 < len(first.phonemes) <= 510
    assert len(first.samples) > 0


def test_errors_are_pygpukit_errors():
    for kind in (tts.ModelFileError, tts.VoiceError, tts.PhonemeError, tts.G2PUnavailableError):
        assert issubclass(kind, tts.TTSError) and issubclass(kind, PyGPUkitError)
    with pytest.raises(ValueError, match="device"):
        tts.load("x", device=-1)
