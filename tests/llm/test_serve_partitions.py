"""``--partition NAME=memory,compute,class``: parsing, the QoS class each gives, and a server
with two models, each in its own scheduler partition."""

from __future__ import annotations

import pytest
from serve_models import TEST_DTYPE, write_tiny_model
from serve_server import run_server

from pygpukit import llm
from pygpukit.llm.serve.partitions import create_partitions, parse_partition, parse_size

httpx = pytest.importorskip("httpx")


def test_parse_partition():
    spec = parse_partition("chat=8GiB,0.5,Guaranteed")
    assert (spec.name, spec.memory, spec.compute, spec.qos) == ("chat", "8GiB", 0.5, "guaranteed")
    assert parse_partition("b=1GiB,0,best-effort").qos == "besteffort"
    for bad, why in [("chat", "expected"), ("chat=1GiB,0.5", "expected"),
                     ("c=1GiB,x,guaranteed", "not a number"), ("c=1GiB,2,burstable", "share"),
                     ("c=1GiB,0.5,gold", "class must be"), ("c=1GiB,0,guaranteed", "needs a"),
                     ("c=1GiB,0.5,besteffort", "reserves no")]:  # fmt: skip
        with pytest.raises(ValueError, match=why):
            parse_partition(bad)


def test_partition_memory_is_a_size():
    assert parse_size("64MiB") == 64 << 20 and parse_size("1000") == 1000
    for bad, why in [("0.5", "a fraction"), ("lots", "memory")]:
        with pytest.raises(ValueError, match=why):
            parse_size(bad)


def test_each_class_is_what_the_scheduler_makes():
    specs = [parse_partition(t) for t in ("g=64MiB,0.25,guaranteed", "b=32MiB,0,burstable",
                                          "e=32MiB,0,besteffort")]  # fmt: skip
    scheduler, parts = create_partitions(specs, 0)
    try:
        assert {n: p.qos_class.value for n, p in parts.items()} == {
            "g": "guaranteed", "b": "burstable", "e": "best_effort"}  # fmt: skip
        assert parts["g"].memory_request == 64 << 20 and parts["e"].memory_request == 0
    finally:
        scheduler.shutdown()


def test_two_models_in_their_partitions(tmp_path):
    a = write_tiny_model(tmp_path / "a", seed=1)
    b = write_tiny_model(tmp_path / "b", seed=2)
    # The models, one partition and some options from a config file (relative paths from its
    # folder); the other partition and the dtype from the command line.
    config = tmp_path / "serve.toml"
    config.write_text(
        'max_model_len = 128\nkv_memory = 0.5\n\n[models.fast]\npath = "a"\n'
        'partition = { memory = "64MiB", compute = 0.5, class = "guaranteed" }\n\n'
        '[models.bulk]\npath = "b"\npartition = "1GiB,0,burstable"\n'
    )
    with run_server([], "--config", str(config), "--dtype", TEST_DTYPE,
                    "--partition", "bulk=64MiB,0,besteffort") as srv:  # fmt: skip
        assert "partition fast (guaranteed)" in srv.log()
        assert "partition bulk (best_effort)" in srv.log()
        # A Guaranteed model shares the process: the interpreter lock changes hands quickly.
        assert "interpreter switch interval 0.2 ms" in srv.log()
        models = httpx.get(f"{srv.url}/v1/models").json()["data"]
        assert sorted(m["id"] for m in models) == ["bulk", "fast"]
        for name, path in (("fast", a), ("bulk", b)):
            ref = llm.load(path, dtype=TEST_DTYPE, max_seq_len=128, progress=False)
            want = ref.generate("abc", max_new_tokens=4).text
            r = httpx.post(f"{srv.url}/v1/completions", timeout=60, json={
                "model": name, "prompt": "abc", "max_tokens": 4, "temperature": 0})  # fmt: skip
            assert r.json()["choices"][0]["text"] == want
