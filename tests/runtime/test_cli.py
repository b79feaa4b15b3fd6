"""The CLI tours and backend selection, each in a fresh interpreter."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

import pygpukit as gp
from pygpukit import cli
from pygpukit.cli import COMMANDS, Command

ROOT = Path(__file__).resolve().parents[2]

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
    assert usage.returncode == 0
    for command in COMMANDS:
        assert f"{command.name} " in usage.stdout and command.summary[:30] in usage.stdout
    bad = _run(["-m", "pygpukit", "frobnicate"])
    assert bad.returncode == 2 and "invalid choice: 'frobnicate'" in bad.stderr


# The console command runs pygpukit.__main__:main with argv[0] naming the script.
CONSOLE = (
    "import sys; sys.argv[0] = '/usr/bin/pygpukit'\n"
    "from pygpukit.__main__ import main\n"
    "sys.exit(main())"
)


@pytest.mark.parametrize("launcher", ["module", "console"])
def test_version(launcher: str) -> None:
    prefix = ["-m", "pygpukit"] if launcher == "module" else ["-c", CONSOLE]
    out = _run([*prefix, "--version"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"PyGPUkit {gp.__version__} (Python ")


@pytest.mark.parametrize("launcher", ["module", "console"])
@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_help_of_every_command_describes_it_without_running_it(launcher: str, command: str) -> None:
    prefix = ["-m", "pygpukit"] if launcher == "module" else ["-c", CONSOLE]
    out = _run([*prefix, command, "--help"])
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: ")
    if command != "bench":  # bench forwards --help to python -m pygpukit.benchmark
        program = "python -m pygpukit" if launcher == "module" else "pygpukit"
        assert out.stdout.startswith(f"usage: {program} {command} [-h]")
    for output_of_a_run in ("backend:", "done on the", "elementwise  bandwidth"):
        assert output_of_a_run not in out.stdout


@pytest.mark.parametrize("command", [c.name for c in COMMANDS if not c.passthrough])
def test_unknown_option_is_reported_with_the_commands_usage(command: str) -> None:
    # Commands with positional arguments get them, so that the unknown option is the error.
    positionals = {
        "chat": ["MODEL"],
        "generate": ["MODEL", "PROMPT"],
        "speak": ["TEXT", "--model", "MODEL", "--voice", "VOICE"],
        "serve": ["MODEL"],
        "transcribe": ["FILE", "--model", "DIR"],
    }.get(command, [])
    out = _run(["-m", "pygpukit", command, *positionals, "--frobnicate"])
    assert out.returncode == 2
    assert f"usage: python -m pygpukit {command}" in out.stderr
    assert "unrecognized arguments: --frobnicate" in out.stderr


def _write_module(folder, name: str, body: str) -> None:
    (folder / f"{name}.py").write_text(body)


def test_a_new_command_is_one_registration(tmp_path, monkeypatch, capsys) -> None:
    name = f"cli_plugin_{secrets.token_hex(4)}"
    _write_module(
        tmp_path,
        name,
        "def arguments(parser):\n"
        "    parser.add_argument('prompt')\n"
        "    parser.add_argument('--max-new-tokens', type=int, default=4)\n"
        "def run(args):\n"
        "    print(args.prompt * args.max_new_tokens)\n"
        "    return 3\n",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    extra = Command("complete", "complete a prompt", f"{name}:run", f"{name}:arguments")
    commands = (*COMMANDS, extra)
    assert cli.main(["complete", "ab", "--max-new-tokens", "2"], commands) == 3
    assert capsys.readouterr().out == "abab\n"
    assert cli.main(["complete", "--help"], commands) == 0
    assert "--max-new-tokens" in capsys.readouterr().out
    assert cli.main(["--help"], commands) == 0
    assert "complete a prompt" in capsys.readouterr().out


def test_a_command_from_a_missing_distribution_says_what_to_install(capsys) -> None:
    missing = Command(
        "sing",
        "text to song",
        "pygpukit_not_installed.cli:run",
        "pygpukit_not_installed.cli:arguments",
        distribution="pygpukit-tts",
    )
    commands = (*COMMANDS, missing)
    assert cli.main(["sing", "hello"], commands) == 2
    assert "pip install pygpukit-tts" in capsys.readouterr().err
    assert cli.main(["info", "--help"], commands) == 0  # other commands are unaffected
    assert "usage: " in capsys.readouterr().out
    assert cli.main(["--help"], commands) == 0
    assert "text to song" in capsys.readouterr().out


def test_console_command_is_declared() -> None:
    pyproject = ROOT / "packages" / "pygpukit-runtime" / "pyproject.toml"
    section = pyproject.read_text().split("[project.scripts]")[1].split("[")[0]
    assert section.strip() == 'pygpukit = "pygpukit.__main__:main"'
    readme = (ROOT / "README.md").read_text().splitlines()
    for command in ("--version", *(c.name for c in COMMANDS)):
        assert any(line.startswith(f"pygpukit {command}") for line in readme), command


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


# First uses of the runtime: (code whose last line is the first use, the file the notice must
# name). Every one gives one notice, on the user's line, never runpy's or threading's.
_FIRST_USES = {
    "array": "x = gp.zeros((2,))",
    "pool": "pool = gp.memory.MemoryPool(quota=1 << 20)",
    "scheduler": "s = gp.scheduler.Scheduler(total_memory=1 << 30)",
    "manager": (
        "from pygpukit import scheduler as sc\n"
        "m = sc.PartitionManager(sc.PartitionConfig(total_memory=1 << 30))"
    ),
    "memory_stats": "gp.memory.stats()",
    "device_query": "gp.device_count()",
    "thread": (
        "import threading\n"
        "def work():\n"
        "    return gp.ones((2,))\n"
        "t = threading.Thread(target=work); t.start(); t.join()"
    ),
}
_NOTICES = (
    "import warnings, sys\n"
    "warnings.simplefilter('always')\n"
    "import pygpukit as gp\n"
    "def _report(message, category, filename, lineno, file=None, line=None):\n"
    "    if issubclass(category, gp.BackendFallbackWarning):\n"
    "        print('NOTICE', filename, lineno, str(message)[:40])\n"
    "warnings.showwarning = _report\n"
)


@pytest.mark.skipif(ON_GPU, reason="the fallback notice needs a machine without a usable GPU")
@pytest.mark.parametrize("how", ["script", "python -m"])
@pytest.mark.parametrize("use", sorted(_FIRST_USES))
def test_fallback_notice_on_first_use_points_at_the_users_line(tmp_path, use, how) -> None:
    body = _FIRST_USES[use]
    module = tmp_path / f"user_{use}.py"
    module.write_text(_NOTICES + body + "\ngp.ones((3,)); gp.memory.stats()\n")
    first_use_line = len((_NOTICES + body).splitlines())
    if use == "thread":
        first_use_line -= 1  # the line inside the thread's function
    args = [str(module)] if how == "script" else ["-m", module.stem]
    out = _run(
        args, PYGPUKIT_BACKEND="<unset>", PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path])
    )
    assert out.returncode == 0, out.stderr
    notices = [line for line in out.stdout.splitlines() if line.startswith("NOTICE")]
    assert len(notices) == 1, out.stdout
    _, filename, lineno, message = notices[0].split(" ", 3)
    assert filename == str(module) and int(lineno) == first_use_line
    assert message.startswith("Falling back to CPU simulation")


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


@pytest.mark.skipif(ON_GPU, reason="the fallback notice needs a machine without a usable GPU")
@pytest.mark.parametrize(
    "code",
    [
        "import threading\n"
        "t = threading.Thread(target=gp.zeros, args=((2,),)); t.start(); t.join()",
        "from concurrent.futures import ThreadPoolExecutor\n"
        "ThreadPoolExecutor(1).submit(gp.ones, (2,)).result()",
    ],
    ids=["thread", "executor"],
)
def test_fallback_notice_from_a_pygpukit_thread_target_names_no_threading_frame(code) -> None:
    out = _run(_NOTICES + code + "\n", PYGPUKIT_BACKEND="<unset>")
    assert out.returncode == 0, out.stderr
    notices = [line for line in out.stdout.splitlines() if line.startswith("NOTICE")]
    assert len(notices) == 1, out.stdout
    filename = notices[0].split(" ")[1]
    # No user frame on that thread: the outermost PyGPUkit frame, not threading's or runpy's.
    assert os.path.basename(os.path.dirname(filename)) == "pygpukit", filename


@pytest.mark.parametrize(
    ("variables", "expected"),
    [
        ({}, ["environment: no PYGPUKIT_* variables set"]),
        ({"PYGPUKIT_ALLOW_TF32": "yes"}, ["PYGPUKIT_ALLOW_TF32='yes': ok"]),
        (
            {"PYGPUKIT_GEMM_BACKEND": "fastest"},
            ["PYGPUKIT_GEMM_BACKEND='fastest': not valid: allowed values are auto, own, cublaslt"],
        ),
        (
            dict(PYGPUKIT_GEMM_BACKED="own", PYGPUKIT_ALOW_TF32="1"),  # misspelled on purpose
            [
                "PYGPUKIT_GEMM_BACKED='own': not a known variable; did you mean "
                "PYGPUKIT_GEMM_BACKEND?",
                "PYGPUKIT_ALOW_TF32='1': not a known variable; did you mean PYGPUKIT_ALLOW_TF32?",
            ],
        ),
        (
            {"PYGPUKIT_BACKEND": "tpu"},
            [
                "backend: none  (not chosen: PYGPUKIT_BACKEND='tpu' is not valid",
                "PYGPUKIT_BACKEND='tpu': not valid: allowed values are cpu, cuda",
            ],
        ),
    ],
    ids=["none", "ok", "bad-value", "typos", "bad-backend"],
)
def test_info_reports_every_pygpukit_variable(variables: dict[str, str], expected) -> None:
    unset = {k: "<unset>" for k in os.environ if k.startswith("PYGPUKIT_")}
    out = _run(["-m", "pygpukit", "info"], **{**unset, **variables})
    assert out.returncode == 0, out.stderr
    for line in expected:
        assert line in out.stdout, out.stdout
