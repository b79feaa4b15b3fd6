"""The engine's side-stream transfers do not wait for work queued on the compute stream: a step
queued ahead keeps running while the next step's inputs go up and the last step's ids come
down."""

from __future__ import annotations

import numpy as np
import pytest

import pygpukit as gp
from pygpukit.llm.engine.side_stream import upload

pytestmark = pytest.mark.gpu


def test_upload_leaves_queued_compute_work_running():
    rng = np.random.default_rng()
    a = gp.from_numpy(rng.standard_normal((8192, 8192), np.float32).astype(np.float16))
    gp.synchronize()
    compute = gp.current_stream()
    for _ in range(40):  # well over 100 ms of tensor-core work on any GPU of this project
        a @ a
    host = rng.integers(0, 1 << 30, 4096, dtype=np.int32)
    got = upload(host)
    assert not compute.query()  # the upload did not synchronize the compute stream
    np.testing.assert_array_equal(got.to_numpy(), host)  # and its data is there
    gp.synchronize()
