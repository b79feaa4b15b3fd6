"""pygpukit.tts: Kokoro-82M text-to-speech.

Distributed as ``pygpukit-tts`` (``pip install "pygpukit[tts]"``)::

    from pygpukit import tts

    model = tts.load("kokoro-v1.0.int8.onnx", voices="voices-v1.0.bin")
    audio = model.synthesize(phonemes="həlˈoʊ wˈɜːld", voice="af_heart")
    audio.save("hello.wav")

See ``docs/tts.md``.
"""

from __future__ import annotations

from .audio import FRAME_SAMPLES, Audio
from .config import SAMPLE_RATE, KokoroConfig, default_vocab
from .errors import G2PUnavailableError, ModelFileError, PhonemeError, TTSError, VoiceError
from .model import KokoroModel, load
from .text import chunk_phonemes, text_to_phonemes

__all__ = [
    "FRAME_SAMPLES",
    "SAMPLE_RATE",
    "Audio",
    "G2PUnavailableError",
    "KokoroConfig",
    "KokoroModel",
    "ModelFileError",
    "PhonemeError",
    "TTSError",
    "VoiceError",
    "chunk_phonemes",
    "default_vocab",
    "load",
    "text_to_phonemes",
]
