"""NumPy versions of the ops: what the CPU backend runs, and the reference the GPU is held to.

One module per op family, NumPy arrays in and out, no GPUArray and no backend in sight: the
op modules choose this path once per process (:func:`pygpukit.ops._plan.per_backend`) and move
the values in and out of the CPU backend's arrays. Math is float32 or wider, rounded once.
"""
