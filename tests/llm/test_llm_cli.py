"""``pygpukit generate`` and ``pygpukit chat`` on a tiny random model with a byte tokenizer."""

from __future__ import annotations

import argparse
import io

import pytest
from llm_reference_numpy import CONFIGS

from pygpukit import llm
from pygpukit.llm import cli
from pygpukit.llm.random_model import write_checkpoint


@pytest.fixture
def model_dir(tmp_path, rng):
    cfg = {**CONFIGS["qwen2_bias"], "vocab_size": 259, "eos_token_id": None}
    return write_checkpoint(tmp_path / "m", cfg, int(rng.integers(2**31)), tokenizer=True)


def _args(add, argv):
    parser = argparse.ArgumentParser()
    add(parser)
    return parser.parse_args(argv)


def test_generate_streams_the_text(model_dir):
    argv = [model_dir, "Once upon", "--dtype", "float32", "--max-new-tokens", "6"]
    out, err = io.StringIO(), io.StringIO()
    assert cli.generate_command(_args(cli.generate_arguments, argv), out, err) == 0
    model = llm.load(model_dir, dtype="float32", progress=False)
    want = model.generate("Once upon", max_new_tokens=6)
    assert out.getvalue() == want.text + "\n"
    # A random model may draw its EOS (id 2) before the sixth token: the count is the model's.
    assert len(want.token_ids) == 6 or want.finish_reason == "stop"
    assert f"[{len(want.token_ids)} tokens, " in err.getvalue() and " tok/s, " in err.getvalue()


def test_chat_reset_and_exit(model_dir):
    argv = [model_dir, "--dtype", "float32", "--max-new-tokens", "4", "--max-seq-len", "96"]
    lines = iter(["hello", "/reset", "", "hello", "x" * 200, "/exit", "never read"])
    out, err = io.StringIO(), io.StringIO()
    status = cli.chat_command(_args(cli.chat_arguments, argv), out, err, lambda _: next(lines))
    assert status == 0
    model = llm.load(model_dir, dtype="float32", max_seq_len=96, progress=False)
    first = model.chat([{"role": "user", "content": "hello"}], max_new_tokens=4).text
    # After /reset the same question gets the same (greedy) answer: the history was dropped.
    assert out.getvalue() == f"{first}\n{first}\n"
    assert err.getvalue().count("tok/s") == 2 and "(conversation reset)" in err.getvalue()
    assert "error: the prompt has" in err.getvalue()  # the 200-character turn did not fit
    assert next(lines) == "never read"
