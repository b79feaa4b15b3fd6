"""gp.memory.stats()/snapshot() without a device read the current GPU's pool, even first thing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.gpu


def test_stats_before_any_array_read_the_gpu_pool() -> None:
    # A fresh process: nothing has chosen the backend yet when stats() is called.
    code = textwrap.dedent(
        """
        import pygpukit as gp
        host = gp.memory.host_buffer(8 << 20)   # the host pool, not the GPU's
        before = gp.memory.stats()["allocated_bytes"]
        assert before < (8 << 20), before
        x = gp.empty((1 << 20,), dtype="float32")
        after = gp.memory.stats()["allocated_bytes"]
        assert after - before >= 4 << 20, (before, after)
        assert {b["device"] for b in gp.memory.snapshot() if b["id"]} == {0}
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr
