"""Long-form transcription: 30-second windows, seeking by the timestamps the model emits.

As openai-whisper does it: the log-mel of the whole recording (with 30 s of zeros appended) is
cut into 3000-frame windows starting at ``seek``; each window is decoded after a prompt of the
previous text (``condition_on_previous_text``); the timestamp pairs in its tokens become
segments and the next window starts at the last complete pair (or after the window when the
model says the speech runs on). A window whose result looks wrong (compression ratio above
2.4: a repetition loop; average log-probability below -1) is decoded again at the next
temperature; one that is probably silence (no-speech probability above 0.6 with a low
log-probability) is skipped, and so is a window whose samples all stay below
``SILENCE_PEAK`` (-80 dBFS: digital silence, where Whisper is known to invent a word).
``batch_size > 1`` decodes independent, fixed 30 s windows together instead (no previous-text
prompt, no timestamp seeking): throughput over context.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

import pygpukit as gp
from pygpukit.array import GPUArray

from .config import HOP_LENGTH, N_FRAMES, SAMPLE_RATE, SECONDS_PER_TOKEN
from .decoding import DecodeResult, DecodingOptions, WindowDecoder
from .word_bounds import Loudness, tighten_words

__all__ = ["Segment", "TranscribeOptions", "Transcription", "run_batched", "run_transcription"]

COMPRESSION_RATIO_THRESHOLD = 2.4
LOGPROB_THRESHOLD = -1.0
NO_SPEECH_THRESHOLD = 0.6
SILENCE_PEAK = 1e-4
FRAME_SECONDS = HOP_LENGTH / SAMPLE_RATE


@dataclass(frozen=True)
class Segment:
    """A stretch of speech: seconds from the start of the audio, its text and decoding stats."""

    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    temperature: float = 0.0
    words: list[dict[str, float | str]] | None = None


@dataclass(frozen=True)
class Transcription:
    """The result of :meth:`WhisperModel.transcribe`.

    ``text`` (the segments joined), ``language`` (the code used or detected), ``segments`` in
    time order, ``duration`` (seconds).
    """

    text: str
    language: str
    segments: list[Segment] = field(default_factory=list)
    duration: float = 0.0


@dataclass(frozen=True)
class TranscribeOptions:
    """The options of :meth:`WhisperModel.transcribe` after validation."""

    temperatures: tuple[float, ...]
    beam_size: int
    condition_on_previous_text: bool
    without_timestamps: bool
    batch_size: int
    sot: tuple[int, ...]
    word_timestamps: bool = False
    language: str = "en"
    max_new_tokens: int = 224


#: ``encode(mel windows [B, n_mels, 3000]) -> features [B, 1500, C]``.
Encode = Callable[[GPUArray], object]


def _window(mel: GPUArray, seek: int) -> tuple[GPUArray, int]:
    """The 3000 frames from ``seek`` (zero-padded at the end) and how many hold audio."""
    content = mel.shape[1] - N_FRAMES
    size = min(N_FRAMES, content - seek)
    seg = mel[:, seek : seek + N_FRAMES]
    if seg.shape[1] < N_FRAMES:
        whole = gp.zeros((mel.shape[0], N_FRAMES), np.float32)
        whole[:, : seg.shape[1]] = seg
        seg = whole
    return seg, size


def _with_fallback(
    dec: WindowDecoder, features: object, prompt: list[int], sot_index: int, o: TranscribeOptions
) -> DecodeResult:
    result: DecodeResult | None = None
    for t in o.temperatures:
        opts = DecodingOptions(
            temperature=t, beam_size=o.beam_size if t == 0 else 1,
            without_timestamps=o.without_timestamps, sample_len=o.max_new_tokens,
        )  # fmt: skip
        result = dec.decode(features, [prompt], sot_index, opts)[0]  # type: ignore[arg-type]
        if _acceptable(result):
            break
    assert result is not None
    return result


def _acceptable(r: DecodeResult) -> bool:
    if r.no_speech_prob > NO_SPEECH_THRESHOLD and r.avg_logprob < LOGPROB_THRESHOLD:
        return True  # silence: nothing better will come at a higher temperature
    return r.compression_ratio <= COMPRESSION_RATIO_THRESHOLD and r.avg_logprob >= LOGPROB_THRESHOLD


def _silent(r: DecodeResult) -> bool:
    return r.no_speech_prob > NO_SPEECH_THRESHOLD and r.avg_logprob < LOGPROB_THRESHOLD


def _segments(
    r: DecodeResult, dec: WindowDecoder, offset: float, size: int, duration: float
) -> tuple[list[Segment], int]:
    """Cut a window's tokens at its timestamp pairs; also the frames to advance ``seek`` by."""
    tb = dec.tok.timestamp_begin
    toks = r.tokens
    is_ts = [t >= tb for t in toks]
    ends_single = len(toks) >= 2 and is_ts[-1] and not is_ts[-2]
    cuts = [i + 1 for i in range(len(toks) - 1) if is_ts[i] and is_ts[i + 1]]
    out: list[Segment] = []

    def add(start: float, end: float, part: Sequence[int]) -> None:
        text = dec.tok.decode(list(part))
        start, end = min(start, duration), min(end, duration)
        if text.strip() and end > start:
            out.append(Segment(start, end, text, list(part), r.avg_logprob, r.compression_ratio,
                               r.no_speech_prob, r.temperature))  # fmt: skip

    if cuts:
        if ends_single:
            cuts.append(len(toks))
        last = 0
        for cut in cuts:
            part = toks[last:cut]
            add(offset + (part[0] - tb) * SECONDS_PER_TOKEN,
                offset + (part[-1] - tb) * SECONDS_PER_TOKEN, part)  # fmt: skip
            last = cut
        advance = size if ends_single else (toks[last - 1] - tb) * 2
        return out, max(1, advance)
    span = size * FRAME_SECONDS
    stamps = [t for t in toks if t >= tb]
    if stamps and stamps[-1] != tb:
        span = (stamps[-1] - tb) * SECONDS_PER_TOKEN
    add(offset, offset + span, toks)
    return out, size


