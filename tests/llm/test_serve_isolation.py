"""The serve benchmark's isolation row end to end on the CPU backend (tiny shapes): two models
in partitions of one server, the BestEffort load from its own process, the measured clients
here; and the host-side QoS the server applies for it (:mod:`pygpukit.llm.serve.qos`)."""

from __future__ import annotations

import itertools
import sys

import pytest

from pygpukit.llm.serve.qos import (
    SERVER_SWITCH_INTERVAL_S,
    SHARED_SWITCH_INTERVAL_S,
    apply_switch_interval,
    host_switch_interval,
)


def test_a_model_with_a_promise_beside_another_gets_a_short_switch_interval():
    assert host_switch_interval(2, ["guaranteed", "besteffort"]) == SHARED_SWITCH_INTERVAL_S
    assert host_switch_interval(3, ["burstable"]) == SHARED_SWITCH_INTERVAL_S
    assert sys.getswitchinterval() > SHARED_SWITCH_INTERVAL_S


@pytest.mark.parametrize(
    ("models", "classes"),
    [(1, ["guaranteed"]), (1, []), (2, []), (2, ["besteffort", "besteffort"])],
)
def test_no_promise_or_one_model_gets_the_servers_interval(models, classes):
    assert host_switch_interval(models, classes) == SERVER_SWITCH_INTERVAL_S
    assert SHARED_SWITCH_INTERVAL_S < SERVER_SWITCH_INTERVAL_S < sys.getswitchinterval()


def test_the_asked_interval_wins_and_is_checked():
    assert host_switch_interval(1, [], 0.001) == 0.001
    assert host_switch_interval(2, ["guaranteed"], 2) == 2.0
    for bad in (0, -1e-3, True, "fast"):
        with pytest.raises(ValueError, match="positive number of seconds"):
            host_switch_interval(2, ["guaranteed"], bad)


def test_apply_switch_interval_sets_it_and_none_leaves_it():
    before = sys.getswitchinterval()
    try:
        assert apply_switch_interval(None) == before
        assert apply_switch_interval(before / 4) == pytest.approx(before / 4)
        assert sys.getswitchinterval() == pytest.approx(before / 4)
    finally:
        sys.setswitchinterval(before)


def test_a_bad_switch_interval_stops_the_server_before_loading(tmp_path):
    import argparse

    from pygpukit.llm.serve.cli import serve_arguments, serve_command

    parser = argparse.ArgumentParser()
    serve_arguments(parser)
    args = parser.parse_args([str(tmp_path / "never-read"), "--switch-interval", "-1"])
    with pytest.raises(SystemExit, match="switch-interval must be a positive"):
        serve_command(args)


def test_the_isolation_row_runs_and_reports_both_loads(tmp_path, monkeypatch):
    pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    from pygpukit.benchmark.peers import PyGPUkitLibrary
    from pygpukit.llm import benchmarks as llm_benchmarks
    from pygpukit.llm.serve import benchmarks

    monkeypatch.setenv(llm_benchmarks.BENCH_DIR_ENV, str(tmp_path))
    load = benchmarks.IsolationLoad(
        guaranteed_clients=1, besteffort_clients=2, requests=1, besteffort_requests=24,
        prompt=16, new=5, memory=("64MiB", "64MiB"),
    )  # fmt: skip
    case = benchmarks._isolation_case("tiny", "tiny", load)
    try:
        timed = case.setups["pygpukit"](PyGPUkitLibrary(), 1)
        result = timed.run(0)  # the check round: alone, then beside the BestEffort load
        assert timed.metrics is not None and timed.measure is not None
        timed.check(result)
        assert timed.metrics()["rounds"] == 1
        assert timed.measure(1) > 0  # a timed round: the metrics pool the timed rounds
        m = timed.metrics()
    finally:
        benchmarks._stop_all()
    assert result.output_tokens == 5 and len(result.itl_s) == 4
    # Tokens that reach a client in one read count as arriving together (gaps of 0). Even
    # alone, the decode steps' tokens often come within microseconds of each other, and a
    # client that a busy CPU keeps waiting reads all four gaps' tokens at once: either p99
    # may be 0.
    assert m["itl_p99_alone_ms"] >= m["itl_p50_alone_ms"] >= 0
    assert m["itl_p99_loaded_ms"] >= m["itl_p50_loaded_ms"] >= 0
    assert m["besteffort_tok_s"] > 0 and m["rounds"] == 2 and m["itl_samples"] == 4
    if m["ratio"] == "n/a":  # nothing to divide by: the lone run's gaps were all 0
        assert m["itl_p99_alone_ms"] == 0 and m["round_ratios"] == "n/a"
        return
    # The ratio of the unrounded p99s: within what rounding each to 0.01 ms allows (±0.005).
    loaded, alone = m["itl_p99_loaded_ms"], m["itl_p99_alone_ms"]
    low = (loaded - 0.005) / (alone + 0.005)
    high = (loaded + 0.005) / max(alone - 0.005, 1e-9)
    assert low - 0.005 <= m["ratio"] <= high + 0.005
    # One timed round: its own ratio is the pooled one, over its client's 4 gaps.
    assert float(m["round_ratios"]) == pytest.approx(m["ratio"], abs=0.011)


