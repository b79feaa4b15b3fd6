"""docs/serve.md runs: its Python blocks (the client ones against a live server) and its curl
examples, with the tiny random model served under the docs' model name."""

from __future__ import annotations

import json
import pathlib
import re
import shlex
import shutil
import subprocess

import pytest
from serve_models import TEST_DTYPE, write_tiny_model
from serve_server import run_server

pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

DOC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "serve.md"
TEXT = DOC.read_text()
PYTHON = re.findall(r"```python\n(.*?)```", TEXT, flags=re.S)
CURL = [b for b in re.findall(r"```bash\n(.*?)```", TEXT, flags=re.S) if b.startswith("curl")]
DOC_URL = "http://127.0.0.1:8000"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = write_tiny_model(tmp_path_factory.mktemp("docs-model"))
    with run_server([f"smollm2={path}"], "--dtype", TEST_DTYPE, "--max-model-len", "256",
                    "--kv-memory", "2MiB") as s:  # fmt: skip
        yield s


@pytest.mark.parametrize("index", range(len(PYTHON)))
def test_python_blocks_run(server, index):
    code = PYTHON[index].replace(DOC_URL, server.url)
    exec(compile(code, f"docs/serve.md python block {index}", "exec"), {"__name__": "docs"})


@pytest.mark.parametrize("index", range(len(CURL)))
def test_curl_blocks_answer(server, index):
    command = CURL[index].replace(DOC_URL, server.url).replace("\\\n", " ")
    if shutil.which("curl"):
        out = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        text = out.stdout
    else:  # no curl on this machine: send the documented request with httpx
        args = shlex.split(command)
        body = args[args.index("-d") + 1]
        url = next(a for a in args if a.startswith("http"))
        text = httpx.post(url, content=body, headers={"Content-Type": "application/json"},
                          timeout=120).text  # fmt: skip
    if '"stream": true' in command:
        events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["choices"][0]["finish_reason"] in ("length", "stop")
    else:
        assert json.loads(text)["choices"][0]["finish_reason"] in ("length", "stop")


def test_the_doc_is_found():
    assert len(PYTHON) >= 2 and len(CURL) >= 2
