"""Kernel signatures parsed from CUDA C++ source: parameter names and ``_native`` type codes.

A small regex-based C declaration parser for ``gp.jit`` sources (user kernels). Package
kernels built with ``pygpukit/kernel.cuh`` need none of it: their type codes are recorded by
the compiler into the manifest (:mod:`pygpukit.kernels`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

__all__ = ["Param", "parse_signature", "signature"]

_TYPE_CODES = {
    "float": "f32",
    "double": "f64",
    "__half": "f16",
    "half": "f16",
    "__nv_bfloat16": "bf16",
    "nv_bfloat16": "bf16",
    "bool": "bool",
    "char": "i8",
    "signed char": "i8",
    "int8_t": "i8",
    "unsigned char": "u8",
    "uint8_t": "u8",
    "short": "i16",
    "short int": "i16",
    "signed short": "i16",
    "signed short int": "i16",
    "int16_t": "i16",
    "unsigned short": "u16",
    "unsigned short int": "u16",
    "uint16_t": "u16",
    "int": "i32",
    "signed": "i32",
    "signed int": "i32",
    "int32_t": "i32",
    "unsigned": "u32",
    "unsigned int": "u32",
    "uint32_t": "u32",
    "long": "i64",
    "long int": "i64",
    "signed long": "i64",
    "long long": "i64",
    "long long int": "i64",
    "signed long long": "i64",
    "int64_t": "i64",
    "ptrdiff_t": "i64",
    "ssize_t": "i64",
    "unsigned long": "u64",
    "unsigned long int": "u64",
    "unsigned long long": "u64",
    "unsigned long long int": "u64",
    "uint64_t": "u64",
    "size_t": "u64",
    "CUtensorMap": "tmap",
}
_TYPE_WORDS = {w for key in _TYPE_CODES for w in key.split()}
_QUALIFIERS = {
    "const",
    "volatile",
    "__restrict__",
    "__restrict",
    "restrict",
    "struct",
    "__grid_constant__",
}
_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_TOKENS = re.compile(r"[A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*|\*|&|\[[^\]]*\]")
_TEMPLATE = re.compile(r"template\s*<(?P<params>[^{;]*)>\s*$", re.S)


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, its C type as written, and its ``_native`` type code."""

    name: str
    ctype: str
    code: str


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return [p.strip() for p in parts if p.strip()]


def _matching_paren(text: str, open_index: int) -> int:
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError("unbalanced parentheses in the kernel declaration")


def _find_kernel(source: str, func: str) -> tuple[str, str]:
    """Return ``(parameter list text, template parameter text)`` of ``__global__`` ``func``."""
    text = _COMMENTS.sub(" ", source)
    for match in re.finditer(rf"\b{re.escape(func)}\s*\(", text):
        start = max(text.rfind(";", 0, match.start()), text.rfind("}", 0, match.start()))
        head = text[start + 1 : match.start()]
        if "__global__" not in head:
            continue
        open_index = match.end() - 1
        close = _matching_paren(text, open_index)
        template = _TEMPLATE.search(head[: head.find("__global__")].rstrip() + "")
        tparams = template.group("params") if template else ""
        return text[open_index + 1 : close], tparams
    raise ValueError(
        f"kernel {func!r} not found in the source: expected a declaration like "
        f'extern "C" __global__ void {func}(...)'
    )


def _template_bindings(tparams: str, name_expression: str | None) -> dict[str, str]:
    if not tparams or name_expression is None or "<" not in name_expression:
        return {}
    names = []
    for p in _split_top_level(tparams):
        words = p.split("=")[0].split()
        if words:
            names.append(words[-1])
    args = _split_top_level(
        name_expression[name_expression.index("<") + 1 : name_expression.rindex(">")]
    )
    return dict(zip(names, args, strict=False))


def _parse_param(text: str, index: int, bindings: dict[str, str]) -> Param:
    decl = text.split("=")[0].strip()
    tokens = [re.sub(r"\s+", "", t) for t in _TOKENS.findall(decl)]
    words = [t for t in tokens if t[0].isalpha() or t[0] == "_"]
    name = f"arg{index}"
    if len(words) >= 2 and words[-1] not in _TYPE_WORDS and words[-1] not in _QUALIFIERS:
        name = words[-1]
        tokens = (
            tokens[: len(tokens) - 1 - tokens[::-1].index(name)]
            + tokens[len(tokens) - tokens[::-1].index(name) :]
        )
    type_tokens = []
    for t in tokens:
        if t in _QUALIFIERS:
            continue
        t = bindings.get(t, t)
        if t.startswith("std::"):
            t = t[5:]
        type_tokens.append(t)
    ctype = " ".join(type_tokens)
    if "&" in type_tokens:
        raise ValueError(
            f"kernel parameter {name!r} is a reference ({decl!r}); "
            "kernels take pointers and scalars"
        )
    if any(t == "*" or t.startswith("[") for t in type_tokens) or ctype.endswith("*"):
        return Param(name, ctype, "ptr")
    code = _TYPE_CODES.get(" ".join(t for t in type_tokens))
    if code == "tmap" and not ("__grid_constant__" in tokens and "const" in tokens):
        # TMA reads the descriptor where the launch put it (parameter space); a plain by-value
        # parameter may be copied to local memory first, where TMA cannot use it.
        raise ValueError(
            f"kernel parameter {name!r} is a CUtensorMap; declare it "
            f"`const __grid_constant__ CUtensorMap {name}`"
        )
    if code is None:
        raise ValueError(
            f"kernel parameter {name!r} has type {ctype!r}, which gp.jit cannot pass; "
            "use a pointer or one of: "
            + ", ".join(sorted({k for k in _TYPE_CODES if " " not in k}))
        )
    return Param(name, ctype, code)


def parse_signature(source: str, func: str, name_expression: str | None = None) -> list[Param]:
    """Parse the parameters of ``__global__`` function ``func`` in ``source``.

    ``name_expression`` (``"scale<float>"``) binds the template parameters of a
    template kernel. ``ValueError`` when the kernel is missing or a parameter
    type cannot be passed.
    """
    params_text, tparams = _find_kernel(source, func)
    bindings = _template_bindings(tparams, name_expression)
    parts = _split_top_level(params_text)
    if parts == ["void"]:
        return []
    return [_parse_param(p, i, bindings) for i, p in enumerate(parts)]


@functools.lru_cache(maxsize=256)
def signature(source: str, func: str, name_expression: str | None) -> tuple[Param, ...]:
    """parse_signature, once per (source, kernel): gp.jit of a known kernel skips the parser."""
    return tuple(parse_signature(source, func, name_expression))
