"""Every ``PYGPUKIT_*`` environment variable: registered, validated, reported by name.

The registry (``pygpukit.env``) is the one place a variable is read; these tests feed
every registered variable values it must refuse and check that the reader warns (or
raises) naming the variable and what it accepts, then check the runtime's own reads
in fresh interpreters, where the value is read at the runtime's first use.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import pygpukit as gp
from pygpukit import env
from pygpukit.errors import EnvironmentVariableError, EnvironmentVariableWarning

ROOT = Path(__file__).resolve().parents[2]

# Values each kind must refuse (a choice also refuses every other word).
BAD_VALUES = {
    "flag": ["maybe", "2", "-1", "enable d", "truee"],
    "choice": ["bogus", "auto-ish", "?", "1 2"],
    "size": ["lots", "-1", "12XB", "1e9", "1.5", "0.0", "8 GiBs"],
    "integer": ["ten", "1.5", "0x"],
    "items": ["a b", "3x:y", "mod:"],
    "path": [],
    "text": ["9 0", "sm_90", "80,90a"],
}
GOOD_VALUES = {
    "flag": [("1", True), ("true", True), ("On", True), ("0", False), ("no", False)],
    "size": [("1048576", 1 << 20), ("8GiB", 8 << 30), ("512 MiB", 512 << 20), ("2GB", 2 * 10**9)],
    "items": [("a.b:c, d", ("a.b:c", "d")), ("x", ("x",))],
}


def _all_variables() -> tuple[env.Variable, ...]:
    # Packages beside the runtime register their own, in the modules that read them.
    for module in ("pygpukit.ops.config", "pygpukit.llm.benchmarks", "pygpukit.tts.benchmarks"):
        importlib.import_module(module)
    return env.variables()


def _bad_cases() -> list[tuple[str, str]]:
    cases = []
    for var in _all_variables():
        values = list(BAD_VALUES[var.kind])
        if var.kind == "choice":
            values = [v for v in values if v not in var.allowed]
        if var.kind == "integer":
            values += [
                str(v)
                for v in (var.minimum and var.minimum - 1, var.maximum and var.maximum + 1)
                if v
            ]
        if var.kind == "size" and var.fraction:
            values = [v for v in values if v not in ("0.5",)]
        if var.kind == "text" and var.check is None:
            values = []
        cases += [(var.name, value) for value in values]
    return cases


@pytest.fixture
def fresh_env(monkeypatch: pytest.MonkeyPatch):
    """A clean reader cache before and after (values and once-only warnings)."""
    env.clear_cache()
    yield monkeypatch
    monkeypatch.undo()
    env.clear_cache()


@pytest.mark.parametrize(("name", "value"), _bad_cases())
def test_bad_value_is_reported_with_the_variable_and_its_allowed_values(
    fresh_env: pytest.MonkeyPatch, name: str, value: str
) -> None:
    var = env.variable(name)
    fresh_env.setenv(name, value)
    if var.on_invalid == "raise":
        with pytest.raises(EnvironmentVariableError) as info:
            env.get(name)
        assert info.value.variable == name and info.value.value == value
        message = str(info.value)
    else:
        with pytest.warns(EnvironmentVariableWarning) as record:
            assert env.get(name) == var.default
        assert len(record) == 1
        message = str(record[0].message)
        assert record[0].filename == __file__  # pointed at the caller's line
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert env.get(name) == var.default  # once per value, then cached
    assert name in message and repr(value) in message
    assert var.allowed_text() in message


@pytest.mark.parametrize("var", _all_variables(), ids=lambda v: v.name)
def test_every_variable_is_documented(var: env.Variable) -> None:
    assert var.description and var.read and var.package
    assert var.allowed_text()
    docs = (ROOT / "docs" / "errors.md").read_text()
    section = docs[docs.index("## Environment variables") :]
    assert f"`{var.name}`" in section


@pytest.mark.parametrize(
    ("kind", "raw", "expected"),
    [(kind, raw, expected) for kind, pairs in GOOD_VALUES.items() for raw, expected in pairs],
)
def test_good_values_parse(
    fresh_env: pytest.MonkeyPatch, kind: str, raw: str, expected: object
) -> None:
    name = {
        "flag": "PYGPUKIT_ALLOW_TF32",
        "size": "PYGPUKIT_MEMORY_LIMIT",
        "items": "PYGPUKIT_BENCHMARK_PLUGINS",
    }[kind]
    fresh_env.setenv(name, raw)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert env.get(name) == expected


@pytest.mark.parametrize("name", [v.name for v in _all_variables() if v.kind == "choice"])
def test_choices_accept_each_allowed_value_in_any_case(
    fresh_env: pytest.MonkeyPatch, name: str
) -> None:
    for allowed in env.variable(name).allowed:
        fresh_env.setenv(name, f" {allowed.upper()} ")
        assert env.choice(name) == allowed


@pytest.mark.parametrize("name", [v.name for v in _all_variables()])
def test_unset_and_empty_give_the_default(fresh_env: pytest.MonkeyPatch, name: str) -> None:
    var = env.variable(name)
    fresh_env.delenv(name, raising=False)
    assert env.get(name) == var.default
    fresh_env.setenv(name, "")
    assert env.get(name) == (None if var.kind == "path" else var.default)


def test_a_changed_value_is_seen_and_validated_again(fresh_env: pytest.MonkeyPatch) -> None:
    fresh_env.setenv("PYGPUKIT_ALLOW_TF32", "1")
    assert env.flag("PYGPUKIT_ALLOW_TF32") is True
    fresh_env.setenv("PYGPUKIT_ALLOW_TF32", "off")
    assert env.flag("PYGPUKIT_ALLOW_TF32") is False
    fresh_env.setenv("PYGPUKIT_ALLOW_TF32", "sometimes")
    with pytest.warns(EnvironmentVariableWarning, match="PYGPUKIT_ALLOW_TF32='sometimes'"):
        assert env.flag("PYGPUKIT_ALLOW_TF32") is False


@pytest.mark.parametrize(
    "text",
    ["0", "1", "12345678", "0.5", "1.", ".25", "1", "8GiB", "512 MiB", "2GB", "100k", "3tb", "7 b"]
    + BAD_VALUES["size"],
)
def test_size_reader_agrees_with_the_rust_core(fresh_env: pytest.MonkeyPatch, text: str) -> None:
    import pygpukit._rust as rust

    fresh_env.setenv("PYGPUKIT_MEMORY_LIMIT", text)
    try:
        expected = rust.parse_limit(text)
    except ValueError:
        with pytest.warns(EnvironmentVariableWarning):
            assert env.size("PYGPUKIT_MEMORY_LIMIT") is None
    else:
        assert env.size("PYGPUKIT_MEMORY_LIMIT") == expected


def test_reading_a_variable_with_the_wrong_reader_or_name_is_an_error() -> None:
    with pytest.raises(TypeError, match="is a choice variable"):
        env.flag("PYGPUKIT_BACKEND")
    with pytest.raises(KeyError, match="PYGPUKIT_TEST_NO_SUCH_THING is not a registered"):
        env.get("PYGPUKIT_TEST_NO_SUCH_THING")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "MY_VAR", "kind": "flag"}, "PYGPUKIT_ plus capitals"),
        ({"name": "PYGPUKIT_test", "kind": "flag"}, "PYGPUKIT_ plus capitals"),
        ({"name": "PYGPUKIT_TEST_1", "kind": "bool"}, "kind must be one of"),
        ({"name": "PYGPUKIT_TEST_2", "kind": "choice"}, "needs its allowed values"),
        (
            {"name": "PYGPUKIT_TEST_3", "kind": "choice", "allowed": ("a",), "default": "b"},
            "default",
        ),
        ({"name": "PYGPUKIT_TEST_4", "kind": "flag", "on_invalid": "ignore"}, "on_invalid"),
        ({"name": "PYGPUKIT_BACKEND", "kind": "flag"}, "already registered"),
    ],
)
def test_register_refuses_bad_definitions(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        env.register(description="test", **kwargs)
    assert "PYGPUKIT_TEST_1" not in {v.name for v in env.variables()}


def test_another_package_registers_and_reads_its_own_variable(
    fresh_env: pytest.MonkeyPatch,
) -> None:
    definition = dict(
        kind="choice",
        allowed=("auto", "fast"),
        default="auto",
        description="A test knob.",
        package="pygpukit-tests",
    )
    var = env.register("PYGPUKIT_TEST_KNOB", **definition)
    try:
        assert env.register("PYGPUKIT_TEST_KNOB", **definition) == var  # idempotent
        assert env.choice("PYGPUKIT_TEST_KNOB") == "auto"
        fresh_env.setenv("PYGPUKIT_TEST_KNOB", "FAST")
        assert env.choice("PYGPUKIT_TEST_KNOB") == "fast"
    finally:
        env._registry.pop("PYGPUKIT_TEST_KNOB")


# --- every read in the code base goes through the registry ---------------------------------

_PY_LITERAL = re.compile(r"""["'](PYGPUKIT_[A-Z0-9_]+)["']""")
_NATIVE_READ = re.compile(r"""(?:getenv\(|env::var\(|\$ENV\{|\$\{?)"?(PYGPUKIT_[A-Z0-9_]+)""")
_SHELL_ASSIGN = re.compile(r"""\b(PYGPUKIT_[A-Z0-9_]+)=""")


def _names_read(folder: Path, skip: tuple[Path, ...]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for file in folder.rglob("*"):
        if (
            not file.is_file()
            or "_kernels" in file.parts
            or any(file.is_relative_to(p) for p in skip)
        ):
            continue
        if file.suffix == ".py":
            names = _PY_LITERAL.findall(file.read_text(errors="replace"))
        elif file.suffix in (".rs", ".cpp", ".hpp", ".h", ".sh", ".txt", ".cmake"):
            text = file.read_text(errors="replace")
            names = _NATIVE_READ.findall(text)
            if file.suffix == ".sh":
                names += _SHELL_ASSIGN.findall(text)
        else:
            continue
        for name in names:
            found.setdefault(name, file)
    return found


def _import_source_module(file: Path) -> None:
    """Import ``packages/<dist>/src/pygpukit/.../name.py`` as ``pygpukit....name``."""
    after_src = file.parts[file.parts.index("src") + 1 :]
    module = ".".join(Path(*after_src).with_suffix("").parts)
    importlib.import_module(module.removesuffix(".__init__"))


def test_every_variable_read_in_the_repository_is_registered() -> None:
    registered = {v.name for v in _all_variables()}
    folders = [ROOT / "packages", ROOT / "native", ROOT / "rust", ROOT / "tools", ROOT / "tests"]
    # The ops package's reads are checked once it registers its knobs through pygpukit.env.
    ops_registered = any(v.package == "pygpukit-ops" for v in env.variables())
    ops = (ROOT / "packages" / "pygpukit-ops", ROOT / "tests" / "ops")
    skip = () if ops_registered else ops
    # CMake's own cache variables share the prefix but are not read from the environment.
    cmake_only = {
        "PYGPUKIT_ROOT",
        "PYGPUKIT_CUDA_INCLUDE_DIR",
        "PYGPUKIT_NATIVE_SOURCES",
        "PYGPUKIT_RUST_CAPI_H",
    }
    missing = {}
    for folder in folders:
        for name, file in _names_read(folder, skip).items():
            if name not in registered and "src" in file.parts:
                # a package registers its variables in the module that reads them
                _import_source_module(file)
                registered = {v.name for v in env.variables()}
            if (
                name not in registered
                and name not in cmake_only
                and not name.startswith(("PYGPUKIT_TEST_", "PYGPUKIT_EXAMPLE_"))
            ):
                missing[name] = str(file.relative_to(ROOT))
    assert not missing, f"read but not registered in pygpukit.env: {missing}"


# --- the runtime's own reads, in fresh interpreters (read at first use) ---------------------


def _python(code: str, **variables: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PYGPUKIT_")}
    environment.update(variables, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


FIRST_USE = (
    "import pygpukit as gp\n"
    "x = gp.ones((2, 2))  # first use\n"
    "print('ran', (x @ x).to_numpy().sum())\n"
)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PYGPUKIT_BACKEND", "tpu"),
        ("PYGPUKIT_BACKEND", "gpu"),
        ("PYGPUKIT_GEMM_BACKEND", "fastest"),
        ("PYGPUKIT_UPLOAD_KERNEL", "off"),
        ("PYGPUKIT_UPLOAD_KERNEL", "false"),
    ],
)
def test_runtime_refuses_a_value_that_would_silently_do_something_else(
    name: str, value: str
) -> None:
    out = _python(FIRST_USE, **{name: value})
    assert out.returncode != 0 and "ran" not in out.stdout
    assert "EnvironmentVariableError" in out.stderr
    assert (
        f"{name}={value!r} is not valid; allowed: {env.variable(name).allowed_text()}" in out.stderr
    )


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("PYGPUKIT_ALLOW_TF32", "maybe"),
        ("PYGPUKIT_ALLOW_TF32", "2"),
        ("PYGPUKIT_DEBUG_LIBRARY_LOAD", "verbose"),
        ("PYGPUKIT_BENCHMARK_PLUGINS", "not a module"),
    ],
)
def test_runtime_warns_once_at_first_use_on_the_callers_line(name: str, value: str) -> None:
    out = _python(
        FIRST_USE + "y = gp.zeros(3) @ gp.zeros(3)\n", PYGPUKIT_BACKEND="cpu", **{name: value}
    )
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stderr.splitlines() if "EnvironmentVariableWarning" in line]
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("<string>:2: EnvironmentVariableWarning: ")  # the user's line
    assert f"{name}={value!r} ignored" in lines[0] and env.variable(name).allowed_text() in lines[0]


