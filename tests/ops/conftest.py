"""Puts this folder on ``sys.path`` so that ``tests/ops/gpu`` can import ``ops_references``.

pytest's default import mode adds only a test module's own folder to ``sys.path``; the
shared float64 references (``ops_references.py``, next to this file, a name no other test
folder uses) serve both the CPU tests here and the GPU tests in ``gpu/``.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
