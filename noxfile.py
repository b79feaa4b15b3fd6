"""Developer and CI sessions: `nox -s tests | lint | wheels | bench | version`.

`nox -s tests` is the README's test command; `.ci/run` runs `nox -s lint`, then it.
"""

from __future__ import annotations

import os
import pathlib
import shutil

import nox

ROOT = pathlib.Path(__file__).parent
# Build order matters only for pip's resolver: every sibling is given as a path.
PACKAGES = [
    "pygpukit-runtime",
    "pygpukit-ops",
    "pygpukit-llm",
    "pygpukit-asr",
    "pygpukit-tts",
    "pygpukit",
]
DEFAULT_ARCHS = "80;86;89;90a;100a;120a"
# The tests session compiles the built-in kernels for one SM of each code path they take: below
# SM 90 (mma.sync), sm_90a (its wgmma/TMA features) and above SM 90 without them. Every path and
# every kernel still has to compile, in half the time of the six release SMs (`nox -s wheels`).
TEST_ARCHS = "80;90a;120a"
# pytest's workers (pytest-xdist): a test file stays on one worker (`--dist loadfile`), so a
# module-scoped model is loaded once, and files are handed out in collection order (where
# tests/conftest.py puts the real-model files first) rather than by test count; one BLAS / OpenMP
# thread each, so the workers do not fight over the cores. `nox -s tests -- -n 0`: one process.
PYTEST_WORKERS = min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)
WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
TEST_DEPS = [
    "numpy",
    "ml_dtypes",
    "pytest",
    "pytest-xdist>=3.6",
    "hypothesis",
    "tokenizers",
    "jinja2",
    "tqdm",
    # tts: kokoro-onnx files and the onnxruntime reference
    "onnx",
    "onnxruntime",
    # audio ops: references (librosa, soxr) and load_audio's reader (soundfile)
    "librosa",
    "soxr",
    "soundfile",
    # the LLM server (pygpukit-llm[serve]) and the clients its tests talk to it with
    "fastapi",
    "uvicorn",
    "openai",
    "httpx",
]
# Pinned: a new ruff or clang-format release reformats code, and CI must not fail on a release day.
LINT_TOOLS = ["ruff==0.17.6", "mypy==2.4.1", "clang-format==23.1.5"]

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True


def _archs(default: str = DEFAULT_ARCHS) -> str:
    return os.environ.get("PYGPUKIT_CUDA_ARCHS") or default


def _install_packages(session: nox.Session, archs: str) -> None:
    env = {"PYGPUKIT_CUDA_ARCHS": archs}
    session.install(*(f"./packages/{p}" for p in PACKAGES), env=env)


@nox.session
def tests(session: nox.Session) -> None:
    """Build every package into this venv, run pytest, then cargo test."""
    session.install(*TEST_DEPS)
    _install_packages(session, _archs(TEST_ARCHS))
    # The checkout has no top-level pygpukit/ folder, so `import pygpukit` is the installed one.
    # Exit code 5 is pytest's "no tests collected" (e.g. `-m gpu` on a machine without one).
    session.run(
        "python",
        "-m",
        "pytest",
        "-c",
        str(ROOT / "pyproject.toml"),
        "--rootdir",
        str(ROOT),
        "-n",
        str(PYTEST_WORKERS),
        "--dist",
        "loadfile",
        "--no-loadscope-reorder",
        str(ROOT / "tests"),
        *session.posargs,
        env=WORKER_ENV,
        success_codes=[0, 5],
    )
    session.run("cargo", "test", "--workspace", "--locked", external=True)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff, mypy, clippy, rustfmt and clang-format: everything must be clean."""
    session.install(
        *LINT_TOOLS,
        "numpy",
        "ml_dtypes",
        "pytest",
        "hypothesis",
        "tokenizers",
        "jinja2",
        "tqdm",
    )
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run(
        "mypy",
        "packages/pygpukit-runtime/src/pygpukit",
        "packages/pygpukit-ops/src/pygpukit/ops",
        "packages/pygpukit-llm/src/pygpukit/llm",
        "packages/pygpukit-asr/src/pygpukit/asr",
        "packages/pygpukit-tts/src/pygpukit/tts",
        "tools",
    )
    session.run("cargo", "fmt", "--all", "--check", external=True)
    session.run(
        "cargo",
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
        external=True,
    )
    native = [
        str(p)
        for p in sorted((ROOT / "native").rglob("*"))
        if p.suffix in {".cpp", ".hpp", ".h", ".cu", ".cuh"}
    ]
    native += [
        str(p)
        for pattern in ("kernels/*", "include/pygpukit/*")
        for p in sorted((ROOT / "packages").rglob(pattern))
        if p.suffix in {".cu", ".cuh"}
    ]
    session.run("clang-format", "--dry-run", "--Werror", *native)


@nox.session
def wheels(session: nox.Session) -> None:
    """Wheels of every package for the SMs in PYGPUKIT_CUDA_ARCHS, checked and import-tested."""
    out = ROOT / "wheelhouse"
    shutil.rmtree(out, ignore_errors=True)
    env = {"PYGPUKIT_CUDA_ARCHS": _archs()}
    for package in PACKAGES:
        session.run(
            "python",
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-w",
            str(out),
            f"./packages/{package}",
            env=env,
        )
    session.run("python", "tools/check_wheels.py", str(out), "--archs", _archs())
    # Install into a clean venv (not this session's) and import.
    venv = pathlib.Path(session.create_tmp()) / "clean-venv"
    shutil.rmtree(venv, ignore_errors=True)
    session.run("python", "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    wheels = [str(w) for w in sorted(out.glob("*.whl"))]
    session.run(python, "-m", "pip", "install", "-q", *wheels, external=True)
    session.run(
        python, "-c", "import pygpukit, pygpukit.ops; print(pygpukit.__version__)", external=True
    )


@nox.session
def bench(session: nox.Session) -> None:
    """Install the packages and run `python -m pygpukit.benchmark` with the given arguments."""
    session.install(*TEST_DEPS)
    _install_packages(session, _archs())
    session.run("python", "-m", "pygpukit.benchmark", *session.posargs)


@nox.session(python=False)
def version(session: nox.Session) -> None:
    """Check that every package and crate has one version; `-- X.Y.Z` sets it."""
    session.run("python3", "tools/version.py", *session.posargs)
