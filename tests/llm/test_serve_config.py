"""``pygpukit serve --config FILE.toml``: what the file sets, what the command line overrides,
and the errors that name the wrong key."""

from __future__ import annotations

import argparse

import pytest

from pygpukit.llm.serve.cli import serve_arguments
from pygpukit.llm.serve.config_file import (
    DEFAULTS,
    ServeConfigError,
    load_config,
    resolve_options,
)


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve_arguments(parser)
    return resolve_options(parser.parse_args(list(argv)))


def test_defaults_without_a_file(tmp_path):
    args = _args("m=/models/x", "--port", "9001", "--no-prefix-caching")
    assert args.models == ["m=/models/x"] and args.port == 9001
    assert args.prefix_caching is False
    for key in ("host", "max_batch", "max_queue", "max_batched_tokens", "prefill_chunk",
                "max_model_len", "dtype", "device", "grace", "log_level"):  # fmt: skip
        assert getattr(args, key) == DEFAULTS[key][0], key
    assert args.kv_memory == "0.5" and args.partition == []


def test_the_prefill_cap_default_is_the_engines():
    from pygpukit.llm.engine.planner import DEFAULT_PREFILL_CHUNK

    assert DEFAULTS["prefill_chunk"][0] == (DEFAULT_PREFILL_CHUNK or 0)


def test_the_file_sets_options_models_and_partitions(tmp_path):
    cfg = tmp_path / "conf" / "serve.toml"
    cfg.parent.mkdir()
    cfg.write_text(
        'host = "0.0.0.0"\nport = 8123\nmax_batch = 32\nkv_memory = 0.25\n'
        "prefix_caching = false\ngrace = 5\n\n"
        '[models.chat]\npath = "../weights/qwen"\npartition = "8GiB,0.25,guaranteed"\n\n'
        '[models.big]\npath = "/abs/llama.gguf"\n'
        'partition = { memory = "56GiB", compute = 0, class = "besteffort" }\n'
    )
    loaded = load_config(cfg)
    assert loaded["models"] == [f"chat={cfg.parent / '../weights/qwen'}", "big=/abs/llama.gguf"]
    assert loaded["partitions"] == ["chat=8GiB,0.25,guaranteed", "big=56GiB,0,besteffort"]
    # The command line wins: an option, a partition of the same model, one more model.
    args = _args("--config", str(cfg), "--port", "9000", "--partition",
                 "big=40GiB,0,besteffort", "extra=/m/e")  # fmt: skip
    assert (args.host, args.port, args.max_batch, args.grace) == ("0.0.0.0", 9000, 32, 5)
    assert args.kv_memory == "0.25" and args.prefix_caching is False
    assert args.models[-1] == "extra=/m/e" and len(args.models) == 3
    assert args.partition == ["chat=8GiB,0.25,guaranteed", "big=40GiB,0,besteffort"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("port = 80\nmax_batch_size = 4\n", "unknown key.*max_batch_size"),
        ('port = "80"\n', "port must be int"),
        ("max_batch = true\n", "max_batch must be int"),
        ("prefix_caching = 1\n", "prefix_caching must be bool"),
        ("port = \n", "not valid TOML"),
        ('[models.a]\npartition = "1GiB,0,besteffort"\n', r"\[models.a\] needs path"),
        ('[models.a]\npath = "x"\ngpu = 1\n', "unknown key.*gpu"),
        (
            '[models.a]\npath = "x"\npartition = { memory = "1GiB", compute = 0 }\n',
            "missing: class",
        ),
        ('[models.a]\npath = "x"\npartition = 3\n', "must be a string"),
        ('models = "a"\n', "models must be tables"),
    ],
)
def test_errors_name_what_is_wrong(tmp_path, text, match):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    with pytest.raises(ServeConfigError, match=match):
        load_config(cfg)


def test_missing_file_and_no_model(tmp_path):
    with pytest.raises(ServeConfigError, match="cannot read"):
        _args("--config", str(tmp_path / "none.toml"))
    with pytest.raises(ServeConfigError, match="at least one MODEL"):
        _args()
    empty = tmp_path / "empty.toml"
    empty.write_text("port = 1234\n")
    with pytest.raises(ServeConfigError, match="at least one MODEL"):
        _args("--config", str(empty))


def test_the_guide_example_is_a_valid_config(tmp_path):
    import re
    from pathlib import Path

    guide = Path(__file__).resolve().parents[2] / "docs" / "serve.md"
    (block,) = re.findall(r"```toml\n(.*?)```", guide.read_text(), flags=re.S)
    cfg = tmp_path / "serve.toml"
    cfg.write_text(block)
    args = _args("--config", str(cfg))
    assert [m.split("=")[0] for m in args.models] == ["chat", "batch"]
    assert args.partition == ["chat=8GiB,0.25,guaranteed", "batch=56GiB,0,besteffort"]
    assert (args.max_batch, args.kv_memory) == (64, "0.6")


def test_prefix_caching_goes_to_the_engine_as_given(tmp_path):
    import io

    from serve_models import write_tiny_model

    from pygpukit.llm.serve.cli import build_engines

    assert _args("m=/models/x").prefix_caching is None  # unset: the engine decides
    assert _args("m=/models/x", "--batch-invariant").prefix_caching is None
    model = write_tiny_model(tmp_path / "m")
    cfg = tmp_path / "serve.toml"
    cfg.write_text("prefix_caching = true\nbatch_invariant = true\n\n"
                   f'[models.m]\npath = "{model}"\n')  # fmt: skip
    args = _args("--config", str(cfg), "--dtype", "bfloat16", "--kv-memory", "1MiB",
                 "--max-model-len", "64")  # fmt: skip
    # Both asked for: the engine's error, not a silent override.
    with pytest.raises(ValueError, match="cannot share cached prefixes"):
        build_engines(args, io.StringIO())
    args = _args(f"m={model}", "--batch-invariant", "--dtype", "bfloat16", "--kv-memory", "1MiB",
                 "--max-model-len", "64")  # fmt: skip
    engines, _ = build_engines(args, io.StringIO())
    assert engines["m"].blocks.prefix_caching is False and engines["m"].batch_invariant
    bad = _args(f"m={model}", "--kv-memory", "lots")
    with pytest.raises(ValueError, match=r"--kv-memory 'lots' is not a size"):
        build_engines(bad, io.StringIO())
