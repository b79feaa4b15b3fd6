"""Read a cubin (an ELF64 file): its sections, its symbols, and the records of ``kernel.cuh``.

Standard library only: the kernel build (:mod:`pygpukit.kernels.build`) loads this file by
path before ``pygpukit`` is importable. ``PGK_KERNEL`` leaves ``pgk_entry_<name>`` (one type
code character per parameter, then a NUL) and ``pgk_params_<name>`` (the parameter list as
written, read for the parameter *names* only: the types come from the codes), and
``PGK_CONSTANT`` ``pgk_constant_<name>`` (a little-endian int64), as data symbols beside the
kernels; :func:`records` reads them back.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = ["ARG_CODES", "Cubin", "Records", "parameter_names", "records"]

#: ``kernel.cuh``'s one-character parameter codes -> the runtime's argument type codes.
ARG_CODES = {
    "p": "ptr",
    "b": "i8",
    "B": "u8",
    "h": "i16",
    "H": "u16",
    "i": "i32",
    "I": "u32",
    "q": "i64",
    "Q": "u64",
    "e": "f16",
    "E": "bf16",
    "f": "f32",
    "d": "f64",
    "?": "bool",
    "t": "tmap",
}

_ENTRY = "pgk_entry_"
_PARAMS = "pgk_params_"
_CONSTANT = "pgk_constant_"
_SHT_NOBITS = 8


@dataclass(frozen=True)
class Section:
    """One ELF section: its name, type, and where its bytes are in the file."""

    name: str
    type: int
    offset: int
    size: int


@dataclass(frozen=True)
class Symbol:
    """One ``.symtab`` entry: its name, its section's index, value (offset) and size."""

    name: str
    section: int
    value: int
    size: int


class Cubin:
    """The sections and symbols of one cubin (little-endian ELF64, as NVRTC writes them)."""

    def __init__(self, data: bytes) -> None:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise ValueError("not a little-endian ELF64 cubin")
        self.data = data
        shoff = struct.unpack_from("<Q", data, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
        names = raw[shstrndx]
        self.sections = [Section(self._string(names[4], r[0]), r[1], r[4], r[5]) for r in raw]
        self.symbols: list[Symbol] = []
        for r in raw:
            if r[1] != 2:  # SHT_SYMTAB; its sh_link names the string table
                continue
            strtab = raw[r[6]][4]
            for i in range(r[5] // 24):
                st_name, _info, _other, shndx, value, size = struct.unpack_from(
                    "<IBBHQQ", data, r[4] + i * 24
                )
                self.symbols.append(Symbol(self._string(strtab, st_name), shndx, value, size))

    def _string(self, table_offset: int, index: int) -> str:
        end = self.data.index(b"\0", table_offset + index)
        return self.data[table_offset + index : end].decode()

    def section_bytes(self, name: str) -> bytes:
        """The bytes of section ``name`` (``KeyError`` when the cubin has none)."""
        for s in self.sections:
            if s.name == name:
                return (
                    b"\0" * s.size
                    if s.type == _SHT_NOBITS
                    else self.data[s.offset : s.offset + s.size]
                )
        raise KeyError(name)

    def symbol_bytes(self, symbol: Symbol) -> bytes:
        """The bytes a data symbol covers (zeros in a NOBITS section such as ``.nv.global``)."""
        s = self.sections[symbol.section]
        if s.type == _SHT_NOBITS:
            return b"\0" * symbol.size
        start = s.offset + symbol.value
        return self.data[start : start + symbol.size]


@dataclass(frozen=True)
class Records:
    """What ``kernel.cuh`` recorded in one cubin.

    ``entries``: entry point -> ``{"args": [type codes], "names": [parameter names]}``;
    ``constants``: name -> value.
    """

    entries: dict[str, dict[str, list[str]]]
    constants: dict[str, int]


def parameter_names(params: str, count: int) -> list[str]:
    """The names in a parameter list as ``PGK_KERNEL`` wrote it (``"(const float* x, int n)"``).

    The last identifier of each top-level comma-separated part; ``arg<i>`` for an unnamed
    parameter. Only names are taken from the text: ``count`` (from the type codes) decides
    how many there are.
    """
    text = params.strip()
    if text.startswith("(") and text.endswith(")"):
        text = text[1:-1]
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "<(["
        depth -= ch in ">)]"
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    names = []
    for i in range(count):
        words = (
            parts[i].split("[")[0].replace("*", " ").replace("&", " ").split()
            if i < len(parts)
            else []
        )
        last = words[-1] if len(words) >= 2 else ""
        names.append(last if last.isidentifier() and last not in _TYPE_WORDS else f"arg{i}")
    return names


# Words that end a parameter declaration without a name (``int``, ``const float*``).
_TYPE_WORDS = {
    "char",
    "short",
    "int",
    "long",
    "unsigned",
    "signed",
    "float",
    "double",
    "bool",
    "void",
    "__half",
    "__nv_bfloat16",
    "CUtensorMap",
    "const",
    "volatile",
    "__restrict__",
}


def records(data: bytes) -> Records:
    """The ``PGK_KERNEL`` signatures and ``PGK_CONSTANT`` values of a cubin, by name."""
    cubin = Cubin(data)
    entries: dict[str, dict[str, list[str]]] = {}
    constants: dict[str, int] = {}
    texts = {
        sym.name[len(_PARAMS) :]: cubin.symbol_bytes(sym).rstrip(b"\0").decode()
        for sym in cubin.symbols
        if sym.name.startswith(_PARAMS)
    }
    for sym in cubin.symbols:
        if sym.name.startswith(_ENTRY):
            name = sym.name[len(_ENTRY) :]
            args = [ARG_CODES[c] for c in cubin.symbol_bytes(sym).rstrip(b"\0").decode()]
            entries[name] = {"args": args, "names": parameter_names(texts.get(name, ""), len(args))}
        elif sym.name.startswith(_CONSTANT):
            constants[sym.name[len(_CONSTANT) :]] = struct.unpack("<q", cubin.symbol_bytes(sym))[0]
    return Records(dict(sorted(entries.items())), dict(sorted(constants.items())))
