"""Check or set the one version every package and crate shares.

    python tools/version.py            # check: exit 1 listing every file that disagrees
    python tools/version.py 0.2.0      # set it everywhere (versions and ==pins)

Places: each packages/*/pyproject.toml ([project] version and ==pins on sibling
packages), the Cargo workspace version, pygpukit.__version__.
"""

from __future__ import annotations

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
PIN = re.compile(r'"(pygpukit(?:-[a-z]+)?(?:\[[a-z,]+\])?)==([0-9][^"]*)"')
PROJECT_VERSION = re.compile(r'^version = "([^"]+)"', re.M)
INIT_VERSION = re.compile(r'^__version__ = "([^"]+)"', re.M)


def _places() -> list[tuple[pathlib.Path, re.Pattern[str]]]:
    places = [(p, PROJECT_VERSION) for p in sorted(ROOT.glob("packages/*/pyproject.toml"))]
    places.append((ROOT / "Cargo.toml", PROJECT_VERSION))
    places.append((ROOT / "packages/pygpukit-runtime/src/pygpukit/__init__.py", INIT_VERSION))
    return places


def found_versions() -> list[tuple[str, str]]:
    """(where, version) for every version string and sibling pin in the repo."""
    found = []
    for path, pattern in _places():
        text = path.read_text()
        rel = path.relative_to(ROOT)
        found += [(str(rel), m.group(1)) for m in pattern.finditer(text)]
        found += [(f"{rel} pin {m.group(1)}", m.group(2)) for m in PIN.finditer(text)]
    return found


def set_version(new: str) -> None:
    """Write ``new`` into every place."""
    for path, pattern in _places():
        text = path.read_text()
        text = pattern.sub(lambda m: m.group(0).replace(m.group(1), new), text)
        text = PIN.sub(lambda m: f'"{m.group(1)}=={new}"', text)
        path.write_text(text)


def main() -> int:
    """Check (no argument) or set (one argument) the version; return an exit code."""
    if len(sys.argv) > 1:
        if not re.fullmatch(r"\d+\.\d+\.\d+([.-]?(a|b|rc|dev)\d+)?", sys.argv[1]):
            print(f"not a version: {sys.argv[1]!r} (expected e.g. 0.2.0)", file=sys.stderr)
            return 2
        set_version(sys.argv[1])
    versions = found_versions()
    distinct = sorted({v for _, v in versions})
    if len(distinct) != 1:
        print("versions disagree:", file=sys.stderr)
        for where, v in versions:
            print(f"  {v:10} {where}", file=sys.stderr)
        return 1
    print(f"version {distinct[0]} in {len(versions)} places")
    return 0


if __name__ == "__main__":
    sys.exit(main())
