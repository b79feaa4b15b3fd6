"""PyGPUkit: a small, fast GPU runtime for Python."""

# Lets pygpukit.ops / .llm / .asr / .tts from their own distributions share this
# package when they live in other folders (development checkouts).
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

__version__ = "0.1.0"
