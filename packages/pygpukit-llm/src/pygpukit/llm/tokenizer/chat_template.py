"""Chat templates (Jinja) rendered as transformers' ``apply_chat_template`` renders them.

The same sandboxed environment (``trim_blocks``, ``lstrip_blocks``, loop controls), the same
globals (``raise_exception``, ``strftime_now``), a ``tojson`` filter with transformers'
arguments (non-ASCII kept), and the same variables: ``messages``, ``add_generation_prompt``,
``tools``, ``documents`` and the special tokens (``bos_token``, ``eos_token``, ...).
"""

from __future__ import annotations

import datetime
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..errors import TokenizerError

__all__ = ["render_chat_template"]


class _TemplateRaised(Exception):
    """``raise_exception(message)`` called by a template."""


def _raise_exception(message: str) -> None:
    raise _TemplateRaised(message)


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # jinja2's own tojson escapes HTML characters and sorts keys; chat templates expect the
    # plain JSON transformers emits.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    try:
        import jinja2
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:  # a dependency of pygpukit-llm; missing only in trimmed installs
        raise TokenizerError(
            "chat templates need jinja2: pip install jinja2 (a dependency of pygpukit-llm)"
        ) from exc
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise TokenizerError(
            f"the chat template is not valid Jinja (line {exc.lineno}: {exc.message})"
        ) from exc


def _check_messages(messages: Any) -> list[Mapping[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TokenizerError(
            "messages must be a list of {'role': ..., 'content': ...} dicts, got "
            f"{type(messages).__name__}"
        )
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise TokenizerError(
                f"message {i} must be a dict with 'role' and 'content', got {type(m).__name__}"
            )
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise TokenizerError(
                f"message {i} has no 'role' (e.g. 'system', 'user' or 'assistant'): {dict(m)!r}"
            )
    return list(messages)


def render_chat_template(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = True,
    special_tokens: Mapping[str, str | None] | None = None,
    tools: Sequence[Any] | None = None,
    documents: Sequence[Any] | None = None,
    **kwargs: Any,
) -> str:
    """Render ``template`` for ``messages`` as transformers' ``apply_chat_template`` does.

    ``special_tokens`` supplies ``bos_token``, ``eos_token``, ... (missing ones render empty);
    extra keyword arguments are template variables. A message without a role, a template
    syntax error or a ``raise_exception`` call is a :class:`TokenizerError`.
    """
    import jinja2

    checked = _check_messages(messages)
    compiled = _compile(template)
    variables: dict[str, Any] = {
        "bos_token": "",
        "eos_token": "",
        **{k: v for k, v in (special_tokens or {}).items() if v is not None},
        **kwargs,
    }
    try:
        return str(
            compiled.render(
                messages=checked,
                add_generation_prompt=add_generation_prompt,
                tools=tools,
                documents=documents,
                **variables,
            )
        )
    except _TemplateRaised as exc:
        raise TokenizerError(f"the chat template refused the messages: {exc}") from None
    except jinja2.TemplateError as exc:
        raise TokenizerError(f"the chat template failed: {exc}") from exc
