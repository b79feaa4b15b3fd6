"""ops_audio: STFT and Whisper's log-mel frontend of long audio against PyTorch.

Audio of ``--sizes`` seconds at 16 kHz (default 600: ten minutes; 30 s and 10 minutes with
``--sizes 30,600``), float32, noise shaped like speech loudness. Cases:

- ``stft``: ``ops.stft(x, n_fft, hop)`` (complex, Hann, centred, reflect) against
  ``torch.stft(..., return_complex=True)`` (cuFFT) for Whisper's n_fft 400 / hop 160 and
  n_fft 1024 / hop 256;
- ``log_mel``: ``ops.log_mel_spectrogram(x, 80)`` against the same frontend in torch
  (transformers' ``WhisperFeatureExtractor._torch_extract_fbank_features``: ``torch.stft``,
  power, mel matmul, log10, clamp to max - 8, scale), and torchaudio's ``MelSpectrogram``
  followed by the same scaling when torchaudio is importable (the ``torchaudio`` column is
  reported as a separate op).

Bytes moved are the samples read plus the result written (the floor any implementation pays).
Outputs are checked on a few frames against float64 NumPy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from pygpukit.benchmark.case import Case, Skip, Timed, unavailable
from pygpukit.benchmark.peers import Library
from pygpukit.benchmark.registry import Suite, SuiteContext

NAME = "ops_audio"
SR = 16000
#: Frames whose values are checked against float64 NumPy.
CHECK_FRAMES = 8


def _ops() -> Any:
    try:
        from pygpukit import ops
    except ImportError as exc:  # pragma: no cover - pygpukit-ops is this module's package
        raise Skip(f"pygpukit.ops is not importable: {exc}") from exc
    return ops


def _audio(ctx: SuiteContext, seconds: float, k: int) -> np.ndarray:
    n = int(seconds * SR)
    noise = ctx.data.get((n,), "float32", k)
    envelope = 0.05 + 0.05 * np.abs(np.sin(np.arange(n) * (2 * np.pi / SR) * 3.0))
    return (noise * envelope).astype(np.float32)


def _frames(x: np.ndarray, n_fft: int, hop: int, which: np.ndarray) -> np.ndarray:
    padded = np.pad(x.astype(np.float64), n_fft // 2, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    return np.stack([padded[f * hop : f * hop + n_fft] * window for f in which])


def stft_case(ctx: SuiteContext, seconds: float, n_fft: int, hop: int) -> Case:
    """``stft`` of ``seconds`` of audio."""
    n = int(seconds * SR)
    frames = 1 + n // hop
    bins = n_fft // 2 + 1
    params: dict[str, int | float | str] = {"seconds": seconds, "n_fft": n_fft, "hop": hop}
    nbytes = 4 * n + 8 * bins * frames

    def setup(lib: Library, copies: int) -> Timed:
        hosts = [_audio(ctx, seconds, k) for k in range(copies)]
        xs = [lib.upload(h, "float32") for h in hosts]
        which = np.unique(ctx.rng.integers(0, frames, size=CHECK_FRAMES))
        ref = np.fft.rfft(_frames(hosts[0], n_fft, hop, which), axis=-1).T  # [bins, checked]
        if lib.name == "torch":
            torch = lib.module
            window = torch.hann_window(n_fft, device=xs[0].device)

            def run(i: int) -> Any:
                return torch.stft(
                    xs[i % copies],
                    n_fft,
                    hop,
                    window=window,
                    center=True,
                    pad_mode="reflect",
                    return_complex=True,
                )

            def to_complex(out: Any) -> np.ndarray:
                return out.cpu().numpy()

        else:
            ops = _ops()

            def run(i: int) -> Any:
                return ops.stft(xs[i % copies], n_fft, hop)

            def to_complex(out: Any) -> np.ndarray:
                z = out.to_numpy()
                return z[..., 0] + 1j * z[..., 1]

        def check(out: Any) -> float:
            got = to_complex(out)[:, which]
            err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            if not err < 1e-4:
                raise AssertionError(f"stft ({lib.name}): relative error {err:.2e}")
            return err

        return Timed(run=run, check=check)

    setups = {"pygpukit": setup, "torch": setup, "cupy": unavailable("no CuPy STFT")}
    return Case(
        NAME,
        "stft",
        params,
        setups,
        bytes_moved=nbytes,
        working_set=nbytes,
        ceiling="copy_bw",
        requires=("from_numpy",),
    )


def _whisper_torch(torch: Any, x: Any, window: Any, filters: Any) -> Any:
    spec = torch.stft(x, 400, 160, window=window, return_complex=True)
    power = spec[..., :-1].abs() ** 2
    log_spec = torch.clamp(filters @ power, min=1e-10).log10()
    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


def log_mel_case(ctx: SuiteContext, seconds: float, peer: str) -> Case:
    """Whisper's log-mel frontend (80 mels) of ``seconds`` of audio.

    ``peer``: ``"torch"`` (the transformers torch frontend) or ``"torchaudio"``.
    """
    n = int(seconds * SR)
    frames = n // 160
    params: dict[str, int | float | str] = {"seconds": seconds, "n_mels": 80, "peer": peer}
    nbytes = 4 * n + 4 * 80 * frames

    def setup(lib: Library, copies: int) -> Timed:
        from pygpukit.ops.reference import mel as mel_ref

        hosts = [_audio(ctx, seconds, k) for k in range(copies)]
        xs = [lib.upload(h, "float32") for h in hosts]
        filters64 = mel_ref.mel_filterbank(SR, 400, 80, 0.0, 8000.0, False, "slaney")
        if lib.name == "torch":
            torch = lib.module
            device = xs[0].device
            window = torch.hann_window(400, device=device)
            filters = torch.from_numpy(filters64.astype(np.float32)).to(device)
            if peer == "torchaudio":
                try:
                    import torchaudio
                except ImportError as exc:
                    raise Skip("torchaudio is not installed") from exc
                mel = torchaudio.transforms.MelSpectrogram(
                    SR,
                    n_fft=400,
                    hop_length=160,
                    n_mels=80,
                    norm="slaney",
                    mel_scale="slaney",
                    f_max=8000.0,
                    center=True,
                    pad_mode="reflect",
                    power=2.0,
                ).to(device)

                def run(i: int) -> Any:
                    log_spec = torch.clamp(mel(xs[i % copies])[..., :-1], min=1e-10).log10()
                    log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
                    return (log_spec + 4.0) / 4.0

            else:

                def run(i: int) -> Any:
                    return _whisper_torch(torch, xs[i % copies], window, filters)

            def host(out: Any) -> np.ndarray:
                return out.cpu().numpy()

        else:
            ops = _ops()

            def run(i: int) -> Any:
                return ops.log_mel_spectrogram(xs[i % copies], 80)

            def host(out: Any) -> np.ndarray:
                return out.to_numpy()

        def check(out: Any) -> float:
            got = host(out)
            if got.shape != (80, frames):
                raise AssertionError(f"log_mel ({lib.name}): shape {got.shape}")
            which = np.unique(ctx.rng.integers(0, frames, size=CHECK_FRAMES))
            power = np.abs(np.fft.rfft(_frames(hosts[0], 400, 160, which), axis=-1)) ** 2
            log_spec = np.log10(np.maximum(filters64 @ power.T, 1e-10))
            # The clamp needs the whole-array maximum: take it from the output itself.
            top = (got.max() * 4.0 - 4.0) - 8.0
            want = (np.maximum(log_spec, top) + 4.0) / 4.0
            err = float(np.abs(got[:, which] - want).max())
            if not err < 1e-3:
                raise AssertionError(f"log_mel ({lib.name}): max abs error {err:.2e}")
            return err

        return Timed(run=run, check=check)

    setups = {"pygpukit": setup, "torch": setup, "cupy": unavailable("no CuPy STFT")}
    return Case(
        NAME,
        "log_mel" if peer == "torch" else "log_mel_torchaudio",
        params,
        setups,
        bytes_moved=nbytes,
        working_set=nbytes,
        ceiling="copy_bw",
        requires=("from_numpy",),
    )


def cases(ctx: SuiteContext) -> Iterator[Case]:
    """The STFT (Whisper's and a music-style geometry) and log-mel of long audio."""
    sizes = ctx.pick_sizes(gpu=[600], gpu_quick=[30], cpu=[2], cpu_quick=[1])
    for seconds in sizes:
        yield stft_case(ctx, float(seconds), 400, 160)
        yield stft_case(ctx, float(seconds), 1024, 256)
        yield log_mel_case(ctx, float(seconds), "torch")
        yield log_mel_case(ctx, float(seconds), "torchaudio")


SUITE = Suite(NAME, "STFT and Whisper log-mel of long audio vs torch.stft / torchaudio", cases)
