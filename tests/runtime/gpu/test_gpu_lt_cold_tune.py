"""cuBLASLt's timed pass with the streamed operand cold (``PYGPUKIT_LT_TUNE=cold``).

A product that streams one operand (a weight [N, K] against a few rows of x) is timed, on its
first call, over temporary copies of the weight spanning 4x the L2 cache, as a model's layers
read their weights; the result must be the product of the caller's operands all the same.
The variable is read once per process by the C++ core, so each setting runs in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

# Three products in one process: a decode-step-like x[64, 4096] @ W[4096, 4096].T with W a
# plain array (streamed: timed cold when enabled), the same with an evictable W (may move if
# the pass allocated: timed warm), and a square 1024^3 (not streamed: timed warm). Each is
# checked against float64 on fresh random data; the plans' flags are printed as JSON.
CODE = r"""
import json
import ml_dtypes
import numpy as np
import pygpukit as gp
from pygpukit.backend import cuda_linalg
from pygpukit.linalg import matmul_nt

rng = np.random.default_rng()
out = {"loaded": bool(cuda_linalg.cublaslt_status()["loaded"]), "errors": {}, "plans": {}}
cases = {"streamed": (64, 4096, 4096, False), "evictable": (48, 4096, 4096, True),
         "square": (1024, 1024, 1024, False)}
for name, (m, n, k, evictable) in cases.items() if out["loaded"] else ():
    x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((n, k)).astype(ml_dtypes.bfloat16)
    gx, gw = gp.from_numpy(x), gp.from_numpy(w, evictable=evictable)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    for _ in range(2):  # the first call times the candidates, the second runs the choice
        got = matmul_nt(gx, gw).to_numpy().astype(np.float64)
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        out["errors"].setdefault(name, []).append(err)
    for p in cuda_linalg._native.cublaslt_plans(gp.get_device()):
        if (p["m"], p["n"], p["k"]) == (m, n, k) and p["dtype"] == "bfloat16":
            out["plans"][name] = {"tuned": p["tuned"], "cold": p["cold"]}
print("RESULT " + json.dumps(out))
"""


def _run(setting: str | None) -> dict:
    env = {key: v for key, v in os.environ.items() if key != "PYGPUKIT_LT_TUNE"}
    env["PYGPUKIT_GEMM_BACKEND"] = "cublaslt"
    if setting is not None:
        env["PYGPUKIT_LT_TUNE"] = setting
    proc = subprocess.run(
        [sys.executable, "-c", CODE], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(s for s in proc.stdout.splitlines() if s.startswith("RESULT "))
    result: dict = json.loads(line[len("RESULT ") :])
    if not result["loaded"]:
        pytest.skip("cuBLASLt is not installed")
    return result


def _check_products(result: dict) -> None:
    for name, errors in result["errors"].items():
        # bfloat16 output of fp32 sums: about 2^-9 relative rounding per element.
        assert all(e < 8e-3 for e in errors), f"{name}: relative errors {errors}"


def test_cold_setting_times_a_streamed_product_on_copies_and_stays_correct() -> None:
    result = _run("cold")
    _check_products(result)
    plans = result["plans"]
    assert plans["streamed"] == {"tuned": True, "cold": True}
    # An evictable weight could move if the pass allocated; a square product streams nothing.
    assert plans["evictable"]["cold"] is False
    assert plans["square"] == {"tuned": True, "cold": False}


def test_default_setting_times_warm() -> None:
    result = _run(None)
    _check_products(result)
    assert all(not p["cold"] for p in result["plans"].values()), result["plans"]
    assert result["plans"]["streamed"]["tuned"]
