"""Host turns between engines of one server (:mod:`pygpukit.llm.engine.host_priority`): the
others step aside while a protected engine's host work is due, and answers do not change."""

from __future__ import annotations

import threading
import time

import pytest

from pygpukit.llm.engine.host_priority import HostPriority
from pygpukit.llm.serve.qos import share_host_turns
from pygpukit.stream import set_launches_keep_gil


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(1e-3)


def test_nothing_to_yield_to_returns_at_once():
    p = HostPriority()
    assert not p.contended()
    assert p.yield_turn() is False and p.yields == 0


def test_a_yield_waits_for_the_protected_host_phase_to_end():
    p = HostPriority(max_wait_s=60)
    order: list[str] = []
    returned: list[bool] = []

    def other() -> None:
        returned.append(p.yield_turn())
        order.append("other ran")

    with p.host_phase():
        assert p.contended()
        worker = threading.Thread(target=other)
        worker.start()
        _wait_until(lambda: p.waiting == 1, "the other thread to wait for its turn")
        order.append("phase ended")
    worker.join(60)
    assert order == ["phase ended", "other ran"] and returned == [True]
    assert p.yields == 1 and p.waiting == 0 and not p.contended()


def test_a_paused_phase_lets_others_run_until_its_step_is_due():
    p = HostPriority(max_wait_s=1e-3)
    due = [False]

    def host_due() -> bool:
        return due[0]

    p.watch(host_due)
    p.watch(host_due)  # once is enough
    assert p._due == [host_due]
    with p.host_phase():
        with p.paused():  # the protected engine waits for the device
            assert not p.contended()
            assert p.yield_turn() is False
            due[0] = True  # its step is done: its thread wants the lock back
            assert p.contended()
            assert p.yield_turn() is True  # waited (here until max_wait_s: nobody ends it)
        due[0] = False
        assert p.contended()  # the phase went on before the pause's end returned
    assert not p.contended()


def test_a_yield_never_waits_past_its_bound():
    p = HostPriority(max_wait_s=1e-3)
    with p.host_phase():
        assert p.yield_turn() is True
    assert p.yielded_s > 0
    with pytest.raises(ValueError, match="max_wait_s"):
        HostPriority(max_wait_s=0)


def _launches_keep_gil() -> bool:
    """This thread's setting (read by setting it and putting it back)."""
    was = set_launches_keep_gil(False)
    set_launches_keep_gil(was)
    return was


def test_the_protected_thread_keeps_the_lock_in_its_launches_during_its_host_phase():
    assert not _launches_keep_gil()
    with HostPriority().host_phase():
        assert _launches_keep_gil()
        others: list[bool] = []
        other = threading.Thread(target=lambda: others.append(_launches_keep_gil()))
        other.start()
        other.join(60)
        assert others == [False]  # another thread's launches still give the lock up
    assert not _launches_keep_gil()
    with HostPriority(launches_keep_gil=False).host_phase():
        assert not _launches_keep_gil()


class _Partition:
    def __init__(self, pacing: tuple[float, float, bool]) -> None:
        self.pacing = pacing


class _Engine:
    def __init__(self, partition: _Partition | None = None) -> None:
        self.turns: tuple[object, bool] | None = None
        self.partition = partition

    def share_host(self, priority: object, *, protected: bool) -> None:
        self.turns = (priority, protected)


def test_a_promised_model_beside_another_protects_only_the_promised_one():
    engines = {"chat": _Engine(), "bulk": _Engine(), "plain": _Engine()}
    priority = share_host_turns(engines, {"chat": "guaranteed", "bulk": "besteffort"})
    assert isinstance(priority, HostPriority)
    assert engines["chat"].turns == (priority, True)
    assert engines["bulk"].turns == (priority, False)
    assert engines["plain"].turns == (priority, False)


def test_launches_keep_the_lock_only_where_no_protected_launch_can_be_held():
    from pygpukit.llm.serve.partitions import create_partitions, parse_partition

    specs = [parse_partition("g=64MiB,0.25,guaranteed"), parse_partition("b=64MiB,0.25,burstable")]
    scheduler, parts = create_partitions(specs, 0)
    try:
        # A Guaranteed partition is unpaced by default; a Burstable one yields to Guaranteed.
        assert parts["g"].pacing[0] >= 1 and not parts["g"].pacing[2]
        assert parts["b"].pacing[2]
        for protected, keeps in (({"g"}, True), ({"g", "b"}, False)):
            engines = {n: _Engine(parts[n]) for n in protected} | {"bulk": _Engine()}
            classes = {n: parts[n].qos_class.value for n in protected} | {"bulk": "besteffort"}
            priority = share_host_turns(engines, classes)
            assert priority is not None and priority.launches_keep_gil is keeps
    finally:
        scheduler.shutdown()
    rated = {"chat": _Engine(_Partition((0.5, 20.0, False))), "bulk": _Engine()}
    priority = share_host_turns(rated, {"chat": "guaranteed", "bulk": "besteffort"})
    assert priority is not None and not priority.launches_keep_gil


@pytest.mark.parametrize(
    ("names", "classes"),
    [(["a"], {"a": "guaranteed"}), (["a", "b"], {"a": "besteffort"}), (["a", "b"], {})],
)
def test_no_turns_without_a_promise_beside_another_model(names, classes):
    engines = {n: _Engine() for n in names}
    assert share_host_turns(engines, classes) is None
    assert all(e.turns is None for e in engines.values())


def test_engines_taking_turns_give_the_answers_they_give_alone(tmp_path, rng):
    from serve_models import TEST_DTYPE, write_tiny_model

    from pygpukit import llm
    from pygpukit.llm.engine import Engine, RequestParams

    model = llm.load(write_tiny_model(tmp_path / "m"), dtype=TEST_DTYPE, max_seq_len=128,
                     progress=False)  # fmt: skip
    prompts = [rng.integers(3, 300, int(n)).tolist() for n in rng.integers(4, 20, 2)]

    def answers(turns: bool) -> list[tuple[int, ...]]:
        engines = [Engine(model, max_batch=4, kv_memory="2MiB", max_batched_tokens=32)
                   for _ in range(2)]  # fmt: skip
        priority = HostPriority(max_wait_s=5e-3) if turns else None
        engines[0].share_host(priority, protected=True)
        engines[1].share_host(priority, protected=False)
        outs: list[list] = [[] for _ in prompts]
        done = threading.Semaphore(0)

        def sink(i: int):
            def put(o) -> None:
                outs[i].append(o)
                if o.finish_reason is not None:
                    done.release()

            return put

        for e in engines:
            e.start()
        try:
            for i, p in enumerate(prompts):
                engines[i % 2].submit(p, RequestParams(max_tokens=3), sink(i))
            for _ in prompts:
                assert done.acquire(timeout=120)
        finally:
            for e in engines:
                e.shutdown()
        assert engines[0]._waiting is None and not engines[0].host_due()
        assert engines[1].protected is False and engines[0].protected is turns
        return [tuple(t for o in out for t in o.token_ids) for out in outs]

    assert answers(True) == answers(False)
