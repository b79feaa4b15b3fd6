"""``pygpukit serve``: an OpenAI-compatible HTTP server over :mod:`pygpukit.llm.engine`.

``create_app({"name": engine})`` is the FastAPI app; ``python -m pygpukit serve MODEL`` runs it
with uvicorn (``pip install "pygpukit-llm[serve]"``). Guide: docs/serve.md.
"""

from __future__ import annotations

__all__ = ["create_app"]


def __getattr__(name: str) -> object:
    # FastAPI is an optional dependency: import it only when the app is asked for.
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
