"""The GPU's kernels, written once for a real device and numba's CUDA simulator.

- :mod:`.elementwise`: fusion groups compiled to generated kernels, and casts;
- :mod:`.gemm`: the tiled shared-memory GEMM (MatMul, Gemm, Conv's GEMM);
- :mod:`.rows`: reductions, Softmax/LogSoftmax and LayerNormalization, a row per thread;
- :mod:`.movement`: index-map gathers and scatters, Gather, MaxPool.

Kernels are built per storage (:mod:`..storage`) and cached; every launch
goes to the device's stream.
"""
