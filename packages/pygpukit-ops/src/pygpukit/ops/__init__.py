"""pygpukit.ops: transformer and signal ops on GPUArrays.

Distributed as ``pygpukit-ops``; its CUDA kernels live in ``kernels/*.cu`` and ship
as per-SM cubins in ``_kernels/``, compiled at wheel build like the runtime's.
The ops themselves arrive with their own issue.
"""
