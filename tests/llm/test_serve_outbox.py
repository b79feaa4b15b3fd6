"""The server's outbox: engine outputs from another thread reach each request's asyncio queue
in order, with one event-loop wake-up per batch of outputs instead of one per output."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

pytest.importorskip("fastapi")

from pygpukit.llm.engine import RequestOutput
from pygpukit.llm.serve.app import _Outbox


def test_outputs_arrive_in_order_with_few_wakeups():
    rng = np.random.default_rng()
    per_queue = int(rng.integers(50, 120))

    async def main() -> tuple[list[list[str]], int]:
        loop = asyncio.get_running_loop()
        wakeups = 0
        real = loop.call_soon_threadsafe

        def counting(*args):
            nonlocal wakeups
            wakeups += 1
            return real(*args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        box = _Outbox(loop)
        queues: list[asyncio.Queue[RequestOutput]] = [asyncio.Queue() for _ in range(4)]

        def engine_thread() -> None:  # a step makes one output per request, steps in a row
            for step in range(per_queue):
                for i, q in enumerate(queues):
                    box.put(q, RequestOutput(f"r{i}", f"{step}", (step,)))

        # Outputs put while the loop is busy (here: before it runs again) wake it once.
        box.put(queues[0], RequestOutput("r0", "first", ()))
        box.put(queues[1], RequestOutput("r1", "first", ()))
        assert wakeups == 1
        assert [(await q.get()).text for q in queues[:2]] == ["first", "first"]
        wakeups = 0
        t = threading.Thread(target=engine_thread)
        t.start()
        got: list[list[str]] = [[] for _ in queues]
        for i, q in enumerate(queues):
            while len(got[i]) < per_queue:
                got[i].append((await q.get()).text)
        t.join()
        return got, wakeups

    got, wakeups = asyncio.run(main())
    assert got == [[str(s) for s in range(per_queue)]] * 4
    assert 1 <= wakeups < 4 * per_queue  # batched: fewer wake-ups than outputs


def test_a_protected_models_waiting_outputs_are_written_before_the_others():
    from pygpukit.llm.serve.app import _Server

    async def main() -> list[str]:
        server = _Server({}, grace_s=1.0)
        box = server.outbox()
        mine: asyncio.Queue[RequestOutput] = asyncio.Queue()
        server.protected_queues.add(mine)
        order: list[str] = []

        async def other_stream() -> None:  # a BestEffort stream about to write
            await server.protected_first(box)
            order.append("other")

        async def protected_stream() -> None:
            order.append((await mine.get()).text)

        # The other stream is ready first; the protected output is still in the outbox.
        tasks = [asyncio.create_task(other_stream()), asyncio.create_task(protected_stream())]
        box.put(mine, RequestOutput("g", "protected", (1,)), protected=True)
        assert box.protected_waiting
        await asyncio.gather(*tasks)
        assert not box.protected_waiting and mine.empty()
        # Nothing protected waits: the other stream goes on at once.
        server.protected_queues.clear()
        await server.protected_first(box)
        return order

    assert asyncio.run(main()) == ["protected", "other"]


def test_the_event_loop_steps_aside_at_most_once_per_period(monkeypatch):
    from pygpukit.llm.serve import app

    clock = [100.0]
    monkeypatch.setattr(app.time, "perf_counter", lambda: clock[0])
    waits: list[float | None] = []

    class Other:  # an engine without a promise whose protected neighbour's work is due
        def yield_host(self, max_wait_s: float | None = None) -> bool:
            waits.append(max_wait_s)
            return True

    server = app._Server({}, grace_s=1.0)
    server.loop_yield(Other())
    server.loop_yield(Other())  # within the period: no second wait
    clock[0] += app._LOOP_YIELD_S
    server.loop_yield(Other())
    assert waits == [app._LOOP_YIELD_S, app._LOOP_YIELD_S]