def _with_words(
    dec: WindowDecoder, features: object, o: TranscribeOptions, segments: list[Segment],
    offset: float, size: int, wave: np.ndarray,
) -> list[Segment]:  # fmt: skip
    """``segments`` of one window with their words.

    Each word's start and end are clipped into its segment, then narrowed to the voice in
    ``wave`` (:mod:`.word_bounds`).
    """
    tokens = [t for s in segments for t in s.tokens if t < dec.tok.eot]
    words = dec.align(features, o.sot, tokens, size, offset, o.language)  # type: ignore[arg-type]
    loudness = Loudness(wave, offset, offset + size * FRAME_SECONDS)
    out, first = [], 0
    for seg in segments:
        n = sum(1 for t in seg.tokens if t < dec.tok.eot)
        mine = []
        for w, k in words:
            if first <= k < first + n:
                start = min(max(float(w["start"]), seg.start), seg.end)
                end = min(max(float(w["end"]), start), seg.end)
                mine.append({"word": w["word"], "start": round(start, 3), "end": round(end, 3)})
        out.append(replace(seg, words=tighten_words(mine, loudness)))
        first += n
    return out


def _quiet(wave: np.ndarray, seek: int, size: int) -> bool:
    """Whether the samples of frames ``[seek, seek + size)`` are digital silence."""
    part = wave[seek * HOP_LENGTH : (seek + size) * HOP_LENGTH]
    return part.size == 0 or float(np.max(np.abs(part))) < SILENCE_PEAK