def test_the_rows_variable_selects_the_isolation_row_alone(monkeypatch, rng):
    from pygpukit.benchmark.data import DataCache
    from pygpukit.benchmark.registry import SuiteContext
    from pygpukit.llm.serve import benchmarks

    def ops(quick: bool) -> list[str]:
        ctx = SuiteContext(backend="cuda", quick=quick, data=DataCache(rng), rng=rng)
        return [c.op for c in benchmarks.SUITE.cases(ctx)]

    monkeypatch.setenv(benchmarks.ROWS_ENV, "isolation")
    assert ops(False) == ["isolation"] and ops(True) == ["isolation"]
    monkeypatch.setenv(benchmarks.ROWS_ENV, "load,startup")
    assert "isolation" not in ops(False) and {"load", "startup"} == set(ops(False))
    monkeypatch.delenv(benchmarks.ROWS_ENV)
    assert set(ops(True)) == {"load", "startup", "isolation"}


def test_the_step_observer_sees_each_forward_step_in_order(tmp_path, rng, monkeypatch):
    from serve_models import TEST_DTYPE, write_tiny_model

    from pygpukit import llm
    from pygpukit.llm.engine import Engine, RequestOutput, RequestParams, StepTimes

    model = llm.load(write_tiny_model(tmp_path / "m"), dtype=TEST_DTYPE, max_seq_len=128,
                     progress=False)  # fmt: skip
    prompts = [rng.integers(3, 300, int(n)).tolist() for n in rng.integers(5, 30, 3)]

    def run(params: RequestParams) -> tuple[list[StepTimes], list[RequestOutput]]:
        engine = Engine(model, max_batch=4, kv_memory="2MiB", max_batched_tokens=16)
        seen: list[StepTimes] = []
        engine.step_observer = seen.append
        outputs: list[RequestOutput] = []
        for p in prompts:
            engine.submit(p, params, outputs.append)
        while engine.step():
            pass
        assert engine.lookahead_steps > 0
        return seen, outputs

    # An "EOS" id the first answer reaches at its second token, so that request ends while
    # the step queued ahead of it computes one more row for it: a row nobody gets.
    _, plain = run(RequestParams(max_tokens=4, ignore_eos=True))
    first = [t for o in plain if o.request_id == plain[0].request_id for t in o.token_ids]
    eos = first[1]
    monkeypatch.setattr(model, "eos_token_ids", frozenset({eos}))
    seen, outputs = run(RequestParams(max_tokens=4))
    assert sum(o.finish_reason is not None for o in outputs) == 3
    assert any(o.finish_reason == "stop" for o in outputs)
    # Prompts of 5-29 tokens in 16-token steps, then 3 more tokens each: some chunked steps
    # that sample nothing or some, and decode-only steps that sample every running request.
    assert any(t.decode_only for t in seen) and any(not t.decode_only for t in seen)
    # Every token a request got was counted by one step; rows computed for a request that
    # had ended meanwhile were not.
    assert sum(t.tokens for t in seen) == sum(len(o.token_ids) for o in outputs)
    # The forward pass computed the sampled tokens and maybe prompt chunks and rows nobody got.
    assert all(t.batch_tokens >= max(t.tokens, 1) and t.launch_s > 0 for t in seen)
    for t in seen:
        assert t.start <= t.enqueued <= t.flushed <= t.sampled <= t.end
        assert t.host_s >= 0 and t.wait_s >= 0
        assert t.host_s + t.wait_s == pytest.approx(t.end - t.start)
    assert all(a.end <= b.start for a, b in itertools.pairwise(seen))


def test_the_switch_interval_comes_from_the_file_or_the_command_line(tmp_path):
    import argparse

    from pygpukit.llm.serve.cli import serve_arguments
    from pygpukit.llm.serve.config_file import ServeConfigError, resolve_options

    def args(*argv: str) -> argparse.Namespace:
        parser = argparse.ArgumentParser()
        serve_arguments(parser)
        return resolve_options(parser.parse_args(list(argv)))

    cfg = tmp_path / "serve.toml"
    cfg.write_text('switch_interval = 0.001\n\n[models.a]\npath = "a"\n')
    assert args("--config", str(cfg)).switch_interval == 0.001
    assert args("--config", str(cfg), "--switch-interval", "0.0005").switch_interval == 0.0005
    assert args("m").switch_interval is None  # unset: serve picks (see qos)
    cfg.write_text('switch_interval = "fast"\n\n[models.a]\npath = "a"\n')
    with pytest.raises(ServeConfigError, match="switch_interval must be int or float"):
        args("--config", str(cfg))
