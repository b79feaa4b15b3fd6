"""``python -m pygpukit transcribe``: formats, output folder, errors per file; the writers."""

from __future__ import annotations

import io
import json
import wave

import numpy as np
import pytest
from asr_clips import DATA

from pygpukit import cli
from pygpukit.asr import Segment, Transcription
from pygpukit.asr.formats import render, timestamp


def _wav(path, pcm: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(pcm.astype("<i2").tobytes())


def _run(argv):
    parser = cli.build_parser("transcribe")
    args = parser.parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    from pygpukit.asr.cli import transcribe_command

    return transcribe_command(args, out=out, err=err), out.getvalue(), err.getvalue()


def test_transcribe_files_into_a_folder(tiny_en_dir, tmp_path):
    pytest.importorskip("soundfile")
    _wav(tmp_path / "fox.wav", np.load(DATA / "fox.npy"))
    wav, missing = str(tmp_path / "fox.wav"), str(tmp_path / "missing.wav")
    folder, model = str(tmp_path / "out"), str(tiny_en_dir)
    code, out, err = _run(["transcribe", wav, missing, "--model", model, "--dtype", "float32",
                           "--output-format", "srt", "--output-dir", folder])  # fmt: skip
    assert code == 1 and "missing.wav: " in err and "no such audio file" in err
    srt = (tmp_path / "out" / "fox.srt").read_text()
    assert srt.startswith("1\n00:00:0") and "-->" in srt and "fox" in srt.lower()
    assert not (tmp_path / "out" / "missing.srt").exists() and out == ""


def test_formats():
    seg = [Segment(0.0, 1.5, " Hello.", [1], -0.2, 1.1, 0.01),
           Segment(61.25, 3725.5, " World", [2], -0.3, 1.0, 0.02)]  # fmt: skip
    r = Transcription(" Hello. World", "en", seg, 3726.0)
    assert render(r, "txt") == "Hello.\nWorld\n"
    assert render(r, "srt").splitlines()[:3] == ["1", "00:00:00,000 --> 00:00:01,500", "Hello."]
    assert "00:01:01.250 --> 01:02:05.500" in render(r, "vtt")
    assert render(r, "vtt").startswith("WEBVTT\n\n")
    assert json.loads(render(r, "json"))["segments"][1]["end"] == 3725.5
    assert timestamp(0.0004) == "00:00:00.000"
    with pytest.raises(ValueError, match="output format"):
        render(r, "docx")