@pytest.mark.parametrize("value", ["lots", "-3", "1.5", "8 parsecs"])
def test_memory_limit_is_reported_once_at_first_use(value: str) -> None:
    code = "import pygpukit as gp\nx = gp.zeros((4,))\nprint(gp.memory.get_limit())\n"
    out = _python(code, PYGPUKIT_MEMORY_LIMIT=value, PYGPUKIT_BACKEND="cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
    warned = [line for line in out.stderr.splitlines() if "Warning: PYGPUKIT_MEMORY_LIMIT" in line]
    assert len(warned) == 1 and value in warned[0], out.stderr
    # the Rust core's warning, re-issued at the user's line with the runtime's category
    assert warned[0].startswith("<string>:2: EnvironmentVariableWarning: "), warned[0]


@pytest.mark.parametrize("value", ["lots", "-3", "1.5", "8 parsecs"])
@pytest.mark.parametrize(
    "first_use",
    [
        "from pygpukit import memory; print(memory.get_limit(-1))",
        "from pygpukit import scheduler, memory; print(memory.get_limit(-1))",
    ],
    ids=["memory", "scheduler-import"],
)
def test_memory_limit_from_the_environment_is_validated_by_the_rust_core(
    value: str, first_use: str
) -> None:
    out = _python(first_use, PYGPUKIT_MEMORY_LIMIT=value)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
    warned = [line for line in out.stderr.splitlines() if "PYGPUKIT_MEMORY_LIMIT ignored" in line]
    assert len(warned) == 1 and value in warned[0], out.stderr
    assert warned[0].startswith("<string>:1: EnvironmentVariableWarning: "), warned[0]


def test_tf32_flag_values_mean_what_they_say(fresh_env: pytest.MonkeyPatch) -> None:
    from pygpukit.linalg import allow_tf32_default

    for raw, expected in (("1", True), ("false", False), ("OFF", False), ("yes", True)):
        fresh_env.setenv("PYGPUKIT_ALLOW_TF32", raw)
        assert allow_tf32_default() is expected
    assert gp.env is env


# --- PYGPUKIT_CACHE_DIR: empty means memory only; an unusable folder is reported once -------


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_cache_dir_means_memory_only(value: str) -> None:
    code = "import pygpukit as gp\nprint(gp.get_jit_cache_dir())\n"
    out = _python(code, PYGPUKIT_CACHE_DIR=value, PYGPUKIT_BACKEND="cpu")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "None"
    info = subprocess.run(
        [sys.executable, "-m", "pygpukit", "info"],
        env={**os.environ, "PYGPUKIT_CACHE_DIR": value, "PYTHONPATH": os.pathsep.join(sys.path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "kernel cache: in memory only" in info.stdout, info.stdout + info.stderr


def _unusable_folders(tmp_path: Path) -> dict[str, str]:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(os.urandom(16))
    return {"a file": str(blocker), "below a file": str(blocker / "kernels"), "nul": "bad\0dir"}


@pytest.mark.parametrize(
    ("how", "case"),
    [
        (how, case)
        for how in ("environment", "set_jit_cache_dir")
        for case in ("a file", "below a file", "nul")
        if (how, case) != ("environment", "nul")  # an environment value cannot hold a NUL
    ],
)
def test_unusable_cache_dir_is_reported_once_and_kernels_stay_in_memory(
    tmp_path: Path, fresh_env: pytest.MonkeyPatch, how: str, case: str
) -> None:
    from pygpukit import _jit_cache

    folder = _unusable_folders(tmp_path)[case]
    fresh_env.setattr(_jit_cache, "_memory", {})
    fresh_env.setattr(_jit_cache, "_warned_unwritable", False)
    fresh_env.setattr(_jit_cache, "_override", _jit_cache._UNSET)
    if how == "environment":
        fresh_env.setenv("PYGPUKIT_CACHE_DIR", folder)
    else:
        gp.set_jit_cache_dir(folder)
    entries = {os.urandom(32).hex(): _jit_cache.CacheEntry(os.urandom(64), {}) for _ in range(3)}
    with pytest.warns(RuntimeWarning, match="cannot write the kernel cache") as record:
        for key, entry in entries.items():
            _jit_cache.store(key, entry)
    warned = [w for w in record if "kernel cache" in str(w.message)]
    assert len(warned) == 1  # once, however many kernels
    assert warned[0].filename == __file__
    source = "PYGPUKIT_CACHE_DIR" if how == "environment" else "gp.set_jit_cache_dir()"
    assert f"set by {source}" in str(warned[0].message)
    for key, entry in entries.items():
        assert _jit_cache.load(key) == entry


def test_debug_library_load_traces_each_candidate_and_the_outcome() -> None:
    """The driver probe runs on every machine, so its trace shows on the CPU backend too."""
    pytest.importorskip("pygpukit._native", reason="the loaders are the native module's")
    code = "import pygpukit as gp\ngp.backend_name()\n"
    out = _python(code, PYGPUKIT_DEBUG_LIBRARY_LOAD="1")
    assert out.returncode == 0, out.stderr
    trace = [line for line in out.stderr.splitlines() if line.startswith("pygpukit: cuda: ")]
    assert trace, out.stderr
    assert trace[-1] == "pygpukit: cuda: not loaded" or trace[-1].startswith(
        "pygpukit: cuda: loaded /"
    )
    quiet = _python(code, PYGPUKIT_DEBUG_LIBRARY_LOAD="0")
    assert quiet.returncode == 0 and "pygpukit: cuda:" not in quiet.stderr
