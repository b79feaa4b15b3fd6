"""Decoding one 30-second window per row: prompts, logit rules, greedy / sampling / beam search.

The network runs on the device; the per-token rules run on the host over each step's float32
logits (one download of ``[B, vocab]`` a step): the suppressed tokens, a blank first token,
and Whisper's timestamp grammar (timestamps come in pairs, never go back, the first one within
``max_initial_timestamp``, and text is forbidden once the timestamps together are likelier
than any text token). The rules look at each row's whole history, which is why they live on
the host. The decode step itself is a CUDA graph captured once per batch size and replayed
for every token.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

import pygpukit as gp
from pygpukit import ops
from pygpukit.array import GPUArray

from .alignment import word_timings
from .config import SECONDS_PER_TOKEN
from .model import Decoder, DecoderState
from .tokenizer import WhisperTokenizer

__all__ = ["DecodeResult", "DecodingOptions", "WindowDecoder", "compression_ratio", "sot_sequence"]


@dataclass(frozen=True)
class DecodingOptions:
    """How to decode a window.

    ``temperature`` 0 is greedy (or beam search with ``beam_size`` > 1); ``sample_len`` caps
    the new tokens; timestamps unless ``without_timestamps``; ``seed`` for sampling.
    """

    temperature: float = 0.0
    beam_size: int = 1
    sample_len: int = 224
    without_timestamps: bool = False
    max_initial_timestamp: float = 1.0
    seed: int | None = None


@dataclass
class DecodeResult:
    """One row's result: the new tokens (without the final EOT) and their statistics."""

    tokens: list[int]
    text: str
    avg_logprob: float
    no_speech_prob: float
    temperature: float
    compression_ratio: float


def compression_ratio(text: str) -> float:
    """``len(utf8) / len(zlib(utf8))``: repetitive text compresses well (> 2.4 is a loop)."""
    raw = text.encode("utf-8")
    return len(raw) / len(zlib.compress(raw)) if raw else 0.0


