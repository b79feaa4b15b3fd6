"""``python -m pygpukit speak``: phonemes to a .wav through the CLI tree, and its errors."""

from __future__ import annotations

import io

import pytest

from pygpukit import cli
from pygpukit.tts.random_model import write_random_checkpoint


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return write_random_checkpoint(tmp_path_factory.mktemp("speak") / "m")


def test_speak_phonemes_writes_a_wav(model_dir, tmp_path):
    soundfile = pytest.importorskip("soundfile")
    out = tmp_path / "out.wav"
    rc = cli.main(
        ["speak", "--phonemes", "hˈaɪ ðɛɹ.", "--model", str(model_dir), "--voice", "random",
         "-o", str(out), "--speed", "1.2"]
    )  # fmt: skip
    assert rc == 0
    data, sr = soundfile.read(out)
    assert sr == 24000 and len(data) > 0


def test_speak_reports_bad_input(model_dir, capsys):
    rc = cli.main(["speak", "--phonemes", "hˈaɪ", "--model", str(model_dir), "--voice", "x"])
    assert rc == 1
    assert "unknown voice 'x'" in capsys.readouterr().err
    rc = cli.main(["speak", "--model", str(model_dir), "--voice", "random"])
    assert rc == 2


def test_speak_command_direct(model_dir, tmp_path):
    pytest.importorskip("soundfile")
    import argparse

    from pygpukit.tts.cli import speak_arguments, speak_command

    parser = argparse.ArgumentParser()
    speak_arguments(parser)
    args = parser.parse_args(
        [
            "--phonemes",
            "ə",
            "--model",
            str(model_dir),
            "--voice",
            "random",
            "-o",
            str(tmp_path / "a.wav"),
        ]
    )
    out, err = io.StringIO(), io.StringIO()
    assert speak_command(args, out, err) == 0
    assert "s of audio" in out.getvalue()
