"""The benchmark CLI on the current backend (CPU in CI): smoke run, JSON, regression gate.

No timing assertions: the only numbers checked are synthetic ones fed to the
comparison logic.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import pygpukit
from pygpukit.benchmark import (
    Case,
    Suite,
    Timed,
    check_close,
    compare_runs,
    register_suite,
    registry,
)
from pygpukit.benchmark.case import CorrectnessError
from pygpukit.benchmark.cli import main
from pygpukit.benchmark.data import parse_dtype
from pygpukit.benchmark.harness import HarnessConfig, copies_for, measure
from pygpukit.benchmark.peers import Library, PyGPUkitLibrary
from pygpukit.benchmark.results import RunResult
from pygpukit.benchmark.units import format_count, parse_size

SRC = str(Path(pygpukit.__file__).resolve().parents[1])


def _run_cli(*args: str, backend: str | None = "cpu") -> subprocess.CompletedProcess[str]:
    """The CLI in a fresh process; the CPU backend unless ``backend`` is None (auto)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    if backend is not None:
        env["PYGPUKIT_BACKEND"] = backend
    return subprocess.run(
        [sys.executable, "-m", "pygpukit.benchmark", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One `--quick --save` run on the CPU backend, shared by the tests that read its output."""
    path = tmp_path_factory.mktemp("bench") / "run.json"
    proc = _run_cli("--quick", "--save", str(path))
    assert proc.returncode == 0, proc.stderr
    return path, proc.stdout


def _ok_keys(doc: dict[str, Any]) -> list[str]:
    return [r["key"] for r in doc["results"] if r["libs"]["pygpukit"]["status"] == "ok"]


def test_quick_run_exits_0_and_writes_valid_json(quick_run: tuple[Path, str]) -> None:
    path, stdout = quick_run
    doc = json.loads(path.read_text())
    assert doc["schema"] == 1
    env = doc["environment"]
    assert env["backend"] == "cpu"
    assert env["versions"]["pygpukit"] == pygpukit.__version__
    assert env["versions"]["numpy"] == np.__version__
    assert "device" in env and "git" in env and env["timestamp"]
    assert doc["options"]["quick"] is True
    suites = {r["suite"] for r in doc["results"]}
    assert {"memory", "launch", "elementwise", "reduction", "gemm", "jit"} <= suites
    for row in doc["results"]:
        for result in row["libs"].values():
            assert result["status"] in ("ok", "skipped"), (row["key"], result["reason"])
            if result["status"] == "ok":
                assert result["median_ms"] > 0 and len(result["times_ms"]) >= 1
            else:
                assert result["reason"]
    assert _ok_keys(doc), "the quick run measured nothing"
    assert RunResult.load(path).to_dict()["results"] == doc["results"]  # round trip
    assert "== memory ==" in stdout


@pytest.mark.gpu
def test_quick_run_on_the_gpu(tmp_path: Path) -> None:
    """Every measurement of a GPU --quick run gives a correct result (peers when installed)."""
    path = tmp_path / "gpu.json"
    proc = _run_cli("--quick", "--save", str(path), backend=None)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(path.read_text())
    assert doc["environment"]["backend"] == "cuda"
    assert doc["environment"]["device"]["sm"]


def _faster(doc: dict[str, Any], factor: float) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for row in out["results"]:
        for result in row["libs"].values():
            result["times_ms"] = [t * factor for t in result["times_ms"]]
            if result.get("median_ms") is not None:
                result["median_ms"] *= factor
    return out


def test_planted_slowdown_trips_the_gate(
    quick_run: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = quick_run
    doc = json.loads(path.read_text())
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(_faster(doc, 0.8)))  # the current run is 25% slower
    status = main(["--load", str(path), "--compare", str(baseline), "--fail-on-regression", "10"])
    err = capsys.readouterr().err
    assert status != 0
    for key in _ok_keys(doc):
        assert f"REGRESSION {key}:" in err


def test_same_run_passes_the_gate(
    quick_run: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = quick_run
    status = main(["--load", str(path), "--compare", str(path), "--fail-on-regression"])
    assert status == 0
    out = capsys.readouterr().out
    assert "vs base" in out and "+0.0%" in out


def test_markdown_report(quick_run: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    path, _ = quick_run
    assert main(["--load", str(path), "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "### memory" in out and "| case | PyGPUkit | rate | SoL |" in out


def test_plot(quick_run: tuple[Path, str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path, _ = quick_run
    png = tmp_path / "run.png"
    assert main(["--load", str(path), "--plot", str(png), "--quiet"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _doc(times: dict[str, float | None]) -> dict[str, Any]:
    results = []
    for key, ms in times.items():
        lib = {"status": "ok", "median_ms": ms} if ms is not None else {"status": "failed"}
        results.append({"key": key, "libs": {"pygpukit": lib}})
    return {"schema": 1, "results": results}


def test_compare_runs_on_synthetic_numbers() -> None:
    baseline = _doc({"a": 10.0, "b": 10.0, "c": 2.0, "gone": 1.0, "broken": 3.0})
    current = _doc({"a": 12.5, "b": 10.5, "c": 1.0, "new": 4.0, "broken": None})
    result = compare_runs(baseline, current, threshold_pct=10.0)
    changes = result.by_key()
    assert changes["a"].change_pct == pytest.approx(25.0)
    assert changes["b"].change_pct == pytest.approx(5.0)
    assert changes["c"].change_pct == pytest.approx(-50.0)
    assert [c.key for c in result.regressions] == ["a"]
    assert result.only_in_baseline == ["gone", "broken"]
    assert result.only_in_current == ["new"]
    assert "broken" not in changes
    # A 20% slowdown is a regression at 10% and at 19.9%, not at 20% or above.
    slow = compare_runs(_doc({"x": 1.0}), _doc({"x": 1.2}), 10.0)
    assert [c.key for c in slow.regressions] == ["x"]
    assert compare_runs(_doc({"x": 1.0}), _doc({"x": 1.2}), 25.0).regressions == []
    with pytest.raises(ValueError):
        compare_runs(baseline, current, threshold_pct=-1.0)


def test_wrong_result_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], rng: np.random.Generator
) -> None:
    host = rng.standard_normal(256).astype(np.float32)

    def setup(lib: Library, copies: int) -> Timed:
        x = lib.upload(host, "float32")
        # The reference is 2x, the "op" returns x: a wrong result.
        return Timed(
            run=lambda i: x,
            check=lambda out: check_close(lib.download(out), 2 * host, "float32", "double"),
        )

    def cases(ctx: registry.SuiteContext) -> list[Case]:
        return [Case("broken", "double", {"n": 256}, {"pygpukit": setup})]

    monkeypatch.setattr(registry, "_SUITES", dict(registry.registered_suites()))
    register_suite(Suite("broken", "test only", cases))
    assert main(["--suite", "broken", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "FAILED broken/double[n=256] [pygpukit]: wrong result" in err


def test_filter_runs_only_the_matching_rows(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    ran: list[int] = []

    def setup_for(n: int) -> Any:
        def setup(lib: Library, copies: int) -> Timed:
            ran.append(n)
            return Timed(run=lambda i: None, check=lambda out: None)

        return setup

    def cases(ctx: registry.SuiteContext) -> list[Case]:
        return [Case("picked", op, {"n": n}, {"pygpukit": setup_for(n)})
                for op in ("a", "b") for n in (16, 32)]  # fmt: skip

    monkeypatch.setattr(registry, "_SUITES", dict(registry.registered_suites()))
    register_suite(Suite("picked", "test only", cases))
    path = tmp_path / "run.json"
    argv = ["--suite", "picked", "--filter", r"/b\[n=3", "--quiet", "--save", str(path)]
    assert main(argv) == 0
    saved = json.loads(path.read_text())
    assert [row["key"] for row in saved["results"]] == ["picked/b[n=32]"]
    assert saved["options"]["filter"] == r"/b\[n=3"
    assert set(ran) == {32}
    assert main(["--suite", "picked", "--filter", "a[", "--quiet"]) == 2
    assert "not a regular expression" in capsys.readouterr().err


def test_unregistered_suite_says_so(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Whether pygpukit-ops is installed here or not: the registry without its suites.
    suites = {n: s for n, s in registry.registered_suites().items() if not n.startswith("ops_")}
    monkeypatch.setattr(registry, "_SUITES", suites)
    assert main(["--gemv", "--dtypes", "bf16"]) == 2
    err = capsys.readouterr().err
    assert "'ops_linear' is not registered" in err and "pygpukit-ops" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--compare", "x.json", "--fail-on-regression", "--load", "missing.json"],
        ["--fail-on-regression", "10"],
        ["--dtypes", "fp7"],
        ["--sizes", "12Q"],
        ["--peers", "jax"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert "error:" in capsys.readouterr().err


def test_missing_api_is_skipped_not_failed() -> None:
    case = Case(
        "t", "op", {}, {"pygpukit": lambda lib, copies: Timed(lambda i: 0, lambda out: None)}
    )
    case.requires = ("no_such_function",)
    result = measure(case, PyGPUkitLibrary(), HarnessConfig())
    assert result.status == "skipped"
    assert result.reason == "gp.no_such_function is not available yet"


def test_sizes_dtypes_and_rotation() -> None:
    assert parse_size("4096") == 4096
    assert parse_size("64M") == parse_size("64MiB") == 64 << 20
    assert parse_size("1g") == 1 << 30
    assert format_count(1 << 20) == "1M" and format_count(1000) == "1000"
    assert parse_dtype("bf16") == "bfloat16" and parse_dtype("TF32") == "tf32"
    assert parse_dtype("fp8") == "float8_e4m3fn"
    l2 = 50 << 20
    assert copies_for(1 << 30, l2) == 1
    assert copies_for(12 << 20, l2) == 13
    assert copies_for(1024, l2) == 64
    assert copies_for(1 << 20, 0) == 1


def test_plugins_named_in_the_environment_register(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "my_suites.py").write_text(
        "from pygpukit.benchmark.registry import Suite\n"
        "SUITE = Suite('my_suite', 'test only', lambda ctx: iter(()))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(registry.PLUGINS_ENV, " my_suites:SUITE , missing_module:SUITE ")
    monkeypatch.setattr(registry, "_SUITES", {})
    monkeypatch.setattr(registry, "_LOAD_ERRORS", {})
    monkeypatch.setattr(registry, "_LOADED", False)
    assert "my_suite" in registry.registered_suites()
    assert "reduction" in registry.registered_suites()  # the built-ins too
    assert "ModuleNotFoundError" in registry.load_errors()["missing_module:SUITE"]


# --- speed of light never above 100%; --sizes that cannot fit refused before the run ----------


def test_speed_of_light_never_reads_above_100_percent(quick_run: tuple[Path, str]) -> None:
    path, stdout = quick_run
    doc = json.loads(path.read_text())
    pcts = [r["pct_of_ceiling"] for r in doc["results"] if r["pct_of_ceiling"] is not None]
    assert pcts, "no row has a speed-of-light figure"
    assert all(0 < p <= 100.0 for p in pcts)
    for row in doc["results"]:
        ceiling = doc["ceilings"].get(row["ceiling"]) if row["ceiling"] else None
        rate = row["libs"]["pygpukit"].get("rate")
        if ceiling and ceiling["value"] and rate:
            # a row faster than its ceiling is flagged, and then reads exactly 100%
            assert row["exceeds_ceiling"] == (rate > ceiling["value"])
            if row["exceeds_ceiling"]:
                assert row["pct_of_ceiling"] == 100.0
    for line in stdout.splitlines():
        for cell in line.split():
            if cell.endswith("%") and cell[:-1].isdigit():
                assert int(cell[:-1]) <= 100, line


def _ceiling(name: str, value: float, unit: str = "GB/s") -> Any:
    from pygpukit.benchmark.results import Ceiling

    return Ceiling(name, value, unit, measured_with="torch", how="test")


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.999, 1.001, 3.0, 250.0])
def test_pct_of_ceiling_is_capped_and_flagged(ratio: float, rng: np.random.Generator) -> None:
    from pygpukit.benchmark.results import LibResult, Row

    ms = float(rng.uniform(0.01, 5.0))
    nbytes = int(rng.integers(1 << 10, 1 << 30))
    row = Row("s/op", "s", "op", {}, "device", bytes_moved=nbytes, ceiling="copy_bw")
    row.libs["pygpukit"] = LibResult("ok", times_ms=[ms])
    rate = row.rate("pygpukit")
    assert rate is not None
    ceilings = {"copy_bw": _ceiling("copy_bw", rate / ratio)}
    pct = row.pct_of_ceiling("pygpukit", ceilings)
    assert pct == pytest.approx(min(100.0 * ratio, 100.0))
    assert row.pct_of_ceiling("pygpukit", ceilings, cap=False) == pytest.approx(100.0 * ratio)
    assert row.exceeds_ceiling("pygpukit", ceilings) == (100.0 * ratio > 100.0)


def test_a_row_faster_than_its_ceiling_gets_the_ceiling_at_its_own_size() -> None:
    """A 64 KiB copy (in cache) against a copy_bw ceiling measured on a large buffer."""
    from pygpukit.benchmark.ceilings import Ceilings
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.harness import run_case
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.benchmark.suites.memory import copy_case

    rng = np.random.default_rng()
    ctx = SuiteContext("cpu", True, DataCache(rng), rng)
    lib = PyGPUkitLibrary()
    cfg = HarnessConfig(max_reps=5, min_reps=3, budget_s=0.05, warmup_s=0.01)
    ceilings = Ceilings(ctx, [lib], cfg)
    case = copy_case(ctx, 64 * 1024)
    row = run_case(case, [lib], cfg, {})
    rate = row.rate("pygpukit")
    assert rate is not None
    ceilings.values["copy_bw"] = _ceiling("copy_bw", rate / 2)  # the row is twice as fast
    ceilings.fit(case, row)
    assert row.ceiling == "copy_bw@bytes=64KiB"
    sized = ceilings.values[row.ceiling]
    assert sized.value is not None and sized.how.endswith("memory/copy_d2d[bytes=64KiB]")
    assert row.pct_of_ceiling("pygpukit", ceilings.values) <= 100.0


@pytest.mark.parametrize(
    ("suite", "size"),
    [
        ("memory", "1T"),
        ("memory", "256T"),
        ("elementwise", "1T"),
        ("reduction", "4T"),
        ("gemm", "1M"),
        ("gemm", "4M"),
    ],
)
def test_sizes_larger_than_memory_are_refused_before_the_run(suite: str, size: str) -> None:
    proc = _run_cli("--quick", "--suite", suite, "--sizes", f"1K,{size}")
    assert proc.returncode == 2, proc.stderr
    assert f"--sizes {size} is too large for the {suite} suite: it needs" in proc.stderr
    assert "GiB of host memory (it has" in proc.stderr and "nothing was run" in proc.stderr
    assert "ceiling" not in proc.stderr and "[  1" not in proc.stderr  # nothing measured
    assert "--sizes 1K" not in proc.stderr


@pytest.mark.parametrize("suite", ["memory", "elementwise", "reduction", "gemm"])
def test_sizes_that_fit_are_accepted(suite: str) -> None:
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.footprint import check_sizes_fit
    from pygpukit.benchmark.registry import SuiteContext, registered_suites

    rng = np.random.default_rng()
    ctx = SuiteContext("cpu", True, DataCache(rng), rng, sizes=[64, 4096])
    check_sizes_fit(ctx, [registered_suites()[suite]])
    footprint = registered_suites()[suite].footprint
    assert footprint is not None
    assert footprint(ctx, 8192).device > footprint(ctx, 4096).device > 0


@pytest.mark.gpu
@pytest.mark.parametrize(("suite", "size"), [("memory", "128G"), ("gemm", "192K")])
def test_sizes_larger_than_gpu_memory_are_refused_on_the_gpu(suite: str, size: str) -> None:
    proc = _run_cli("--quick", "--suite", suite, "--sizes", size, backend=None)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--sizes {size} is too large for the {suite} suite" in proc.stderr
    assert "of GPU memory (it has" in proc.stderr and "nothing was run" in proc.stderr


class _LoggingLibrary(Library):
    """A host-only library double whose runs append its name to a shared log."""

    module = None
    on_gpu = False

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    @property
    def version(self) -> str:
        return "0"

    def upload(self, host: np.ndarray, dtype: str) -> Any:
        return host

    def download(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def synchronize(self) -> None:
        self.log.append(f"sync {self.name}")

    def device_timer(self) -> Any:
        raise AssertionError("host-only")


def test_interleaved_case_alternates_the_libraries_and_keeps_a_failure_apart() -> None:
    """``Case.interleave``: every library is checked and warmed up first, then their timed
    repetitions alternate; a library whose check fails is reported failed, the others timed."""
    from pygpukit.benchmark.harness import run_case

    log: list[str] = []
    libs = [_LoggingLibrary(name, log) for name in ("pygpukit", "torch", "cupy")]

    def setup(lib: Library, copies: int) -> Timed:
        def run(i: int) -> str:
            log.append(lib.name)
            return lib.name

        def check(out: Any) -> None:
            if lib.name == "cupy":
                raise CorrectnessError("planted")

        return Timed(run=run, check=check)

    case = Case("t", "op", {}, dict.fromkeys(("pygpukit", "torch", "cupy"), setup))
    case.interleave = True
    # One call per repetition (the smallest target), four repetitions.
    cfg = HarnessConfig(max_reps=4, min_reps=4, budget_s=0.0, warmup_s=0.0, target_rep_ms=1e-9)
    row = run_case(case, libs, cfg, {})
    assert row.libs["cupy"].status == "failed" and "planted" in row.libs["cupy"].reason
    for name in ("pygpukit", "torch"):
        assert row.libs[name].status == "ok" and len(row.libs[name].times_ms) == 4
    runs = [e for e in log if not e.startswith("sync")]
    # Each library: one checked run, two warm-up runs; then the timed ones alternate.
    assert runs[:3] == ["pygpukit"] * 3 and runs[3:6] == ["torch"] * 3 and runs[6] == "cupy"
    assert runs[7:] == ["pygpukit", "torch"] * 4
