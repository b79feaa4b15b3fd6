"""The built-in suites, one module each; every module defines ``SUITE``.

``memory`` (allocation, transfers), ``launch`` (host overhead), ``elementwise``,
``reduction``, ``gemm`` and ``jit`` (compile and cache load). The registry
imports them by name (:data:`pygpukit.benchmark.registry.BUILTIN`).
"""
