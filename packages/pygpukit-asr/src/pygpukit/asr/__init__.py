"""pygpukit.asr: speech recognition (Whisper) on PyGPUkit.

Distributed as ``pygpukit-asr`` (``pip install "pygpukit[asr]"``); the model arrives
with its own issue.
"""
