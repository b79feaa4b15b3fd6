"""The repository's documents stand alone: every document they or the code name is in the repo.

Markdown links between documents must resolve, and a ``*.md`` named anywhere in the docs or
the source must be a file of the repository, so no page points at notes
that live somewhere else.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
# Files the tools write, named in the docs that describe their output.
OUTPUTS = {"bench.md"}
TEXT = {".md", ".py", ".cpp", ".hpp", ".h", ".cu", ".cuh", ".rs", ".toml", ".sh", ".cmake", ".txt"}
SKIP = {"_kernels", "target", "build", "__pycache__", ".nox", ".git", ".carry"}


def _files() -> list[pathlib.Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    for folder in ("docs", "packages", "native", "rust", "tools", "tests", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.is_file() and path.suffix in TEXT and not SKIP & set(path.parts):
                files.append(path)
    return files


def _documents() -> set[str]:
    return {p.name for p in _files() if p.suffix == ".md"}


def test_every_named_document_is_in_the_repository() -> None:
    known = _documents() | OUTPUTS
    missing = []
    for path in _files():
        for name in re.findall(
            r"[\w.-]+\.md\b", path.read_text(encoding="utf-8", errors="replace")
        ):
            if pathlib.PurePath(name).name not in known:
                missing.append(f"{path.relative_to(ROOT)}: {name}")
    assert not missing, missing


def test_markdown_links_resolve() -> None:
    broken = []
    for path in _files():
        if path.suffix != ".md":
            continue
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            if not (path.parent / target).exists():
                broken.append(f"{path.relative_to(ROOT)}: {target}")
    assert not broken, broken
