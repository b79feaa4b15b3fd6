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
TEST_DEPS = [
    "numpy",
    "ml_dtypes",
    "pytest",
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
]
# Pinned: a new ruff or clang-format release reformats code, and CI must not fail on a release day.
LINT_TOOLS = ["ruff==0.17.6", "mypy==2.4.1", "clang-format==23.1.5"]

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True


def _archs() -> str:
    return os.environ.get("PYGPUKIT_CUDA_ARCHS") or DEFAULT_ARCHS


def _install_packages(session: nox.Session) -> None:
    env = {"PYGPUKIT_CUDA_ARCHS": _archs()}
    session.install(*(f"./packages/{p}" for p in PACKAGES), env=env)


@nox.session
def tests(session: nox.Session) -> None:
    """Build every package into this venv, run pytest, then cargo test."""
    session.install(*TEST_DEPS)
    _install_packages(session)
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
        str(ROOT / "tests"),
        *session.posargs,
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
    _install_packages(session)
    session.run("python", "-m", "pygpukit.benchmark", *session.posargs)


@nox.session(python=False)
def version(session: nox.Session) -> None:
    """Check that every package and crate has one version; `-- X.Y.Z` sets it."""
    session.run("python3", "tools/version.py", *session.posargs)
