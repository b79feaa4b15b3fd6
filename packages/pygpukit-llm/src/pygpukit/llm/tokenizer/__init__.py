"""pygpukit.llm.tokenizer: text in and out of a model.

:func:`load_tokenizer` reads a Hugging Face ``tokenizer.json`` (with ``tokenizer_config.json``,
``generation_config.json`` and ``chat_template.jinja``) or a GGUF file's tokenizer metadata and
returns a :class:`Tokenizer` (``encode``, ``decode``, special and EOS ids,
``apply_chat_template``), or None for a directory without tokenizer files.
:class:`Detokenizer` streams text from generated ids without ever emitting a broken UTF-8
sequence; :class:`StopStrings` cuts a stream at user stop strings without emitting them.
"""

from __future__ import annotations

from .chat_template import render_chat_template
from .detokenizer import Detokenizer, StopStrings
from .tokenizer import Tokenizer, load_tokenizer

__all__ = ["Detokenizer", "StopStrings", "Tokenizer", "load_tokenizer", "render_chat_template"]
