"""The load progress bar: tqdm on a TTY after one second, silent otherwise or when off."""

from __future__ import annotations

import io

import numpy as np
from llm_files import write_hf_folder
from tqdm import tqdm

from pygpukit.llm.loading import checkpoint as checkpoint_module
from pygpukit.llm.loading import open_checkpoint


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_bar_only_on_a_terminal_and_when_enabled(monkeypatch):
    monkeypatch.setattr("sys.stderr", _Terminal())
    bar = checkpoint_module.progress_bar(1000, "model", True)
    assert isinstance(bar, tqdm) and bar.total == 1000 and bar.delay == 1.0
    bar.close()
    assert not isinstance(checkpoint_module.progress_bar(1000, "model", False), tqdm)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert not isinstance(checkpoint_module.progress_bar(1000, "model", True), tqdm)


def test_load_reports_every_byte(tmp_path, rng, monkeypatch):
    tensors = {f"t{i}": rng.standard_normal((i + 1, 16)).astype(np.float16) for i in range(5)}
    folder = write_hf_folder(tmp_path / "m", {}, [tensors])
    calls = {}

    class Recorder:
        def __init__(self, total, desc, enabled):
            calls.update(total=total, desc=desc, enabled=enabled, seen=0, closed=False)

        def update(self, n):
            calls["seen"] += n

        def close(self):
            calls["closed"] = True

    monkeypatch.setattr(checkpoint_module, "progress_bar", Recorder)
    with open_checkpoint(folder) as ck:
        ck.load("float32", progress=False)
    total = sum(a.nbytes for a in tensors.values())
    assert calls == {"total": total, "desc": "m", "enabled": False, "seen": total, "closed": True}
