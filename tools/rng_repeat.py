"""A pytest plugin that hunts chance failures by repeating the tests that take ``rng``.

Every test taking the ``rng`` fixture runs ``RNG_REPEAT`` times, each with a fresh seed, and
tests without it are left out.

A test that fails for a few percent of seeds passes most full runs and then fails CI now and
then; repeating only the seeded tests finds it in minutes::

    PYTHONPATH=tools RNG_REPEAT=20 python -m pytest -p rng_repeat -n 2 tests/llm

A failing repetition's report shows its seed (``rng`` records it), so the case can be
studied with ``np.random.default_rng(seed)``.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

_REPEAT = "__rng_repeat"


def _repeats() -> int:
    return int(os.environ.get("RNG_REPEAT", "0") or 0)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize each test that takes ``rng`` over ``range(RNG_REPEAT)``."""
    n = _repeats()
    if n and "rng" in metafunc.fixturenames:
        metafunc.fixturenames.append(_REPEAT)
        metafunc.parametrize(_REPEAT, range(n))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the tests that do not take ``rng`` (they would only run again unchanged)."""
    if not _repeats():
        return
    keep = [item for item in items if "rng" in getattr(item, "fixturenames", ())]
    config.hook.pytest_deselected(items=[item for item in items if item not in keep])
    items[:] = keep


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    """Show a failing test's seed in its report."""
    outcome = yield
    report = outcome.get_result()
    seeds = [value for key, value in item.user_properties if key == "seed"]
    if report.failed and seeds:
        report.sections.append(("rng seed", str(seeds[0])))
