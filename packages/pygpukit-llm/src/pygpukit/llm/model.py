"""``CausalLM``: load a causal language model, then generate, stream, chat or score with it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from .config import ModelConfig
from .errors import TokenizerError
from .generate import Decoder, Generation, GenerationOptions, GenerationRequest, GenerationStats
from .kv_cache import StaticKVCache, plan_max_seq_len
from .models import ARCHITECTURES
from .models.llama import check_shapes, checkpoint_tensors

if TYPE_CHECKING:  # typing.Unpack is Python 3.11+; annotations are not evaluated at run time
    from typing_extensions import Unpack

__all__ = ["CausalLM", "load"]

_CPU_KV_BUDGET = 1 << 30  # host memory for the KV cache on the CPU backend
_GPU_KV_FRACTION = 0.25  # of the device's memory, unless kv_cache_memory says otherwise


def _kv_budget(kv_cache_memory: int | float | str | None, device: int) -> int:
    """Bytes for the KV cache: an int, a fraction of the device memory, or a size string."""
    if isinstance(kv_cache_memory, str):
        try:
            kv_cache_memory = gp.memory.parse_size(kv_cache_memory)
        except ValueError:
            raise ValueError(
                f"kv_cache_memory {kv_cache_memory!r} is not a size ('2GiB', '512MiB', bytes) "
                "or a fraction of the device ('0.5')"
            ) from None
    total = gp.get_device_info(device)["total_memory"]
    if kv_cache_memory is None:
        return _CPU_KV_BUDGET if not total else int(total * _GPU_KV_FRACTION)
    if isinstance(kv_cache_memory, float):
        if not 0 < kv_cache_memory <= 1:
            raise ValueError(f"a kv_cache_memory fraction must be in (0, 1], got {kv_cache_memory}")
        return int((total or _CPU_KV_BUDGET) * kv_cache_memory)
    if isinstance(kv_cache_memory, bool) or not isinstance(kv_cache_memory, int):
        raise TypeError("kv_cache_memory must be bytes, a fraction or a size string")
    return kv_cache_memory


class CausalLM:
    """A causal language model of the Llama family, ready to generate on one device.

    Build one with :func:`load` (``CausalLM.from_pretrained`` is the same) or, for weights
    already in memory, :meth:`from_weights`. ``config`` is the :class:`ModelConfig`,
    ``tokenizer`` the :class:`~pygpukit.llm.tokenizer.Tokenizer` (None for a checkpoint without
    tokenizer files: the token-id forms of :meth:`generate` and :meth:`forward` still work),
    ``max_seq_len`` the context the KV cache holds.
    """

    def __init__(
        self,
        config: ModelConfig,
        weights: dict[str, GPUArray],
        *,
        tokenizer: Any = None,
        max_seq_len: int | None = None,
        kv_cache_memory: int | float | str | None = None,
        device: int = 0,
        eos_token_ids: Sequence[int] = (),
        source: str = "",
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.device = device
        dtype = next(iter(weights.values())).dtype
        budget = _kv_budget(kv_cache_memory, device)
        self.max_seq_len = plan_max_seq_len(config, dtype, max_seq_len, budget)
        with gp.Device(device):
            self._model = ARCHITECTURES[config.architecture](
                config, weights, self.max_seq_len, source
            )
            self._cache = StaticKVCache(config, 1, self.max_seq_len, dtype)
            self._decoder = Decoder(self._model, self._cache)
        tok_eos = getattr(tokenizer, "eos_token_ids", ()) or ()
        self.eos_token_ids = frozenset((*config.eos_token_ids, *eos_token_ids, *tok_eos))

    # --- construction ----------------------------------------------------------------------

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike[str],
        *,
        dtype: Any = "bfloat16",
        max_seq_len: int | None = None,
        device: int = 0,
        progress: bool = True,
        kv_cache_memory: int | float | str | None = None,
    ) -> CausalLM:
        """Load a Hugging Face model directory (SafeTensors) or a ``.gguf`` file.

        ``dtype``: the weights' dtype on the device (float32, float16 or bfloat16).
        ``max_seq_len``: the context to preallocate the KV cache for (default: the config's
        ``max_position_embeddings``, lowered to fit ``kv_cache_memory``: bytes, a fraction of
        the device memory or a size string like ``"2GiB"``; default a quarter of the device).
        Raises :class:`~pygpukit.llm.errors.UnsupportedModelError` for an architecture not
        listed in ``pygpukit.llm.ARCHITECTURES`` and
        :class:`~pygpukit.llm.errors.CheckpointError` for missing or misshapen tensors,
        before any weight is uploaded.
        """
        from .loading import open_checkpoint
        from .tokenizer import load_tokenizer

        with open_checkpoint(path) as ckpt:
            config = ModelConfig.from_dict(ckpt.hf_config)
            infos = ckpt.tensor_infos()
            check_shapes(config, {k: i.shape for k, i in infos.items()}, str(path))
            names = [name for name, _, _ in checkpoint_tensors(config)]
            with gp.Device(device):
                weights = ckpt.load(dtype, progress=progress, names=names)
            gen_eos = ckpt.generation_config.get("eos_token_id")
        tokenizer = load_tokenizer(path)
        eos = gen_eos if isinstance(gen_eos, list) else ([gen_eos] if gen_eos is not None else [])
        return cls(
            config,
            weights,
            tokenizer=tokenizer,
            max_seq_len=max_seq_len,
            kv_cache_memory=kv_cache_memory,
            device=device,
            eos_token_ids=[int(e) for e in eos],
            source=str(path),
        )

    @classmethod
    def from_weights(
        cls,
        config: Mapping[str, Any] | ModelConfig,
        weights: Mapping[str, GPUArray | np.ndarray],
        *,
        dtype: Any = None,
        tokenizer: Any = None,
        max_seq_len: int | None = None,
        kv_cache_memory: int | float | str | None = None,
    ) -> CausalLM:
        """A model from a config and Hugging Face-named weights already in memory.

        ``config``: a ``config.json`` dict or a :class:`ModelConfig`; ``weights``: GPUArrays or
        NumPy arrays, converted to ``dtype`` (default: their own).
        """
        cfg = config if isinstance(config, ModelConfig) else ModelConfig.from_dict(config)
        arrays = {
            k: (v if isinstance(v, GPUArray) else gp.from_numpy(np.asarray(v)))
            for k, v in weights.items()
        }
        if dtype is not None:
            arrays = {k: v.astype(dtype) for k, v in arrays.items()}
        return cls(cfg, arrays, tokenizer=tokenizer, max_seq_len=max_seq_len,
                   kv_cache_memory=kv_cache_memory)  # fmt: skip

    # --- scoring ----------------------------------------------------------------------------

    def forward(self, input_ids: Any) -> GPUArray:
        """float32 logits ``[batch, seq, vocab]`` of equal-length token-id sequences, no cache.

        ``input_ids``: a ``[batch, seq]`` (or ``[seq]``) int array, list or GPUArray.
        """
        ids = input_ids.to_numpy() if isinstance(input_ids, GPUArray) else np.asarray(input_ids)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.ndim != 2 or ids.dtype.kind not in "iu" or ids.shape[1] == 0:
            raise ValueError(
                f"input_ids must be [batch, seq] token ids, got {ids.dtype} {ids.shape}"
            )
        self._check_ids(ids.reshape(-1))
        b, s = ids.shape
        if s > self.max_seq_len:
            raise ValueError(f"{s} tokens exceed max_seq_len = {self.max_seq_len}")
        m = self._model
        with gp.Device(self.device):
            positions = gp.from_numpy(np.broadcast_to(np.arange(s, dtype=np.int32), (b, s)).copy())
            x = m.hidden_states(gp.from_numpy(ids.astype(np.int32)), positions,
                                m.attend_uncached())  # fmt: skip
            return m.logits(x)

    # --- generation -------------------------------------------------------------------------

    def _check_ids(self, ids: np.ndarray) -> None:
        v = self.config.vocab_size
        if ids.size and (ids.min() < 0 or ids.max() >= v):
            raise ValueError(
                f"token ids must be in [0, {v}), got {int(ids.min())}..{int(ids.max())}"
            )

    def _need_tokenizer(self, what: str) -> Any:
        if self.tokenizer is None:
            raise TokenizerError(
                f"{what} needs a tokenizer, and this model has none (no tokenizer.json next "
                "to the weights); pass token ids instead"
            )
        return self.tokenizer

    def _prompt_ids(self, prompt: str | Sequence[int]) -> np.ndarray:
        """The prompt's token ids, checked, as int32 ``[S]``.

        An int array or a list of ints converts in one NumPy call (a per-token Python loop
        costs a 1024-token prompt a tenth of a millisecond before the GPU starts); anything
        else goes through ``int()`` token by token.
        """
        if isinstance(prompt, str):
            ids = np.asarray(self._need_tokenizer("a text prompt").encode(prompt), np.int64)
        else:
            ids = np.asarray(prompt)
            if ids.ndim != 1 or ids.dtype.kind not in "iu":
                ids = np.asarray([int(t) for t in prompt], np.int64)
            self._check_ids(ids)
        if not ids.size:
            raise ValueError("the prompt is empty; give at least one token")
        if ids.size >= self.max_seq_len:
            raise ValueError(
                f"the prompt has {ids.size} tokens, max_seq_len is {self.max_seq_len}: it leaves "
                "no room to generate; shorten it or load with a larger max_seq_len"
            )
        return ids.astype(np.int32)

    def _request(
        self, prompt: str | Sequence[int], options: Mapping[str, Any]
    ) -> tuple[GenerationRequest, np.ndarray]:
        """Validate a request up front (before any GPU work); it and the prompt's token ids."""
        request = GenerationRequest.from_options(options)
        if request.stop and self.tokenizer is None:
            self._need_tokenizer("stop strings")
        return request, self._prompt_ids(prompt)

    def _events(self, ids: np.ndarray, request: GenerationRequest) -> Iterator[str]:
        """Yield text pieces (``""`` without a tokenizer); sets ``self._last`` at the end."""
        tok = self.tokenizer
        detok = tok.detokenizer(context=ids[-4:].tolist()) if tok is not None else None
        stops = tok.stop_strings(request.stop) if tok is not None else None
        start = time.perf_counter()
        out: list[int] = []
        first = last = start
        reason, cut = "length", False
        with gp.Device(self.device):
            for t, when in self._decoder.run(
                ids, request.max_new_tokens, request.sampling, self.eos_token_ids
            ):
                out.append(t)
                first, last = (when if len(out) == 1 else first), when
                if t in self.eos_token_ids:
                    reason = "stop"
                    break
                if detok is not None and stops is not None:
                    piece, cut = stops.feed(detok.add(t))
                    yield piece
                    if cut:
                        reason = "stop"
                        break
        if detok is not None and stops is not None and not cut:
            piece, _ = stops.feed(detok.flush())
            yield piece + stops.flush()
        ttft = first - start
        decode_s = last - first
        self._last = (out, reason, GenerationStats(
            prompt_tokens=len(ids),
            generated_tokens=len(out),
            time_to_first_token_s=ttft if out else 0.0,
            prefill_tokens_per_s=len(ids) / ttft if out and ttft > 0 else 0.0,
            decode_tokens_per_s=(len(out) - 1) / decode_s if len(out) > 1 and decode_s > 0 else 0.0,
        ))  # fmt: skip

    def generate(
        self, prompt: str | Sequence[int], **options: Unpack[GenerationOptions]
    ) -> Generation:
        """Generate up to ``max_new_tokens`` (default 256) after ``prompt`` (text or token ids).

        ``options`` (:class:`~pygpukit.llm.generate.GenerationOptions`): ``max_new_tokens``,
        ``temperature`` (0, the default, is greedy), ``top_k`` (0: off), ``top_p`` (in (0, 1]),
        ``min_p``, ``repetition_penalty`` (HF semantics), ``seed`` (reproduces a run) and
        ``stop``. Stops at an EOS id of the model or at one of the ``stop`` strings (not
        included in the text). Raises ``ValueError`` for a prompt that does not fit
        ``max_seq_len`` or an out-of-range option, ``TypeError`` for an unknown one.
        """
        request, ids = self._request(prompt, options)
        text = "".join(self._events(ids, request))
        out, reason, stats = self._last
        return Generation(text=text, token_ids=out, finish_reason=reason, stats=stats)

    def stream(
        self, prompt: str | Sequence[int], **options: Unpack[GenerationOptions]
    ) -> Iterator[str]:
        """As :meth:`generate` (the same options), yielding text pieces as they are decoded.

        A piece never ends inside a UTF-8 character. After the loop, :attr:`last_stats` holds
        the generation's stats.
        """
        self._need_tokenizer("stream()")
        request, ids = self._request(prompt, options)
        return (piece for piece in self._events(ids, request) if piece)

    @property
    def decoder(self) -> Decoder:
        """The step-level engine (``prefill``, ``decode_step``, device state) under generate."""
        return self._decoder

    @property
    def last_stats(self) -> GenerationStats | None:
        """Stats of the last finished generation or stream."""
        last = getattr(self, "_last", None)
        return None if last is None else last[2]

    def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        stream: bool = False,
        **options: Unpack[GenerationOptions],
    ) -> Generation | Iterator[str]:
        """Reply to ``messages`` (``[{"role": "user", "content": "..."}]``).

        The model's chat template renders them with the assistant's turn opened.
        ``stream=True`` returns :meth:`stream`'s iterator, else a :class:`Generation`.
        ``options``: :meth:`generate`'s keyword arguments.
        """
        tok = self._need_tokenizer("chat()")
        for i, m in enumerate(messages):
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
                raise TokenizerError(f"message {i} has no 'role' (a str such as 'user'): {m!r}")
        text = tok.apply_chat_template(list(messages), add_generation_prompt=True)
        ids = tok.encode(text, add_special_tokens=False)
        if stream:
            return self.stream(ids, **options)
        return self.generate(ids, **options)

    def __repr__(self) -> str:
        c = self.config
        return (
            f"<CausalLM {c.architecture} {c.num_layers} layers, hidden {c.hidden_size}, "
            f"{self._model.dtype}, max_seq_len {self.max_seq_len}>"
        )


#: Load a model directory or ``.gguf`` file: :meth:`CausalLM.from_pretrained` itself.
load = CausalLM.from_pretrained
