"""The ops package's structure: kernel constants agree with the kernel sources, and op bodies
never branch on the backend (the NumPy versions live in ops/reference, chosen once)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pygpukit.ops import _constants as k

OPS = Path(__file__).resolve().parents[2] / "packages" / "pygpukit-ops" / "src" / "pygpukit" / "ops"


def constexpr(file: str, name: str) -> int:
    """The value of ``constexpr int <name> = <int>;`` in ``kernels/<file>``."""
    text = (OPS / "kernels" / file).read_text(encoding="utf-8")
    found = re.findall(rf"constexpr int [^;]*\b{name} = (\d+)", text)
    assert len(found) == 1, f"{name} in {file}: {found}"
    return int(found[0])


@pytest.mark.parametrize(
    ("value", "file", "name"),
    [
        (k.GEMV_WARPS, "gemv.cu", "kWarps"),
        (k.DECODE_THREADS, "attention_decode.cu", "kThreads"),
        (k.DECODE_HEADS_PER_CTA["simt"], "attention_decode.cu", "kG"),
        (k.DECODE_HEADS_PER_CTA["mma"], "attention_decode.cu", "kTcHeads"),
        (k.DECODE_HEADS_PER_CTA["mma2"], "attention_decode.cu", "kTcHeads"),
        (k.DECODE_TILE, "attention_decode.cu", "kTcTile"),
        (k.DECODE_MAX_SPLITS, "attention_decode.cu", "kMaxSplits"),
        (k.PREFILL_THREADS, "attention_prefill.cu", "kThreads"),
        (k.SAMPLING_THREADS, "sampling.cu", "kThreads"),
    ],
)
def test_kernel_constants_match_the_sources(value: int, file: str, name: str) -> None:
    if name == "kThreads" and file == "attention_prefill.cu":
        assert value == 32 * constexpr(file, "kWarps")
        return
    assert value == constexpr(file, name)


def test_prefill_tiles_match_the_source() -> None:
    """attention_prefill.cu Config<D>: kBM = kWarps * 16 * kMT with kMT = 2 up to D = 128."""
    text = (OPS / "kernels" / "attention_prefill.cu").read_text(encoding="utf-8")
    assert "kMT = D <= 128 ? 2 : 1;" in text
    assert "kBM = kWarps * 16 * kMT;" in text
    assert "kBN = D > 80 ? 32 : 64;" in text
    assert k.prefill_mma_tiles(128) == (128, 32) and k.prefill_mma_tiles(256) == (64, 32)
    assert k.prefill_mma_tiles(64) == (128, 64) and k.prefill_mma_tiles(80) == (128, 64)


def _op_modules() -> list[Path]:
    skip = {"_plan.py", "_common.py"}
    return [
        p
        for p in sorted(OPS.rglob("*.py"))
        if p.name not in skip and "benchmarks" not in p.parts and "reference" not in p.parts
    ]


def test_op_bodies_do_not_branch_on_the_backend() -> None:
    """Only _plan.per_backend asks which backend runs; op modules call what it chose."""
    offenders = []
    for path in _op_modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name = ast.unparse(node.func)
                if name.endswith(("on_cpu", "backend_name", "on_gpu", "is_cuda_available")):
                    offenders.append(f"{path.name}:{node.lineno} {name}()")
    assert not offenders, offenders


def test_reference_modules_are_numpy_only() -> None:
    """ops/reference holds NumPy versions: no GPUArray, no runtime import."""
    for path in sorted((OPS / "reference").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert all(
                n.split(".")[0] in {"numpy", "math", "__future__", "typing"} for n in names
            ), f"{path.name}:{node.lineno} imports {names}"
