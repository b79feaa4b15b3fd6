"""The CLI tours and backend selection, each in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pygpukit as gp

ON_GPU = gp.is_cuda_available()


def _run(code_or_args: list[str] | str, **env: str) -> subprocess.CompletedProcess[str]:
    args = ["-c", code_or_args] if isinstance(code_or_args, str) else code_or_args
    full_env = {**os.environ, **env}
    for key, value in env.items():
        if value == "<unset>":
            full_env.pop(key)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, env=full_env, timeout=120
    )


def test_info_reports_backend_device_and_libraries() -> None:
    out = _run(["-m", "pygpukit", "info"])
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"backend: {gp.backend_name()}" in text
    for library in ("libcuda:", "NVRTC:", "cuBLASLt:", "kernel cache:"):
        assert library in text
    if not ON_GPU:
        assert "(" in text.splitlines()[1]  # the reason for the CPU backend is given


def test_demo_runs_on_this_backend() -> None:
    out = _run(["-m", "pygpukit", "demo"])
    assert out.returncode == 0, out.stderr
    assert f"done on the {gp.backend_name()} backend" in out.stdout
    assert "round-trips to NumPy exactly" in out.stdout


def test_usage_and_unknown_command() -> None:
    usage = _run(["-m", "pygpukit"])
    assert usage.returncode == 0 and "info" in usage.stdout and "bench" in usage.stdout
    bad = _run(["-m", "pygpukit", "frobnicate"])
    assert bad.returncode == 2 and "unknown command 'frobnicate'" in bad.stderr


def test_bench_forwards_its_arguments() -> None:
    out = _run(["-m", "pygpukit", "bench", "--help"])
    assert out.returncode == 0, out.stderr
    assert "usage: python -m pygpukit.benchmark" in out.stdout


def test_import_selects_no_backend() -> None:
    code = (
        "import sys, pygpukit\n"
        "from pygpukit.backend import select\n"
        "assert select._selected is None\n"
        "assert 'pygpukit._native' not in sys.modules\n"
        "print('lazy')\n"
    )
    out = _run(code)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "lazy"


@pytest.mark.skipif(ON_GPU, reason="the fallback notice needs a machine without a usable GPU")
def test_fallback_notice_is_issued_once_and_says_why() -> None:
    code = (
        "import warnings, pygpukit as gp\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    gp.zeros((2,)); gp.ones((3,)); gp.is_cuda_available()\n"
        "notes = [x for x in w if issubclass(x.category, gp.BackendFallbackWarning)]\n"
        "print(len(notes)); print(notes[0].message); print(notes[0].filename)\n"
    )
    out = _run(code, PYGPUKIT_BACKEND="<unset>")
    assert out.returncode == 0, out.stderr
    count, message, filename = out.stdout.strip().splitlines()
    assert count == "1"
    assert message.startswith("Falling back to CPU simulation backend: ")
    assert filename == "<string>"  # attributed to the caller, not to pygpukit internals


def test_forced_cpu_backend_is_silent() -> None:
    code = (
        "import warnings, pygpukit as gp\n"
        "warnings.simplefilter('error')\n"
        "assert gp.backend_name() == 'cpu'\n"
        "print(gp.from_numpy(__import__('numpy').arange(3)).to_numpy().sum())\n"
    )
    out = _run(code, PYGPUKIT_BACKEND="cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "3"


def test_unknown_backend_name_is_an_error() -> None:
    out = _run("import pygpukit as gp; gp.zeros(1)", PYGPUKIT_BACKEND="tpu")
    assert out.returncode != 0
    assert "PYGPUKIT_BACKEND='tpu' is not valid; allowed: cpu, cuda" in out.stderr
