"""pygpukit.llm: LLM execution on PyGPUkit (SafeTensors, Llama/Qwen family, KV cache, decode).

Distributed as ``pygpukit-llm`` (``pip install "pygpukit[llm]"``). The models arrive
with their own issue; this package fixes the import path and the dependency on
``pygpukit-runtime`` and ``pygpukit-ops`` of the same version.
"""
