"""The ops package's structure: launch constants come from the kernels (or agree with their
sources), and op bodies never branch on the backend (the NumPy versions live in
ops/reference, chosen once)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from pygpukit.ops import _constants as k

OPS = Path(__file__).resolve().parents[2] / "packages" / "pygpukit-ops" / "src" / "pygpukit" / "ops"


def constexpr(file: str, name: str) -> int:
    """The value of ``constexpr int <name> = <int>;`` in ``kernels/<file>``."""
    text = (OPS / "kernels" / file).read_text(encoding="utf-8")
    found = re.findall(rf"constexpr int [^;]*\b{name} = (\d+)", text)
    assert len(found) == 1, f"{name} in {file}: {found}"
    return int(found[0])


def test_constants_not_exported_by_the_kernels_match_the_sources() -> None:
    """The few launch constants still kept in Python agree with the kernel sources."""
    assert constexpr("sampling.cu", "kThreads") == k.SAMPLING_THREADS
    from pygpukit.ops import _kernel_loader as kl

    # The Hopper kernels' launch bounds are exported (PREFILL_WGMMA_{PIPE,TMA}_THREADS).
    for kind, threads in k.PREFILL_WGMMA_THREADS.items():
        assert kl.constant("attention_prefill", f"PREFILL_{kind.upper()}_THREADS") == threads, kind


def test_launch_geometry_comes_from_the_manifest() -> None:
    """The accessors the plans use read the kernels' exported constants."""
    from pygpukit.ops import _kernel_loader as kl

    assert k.gemv_rows_per_block("mma") == kl.constant("gemv", "GEMV_MMA_ROWS_PER_BLOCK")
    assert k.decode_heads_per_cta("simt") == kl.constant("attention_decode", "DECODE_SIMT_HEADS")
    for d in (64, 80, 96, 128, 256):
        rows, keys, stride = k.prefill_mma_tiles(d)
        assert rows == kl.constant("attention_prefill", f"PREFILL_ROWS_D{d}")
        assert keys == kl.constant("attention_prefill", f"PREFILL_KEYS_D{d}")
        assert stride == d + 8  # rows padded by 16 bytes


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
