"""Compare the kernels' machine code of two kernel builds, kernel by kernel (no GPU needed).

    python tools/compare_cubins.py OLD_DIR NEW_DIR

OLD_DIR and NEW_DIR are build outputs (``sm_<arch>/<file>.cubin``, as ``tools/build_kernels.py``
writes them). For every kernel of every cubin it compares the ``.text.<kernel>`` section (the
SASS), the relocations applied to it (offset, type, target symbol) and the ``.nv.info.<kernel>``
attributes (registers, parameter layout, ...), with symbol-table indices replaced by the names
they point at (extra data symbols renumber the table without changing the code), and prints one
line per kernel: ``identical`` or what differs. Exit code 1 when a kernel differs or is missing
on one side.
"""

from __future__ import annotations

import importlib.util
import pathlib
import struct
import sys
from typing import Any

_CUBIN = (
    pathlib.Path(__file__).resolve().parent.parent
    / "packages/pygpukit-runtime/src/pygpukit/kernels/cubin.py"
)


def _load_cubin_module():
    spec = importlib.util.spec_from_file_location("_pygpukit_cubin", _CUBIN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# EIATTR_PARAM_CBANK: the kernel's parameter constant bank, as (symbol index, offset, size).
_EIATTR_PARAM_CBANK = 0x0A


def info_records(cubin, data: bytes) -> list[tuple[int, int, bytes | str]]:
    """The ``.nv.info`` records of one kernel as (format, attribute, value), symbols by name."""
    records: list[tuple[int, int, bytes | str]] = []
    i = 0
    while i + 2 <= len(data):
        fmt, attr = data[i], data[i + 1]
        i += 2
        if fmt == 4:  # EIFMT_SVAL: a 2-byte size, then the value
            (size,) = struct.unpack_from("<H", data, i)
            value = data[i + 2 : i + 2 + size]
            i += 2 + size
        else:  # EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL: records stay 4 bytes, 2 of them the value
            value = data[i : i + 2]
            i += 2
        if attr == _EIATTR_PARAM_CBANK and len(value) >= 4:
            (index,) = struct.unpack_from("<I", value)
            name = cubin.symbols[index].name if index < len(cubin.symbols) else "?"
            records.append((fmt, attr, f"{name}:{value[4:].hex()}"))
        else:
            records.append((fmt, attr, value))
    return records


def kernel_parts(cubin_mod, data: bytes) -> dict[str, tuple[Any, Any, Any]]:
    """Kernel name -> (text bytes, relocations of the text, .nv.info bytes)."""
    cubin = cubin_mod.Cubin(data)
    names = {s.name for s in cubin.sections}
    parts = {}
    for section in cubin.sections:
        if not section.name.startswith(".text."):
            continue
        kernel = section.name[len(".text.") :]
        relocs: list[tuple[int, int, str]] = []
        for prefix, entsize in ((".rela", 24), (".rel", 16)):
            rname = f"{prefix}{section.name}"
            if rname not in names:
                continue
            raw = cubin.section_bytes(rname)
            for i in range(len(raw) // entsize):
                offset, info = struct.unpack_from("<QQ", raw, i * entsize)
                sym = cubin.symbols[info >> 32].name if (info >> 32) < len(cubin.symbols) else "?"
                relocs.append((offset, info & 0xFFFFFFFF, sym))
        info_name = f".nv.info.{kernel}"
        raw_info = cubin.section_bytes(info_name) if info_name in names else b""
        info = info_records(cubin, raw_info)
        parts[kernel] = (cubin.section_bytes(section.name), sorted(relocs), info)
    return parts


def main() -> int:
    """Print one line per kernel; return 1 when anything differs."""
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    old_dir, new_dir = (pathlib.Path(a) for a in sys.argv[1:])
    cubin_mod = _load_cubin_module()
    differ = 0
    total = 0
    for old_path in sorted(old_dir.glob("sm_*/*.cubin")):
        rel = old_path.relative_to(old_dir)
        new_path = new_dir / rel
        if not new_path.exists():
            print(f"{rel}: missing in {new_dir}")
            differ += 1
            continue
        old = kernel_parts(cubin_mod, old_path.read_bytes())
        new = kernel_parts(cubin_mod, new_path.read_bytes())
        for kernel in sorted(set(old) | set(new)):
            total += 1
            if kernel not in old or kernel not in new:
                where = "new" if kernel not in new else "old"
                print(f"{rel.parent.name} {rel.stem}:{kernel}: missing in the {where} build")
                differ += 1
                continue
            parts = ("text", "relocations", "nv.info")
            diffs = [w for w, a, b in zip(parts, old[kernel], new[kernel], strict=True) if a != b]
            print(
                f"{rel.parent.name} {rel.stem}:{kernel}: "
                + ("identical" if not diffs else "differs in " + ", ".join(diffs))
                + f" ({len(old[kernel][0])} bytes of SASS)"
            )
            differ += bool(diffs)
    print(f"{total} kernels compared, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
