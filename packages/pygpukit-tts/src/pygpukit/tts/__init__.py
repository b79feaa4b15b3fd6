"""pygpukit.tts: text-to-speech (Kokoro) on PyGPUkit.

Distributed as ``pygpukit-tts`` (``pip install "pygpukit[tts]"``); the model arrives
with its own issue.
"""