def run_transcription(
    wave: np.ndarray, mel: GPUArray, encode: Encode, dec: WindowDecoder, o: TranscribeOptions,
    progress: Callable[[float], None] | None = None,
) -> list[Segment]:  # fmt: skip
    """All segments of 16 kHz samples ``wave`` whose log-mel (30 s of zeros appended) is ``mel``."""
    duration = wave.size / SAMPLE_RATE
    if o.batch_size > 1:
        return _batched(wave, mel, encode, dec, o, progress)
    content = mel.shape[1] - N_FRAMES
    seek, reset = 0, 0
    history: list[int] = []
    segments: list[Segment] = []
    n_ctx_half = dec.decoder.cfg.max_target_positions // 2
    while seek < content:
        window, size = _window(mel, seek)
        if _quiet(wave, seek, size):
            seek, reset = seek + size, len(history)
            if progress is not None:
                progress(min(duration, seek * FRAME_SECONDS))
            continue
        features = encode(window.reshape(1, *window.shape))
        prev = history[reset:]
        prompt = ([dec.tok.sot_prev, *prev[-(n_ctx_half - 1) :]] if prev else []) + list(o.sot)
        if o.without_timestamps:
            prompt.append(dec.tok.no_timestamps)
        sot_index = len(prompt) - len(o.sot) - (1 if o.without_timestamps else 0)
        r = _with_fallback(dec, features, prompt, sot_index, o)
        offset = seek * FRAME_SECONDS
        if _silent(r):
            seek += size
        else:
            new, advance = _segments(r, dec, offset, size, duration)
            if o.word_timestamps and new:
                new = _with_words(dec, features, o, new, offset, size, wave)
            segments.extend(new)
            seek += advance
            history.extend(t for s in new for t in s.tokens)
        if not o.condition_on_previous_text or r.temperature > 0.5:
            reset = len(history)
        if progress is not None:
            progress(min(duration, seek * FRAME_SECONDS))
    return segments


def _batched(
    wave: np.ndarray, mel: GPUArray, encode: Encode, dec: WindowDecoder, o: TranscribeOptions,
    progress: Callable[[float], None] | None,
) -> list[Segment]:  # fmt: skip
    return run_batched([(wave, mel, o)], encode, dec, o.batch_size, progress)[0]


def run_batched(
    items: Sequence[tuple[np.ndarray, GPUArray, TranscribeOptions]], encode: Encode,
    dec: WindowDecoder, batch_size: int, progress: Callable[[float], None] | None = None,
) -> list[list[Segment]]:  # fmt: skip
    """Segments of each ``(samples, log-mel, options)`` recording.

    Its 30 s windows are decoded ``batch_size`` at a time across all the recordings (no
    previous-text prompt, no seeking).
    """
    jobs = [(f, seek) for f, (wave, mel, _) in enumerate(items)
            for seek in range(0, mel.shape[1] - N_FRAMES, N_FRAMES)
            if not _quiet(wave, seek, N_FRAMES)]  # fmt: skip
    out: list[list[Segment]] = [[] for _ in items]
    # Quiet windows count as done at once, so the progress ends at the full duration.
    done = sum(wave.size / SAMPLE_RATE for wave, _, _ in items) - sum(
        min(N_FRAMES, items[f][1].shape[1] - N_FRAMES - seek) * FRAME_SECONDS for f, seek in jobs
    )
    for first in range(0, len(jobs), batch_size):
        group = jobs[first : first + batch_size]
        windows = [_window(items[f][1], seek) for f, seek in group]
        prompts = [_batch_prompt(dec, items[f][2]) for f, _ in group]
        features = encode(gp.stack([w for w, _ in windows]))
        o0 = items[group[0][0]][2]
        results = dec.decode(features, prompts, 0,  # type: ignore[arg-type]
                             DecodingOptions(without_timestamps=o0.without_timestamps,
                                             sample_len=o0.max_new_tokens))  # fmt: skip
        for i, ((f, seek), (_, size)) in enumerate(zip(group, windows, strict=True)):
            wave, _, o = items[f]
            r, one = results[i], features[i : i + 1]  # type: ignore[index]
            if not _acceptable(r) and len(o.temperatures) > 1:
                rest = replace(o, temperatures=o.temperatures[1:])
                r = _with_fallback(dec, one, prompts[i], 0, rest)
            if not _silent(r):
                offset = seek * FRAME_SECONDS
                new = _segments(r, dec, offset, size, wave.size / SAMPLE_RATE)[0]
                if o.word_timestamps and new:
                    new = _with_words(dec, one, o, new, offset, size, wave)
                out[f].extend(new)
            done += size * FRAME_SECONDS
        if progress is not None:
            progress(done)
    return out


def _batch_prompt(dec: WindowDecoder, o: TranscribeOptions) -> list[int]:
    return list(o.sot) + ([dec.tok.no_timestamps] if o.without_timestamps else [])