def _log_softmax(x: np.ndarray) -> np.ndarray:
    m = np.max(x, axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    z = x - m
    return z - np.log(np.sum(np.exp(z), axis=-1, keepdims=True))


class WindowDecoder:
    """Decodes batches of windows with one :class:`Decoder`, keeping a state per batch size."""

    def __init__(self, decoder: Decoder, tokenizer: WhisperTokenizer | None) -> None:
        self.decoder = decoder
        self.tok: WhisperTokenizer = tokenizer  # type: ignore[assignment]  # None: greedy only
        cfg = decoder.cfg
        self.suppress = np.zeros(0, np.int64)
        self.begin_suppress = np.zeros(0, np.int64)
        if tokenizer is not None:
            t = tokenizer
            specials = (t.translate, t.transcribe, t.sot, t.sot_prev, t.sot_lm, t.no_speech)
            suppress = {*cfg.suppress_tokens, *specials} - {t.eot}
            self.suppress = np.array(
                sorted(i for i in suppress if 0 <= i < cfg.vocab_size), np.int64
            )
            begin = cfg.begin_suppress_tokens or (*t.encode(" "), t.eot)
            self.begin_suppress = np.array(sorted(set(begin)), np.int64)
        self.states: dict[int, DecoderState] = {}
        self._suppress_bias: GPUArray | None = None
        self.use_graphs = gp.backend_name() == "cuda"

    def state(self, batch: int) -> DecoderState:
        """The device state for ``batch`` rows (made once, then reused)."""
        if batch not in self.states:
            self.states[batch] = DecoderState(self.decoder.cfg, batch, self.decoder.dtype)
        return self.states[batch]

    def _step(self, state: DecoderState, tokens: np.ndarray, position: int) -> np.ndarray:
        """Feed one token per row at ``position``; the next logits ``[B, vocab]`` on the host."""
        b = state.batch
        state.inputs[...] = np.stack(
            [
                tokens.astype(np.int32),
                np.full(b, position, np.int32),
                np.full(b, position + 1, np.int32),
            ]
        )
        if not self.use_graphs or not state.warm:
            # The first step runs eagerly: every launch plan is made (and any error raised)
            # outside the capture, which then records launches only.
            state.warm = self.use_graphs
            return np.asarray(self.decoder.step(state).to_numpy())
        if state.graph is None:
            with gp.graph_capture() as g:
                state.logits = self.decoder.step(state)
            state.graph = g
        state.graph.replay()  # type: ignore[attr-defined]
        assert state.logits is not None
        return np.asarray(state.logits.to_numpy())

    def greedy(
        self, features: GPUArray, prompt: np.ndarray, new_tokens: int, *, suppress: bool = True
    ) -> np.ndarray:
        """Exactly ``new_tokens`` greedy ids per row ``[B, new_tokens]``, decided on the device.

        No host rule runs (no timestamp grammar, no stop at EOT); the suppressed tokens are a
        ``-inf`` bias added to the logits. The step, its argmax and the position update are one
        CUDA graph; each token is copied into a device history and read back once at the end.
        This is raw decoding (benchmarks, fixed-length scoring); :meth:`decode` is the
        transcription path.
        """
        b, s = prompt.shape
        state = self.state(b)
        self.decoder.set_audio(state, features)
        logits = self.decoder.prefill(state, prompt.astype(np.int32), (s - 1,))[0]
        bias = self._bias() if suppress else None
        out = gp.zeros((max(new_tokens, 1), b), gp.int32)
        if new_tokens <= 0:
            return np.zeros((b, 0), np.int32)
        if bias is not None:
            logits = logits + bias
        ops.argmax(logits, out=state.tokens)
        state.inputs[1:] = np.array([[s] * b, [s + 1] * b], np.int32)
        out[0] = state.tokens
        for i in range(1, new_tokens):
            if not self.use_graphs or not state.warm:
                state.warm = self.use_graphs
                self._greedy_body(state, bias)
            else:
                key = "greedy" if bias is not None else "greedy_raw"
                if key not in state.greedy:
                    with gp.graph_capture() as g:
                        self._greedy_body(state, bias)
                    state.greedy[key] = g
                state.greedy[key].replay()
            out[i] = state.tokens
        return np.asarray(out.to_numpy()).T.copy()

    def _greedy_body(self, state: DecoderState, bias: GPUArray | None) -> None:
        logits = self.decoder.step(state)
        if bias is not None:
            gp.add(logits, bias, out=logits)
        ops.argmax(logits, out=state.tokens)
        gp.add(state.inputs[1:], 1, out=state.inputs[1:])

    def _bias(self) -> GPUArray | None:
        """``-inf`` at the suppressed ids and the timestamps (None without a tokenizer)."""
        if self._suppress_bias is None and self.tok is not None:
            v = np.zeros(self.decoder.cfg.vocab_size, np.float32)
            v[self.suppress] = -np.inf
            v[self.tok.timestamp_begin :] = -np.inf
            self._suppress_bias = gp.from_numpy(v)
        return self._suppress_bias

    def align(
        self, features: GPUArray, sot: Sequence[int], tokens: Sequence[int], frames: int,
        offset: float, language: str,
    ) -> list[tuple[dict[str, float | str], int]]:  # fmt: skip
        """Word timings of a window's text ``tokens`` (see :mod:`.alignment`).

        Each comes with the index of its first text token; ``features`` ``[1, T, C]`` is the
        window's audio and ``frames`` its speech length in mel frames.
        """
        text = [t for t in tokens if t < self.tok.eot]
        if not text:
            return []
        cfg = self.decoder.cfg
        heads = cfg.alignment_heads or tuple(
            (layer, h) for layer in range(cfg.decoder_layers // 2, cfg.decoder_layers)
            for h in range(cfg.decoder_heads)
        )  # fmt: skip
        record: dict[int, list[int]] = {}
        for layer, h in heads:
            record.setdefault(layer, []).append(h)
        seq = [*sot, self.tok.no_timestamps, *text, self.tok.eot]
        state = self.state(1)
        self.decoder.set_audio(state, features)
        recorded: list[GPUArray] = []
        self.decoder.prefill(state, np.array([seq], np.int32), (len(seq) - 1,), record, recorded)
        weights = np.stack([np.asarray(r.to_numpy())[0] for r in recorded])
        rows = weights[:, len(sot) : len(sot) + len(text) + 1]
        pieces = [self.tok.token_text(t) for t in text]
        return word_timings(rows, pieces, frames // 2, offset, language)

    # --- the logit rules ----------------------------------------------------------------------

    def _rules(self, logits: np.ndarray, seq: Sequence[int], opts: DecodingOptions) -> np.ndarray:
        """Apply suppression and the timestamp grammar to one row (float64 copy, in place)."""
        t = self.tok
        logits[self.suppress] = -np.inf
        if not seq:
            logits[self.begin_suppress] = -np.inf
        if opts.without_timestamps:
            logits[t.timestamp_begin :] = -np.inf
            return logits
        tb = t.timestamp_begin
        logits[t.no_timestamps] = -np.inf
        last_ts = len(seq) >= 1 and seq[-1] >= tb
        penult_ts = len(seq) < 2 or seq[-2] >= tb
        if last_ts:
            if penult_ts:
                logits[tb:] = -np.inf  # a closed pair: text (or EOT) must follow
            else:
                logits[: t.eot] = -np.inf  # an open pair: a timestamp (or EOT) must follow
        stamps = [x for x in seq if x >= tb]
        if stamps:
            floor = stamps[-1] if (last_ts and not penult_ts) else stamps[-1] + 1
            logits[tb:floor] = -np.inf  # never back in time
        if not seq:
            logits[:tb] = -np.inf  # a window starts with a timestamp
            if opts.max_initial_timestamp is not None:
                last_allowed = tb + round(opts.max_initial_timestamp / SECONDS_PER_TOKEN)
                logits[last_allowed + 1 :] = -np.inf
        lp = _log_softmax(logits)
        stamps_lp = np.logaddexp.reduce(lp[tb:])
        if stamps_lp > np.max(lp[:tb]):
            logits[:tb] = -np.inf
        return logits

    # --- the loops ----------------------------------------------------------------------------

    def decode(
        self, features: GPUArray, prompts: Sequence[Sequence[int]], sot_index: int,
        opts: DecodingOptions,
    ) -> list[DecodeResult]:  # fmt: skip
        """Decode each row of ``features`` ``[B, T, C]`` after its prompt (equal lengths)."""
        if opts.beam_size > 1 and opts.temperature == 0:
            return [self._beam(features[i : i + 1], prompts[i], sot_index, opts)
                    for i in range(features.shape[0])]  # fmt: skip
        b = features.shape[0]
        state = self.state(b)
        self.decoder.set_audio(state, features)
        prompt = np.asarray(prompts, np.int32)
        s = prompt.shape[1]
        both = self.decoder.prefill(state, prompt, (sot_index, s - 1)).to_numpy()
        no_speech = np.exp(_log_softmax(both[0].astype(np.float64)))[:, self.tok.no_speech]
        logits = both[1]
        rng = np.random.default_rng(opts.seed)
        seqs: list[list[int]] = [[] for _ in range(b)]
        sum_lp = np.zeros(b)
        done = np.zeros(b, bool)
        limit = min(opts.sample_len, self.decoder.cfg.max_target_positions - s)
        for step in range(limit):
            chosen = np.full(b, self.tok.eot, np.int64)
            for r in range(b):
                if done[r]:
                    continue
                row = self._rules(logits[r].astype(np.float64), seqs[r], opts)
                lp = _log_softmax(row)
                if opts.temperature > 0:
                    p = np.exp(_log_softmax(row / opts.temperature))
                    tok = int(rng.choice(p.size, p=p / p.sum()))
                else:
                    tok = int(np.argmax(row))
                chosen[r] = tok
                if tok == self.tok.eot:
                    done[r] = True
                else:
                    sum_lp[r] += lp[tok]
                    seqs[r].append(tok)
            if done.all() or step == limit - 1:
                break
            logits = self._step(state, chosen, s + step)
        return [self._result(seqs[r], sum_lp[r], float(no_speech[r]), opts) for r in range(b)]

    def _result(
        self, tokens: list[int], sum_lp: float, no_speech: float, opts: DecodingOptions
    ) -> DecodeResult:
        text = self.tok.decode(tokens)
        return DecodeResult(
            tokens=tokens, text=text, avg_logprob=float(sum_lp) / (len(tokens) + 1),
            no_speech_prob=no_speech, temperature=opts.temperature,
            compression_ratio=compression_ratio(text),
        )  # fmt: skip

    def _beam(
        self, features: GPUArray, prompt: Sequence[int], sot_index: int, opts: DecodingOptions
    ) -> DecodeResult:
        """Beam search over one window, ``beam_size`` rows.

        Finished hypotheses are ranked by their summed log-probability over their length
        (openai-whisper's default ranking).
        """
        k = opts.beam_size
        state = self.state(k)
        self.decoder.set_audio(state, gp.concatenate([features] * k, axis=0))
        s = len(prompt)
        both = self.decoder.prefill(state, np.asarray([prompt] * k, np.int32), (sot_index, s - 1))
        host = both.to_numpy()
        no_speech = float(np.exp(_log_softmax(host[0, 0].astype(np.float64)))[self.tok.no_speech])
        logits = host[1]
        beams: list[tuple[list[int], float]] = [([], 0.0)]
        finished: list[tuple[list[int], float]] = []
        limit = min(opts.sample_len, self.decoder.cfg.max_target_positions - s)
        for step in range(limit):
            cands: list[tuple[float, int, int]] = []  # (score, beam, token)
            for i, (seq, score) in enumerate(beams):
                lp = _log_softmax(self._rules(logits[i].astype(np.float64), seq, opts))
                top = np.argsort(lp)[::-1][: k + 1]
                cands.extend((score + float(lp[t]), i, int(t)) for t in top if np.isfinite(lp[t]))
            cands.sort(key=lambda c: -c[0])
            nxt: list[tuple[list[int], float]] = []
            parents: list[int] = []
            for score, i, t in cands:
                if t == self.tok.eot:
                    if len(finished) < k:
                        finished.append((beams[i][0], score))
                elif len(nxt) < k:
                    nxt.append((beams[i][0] + [t], score))
                    parents.append(i)
            if len(finished) >= k or not nxt or step == limit - 1:
                break
            while len(nxt) < k:  # keep k rows: repeat the best live hypothesis
                nxt.append(nxt[0])
                parents.append(parents[0])
            self._reorder(state, parents)
            beams = nxt
            logits = self._step(state, np.array([seq[-1] for seq, _ in beams]), s + step)
        pool = finished or beams
        best, score = max(pool, key=lambda h: h[1] / max(1, len(h[0])))
        return self._result(best, score, no_speech, opts)

    def _reorder(self, state: DecoderState, parents: list[int]) -> None:
        """Copy each surviving hypothesis's self-attention cache rows to its new row."""
        if parents == list(range(state.batch)):
            return
        idx = gp.from_numpy(np.asarray(parents, np.int64))
        for i in range(len(state.k)):
            state.k[i][...] = gp.take(state.k[i], idx, axis=0)
            state.v[i][...] = gp.take(state.v[i], idx, axis=0)


def sot_sequence(
    tok: WhisperTokenizer, multilingual: bool, language: str | None, task: str
) -> list[int]:
    """``<|startoftranscript|>`` then, on multilingual models, the language and task tokens."""
    if not multilingual:
        return [tok.sot]
    lang = tok.language_id(language or "en")
    return [tok.sot, lang, tok.translate if task == "translate" else tok.transcribe]
