"""polyhal-npu-example: an out-of-tree adapter for a simulated AI accelerator.

The device is a matrix unit with int8, float16 and float32 datapaths, a
2:4 structured-sparse mode that skips half the multiply-accumulates, and a
vector unit for elementwise work. Numpy computes the results; a cycle model
(:mod:`polyhal_npu.cost`) says what the hardware would have spent, reported
through ``Executable.profile()``.
"""

from polyhal_npu.adapter import NpuAdapter, NpuDevice, NpuExecutable
from polyhal_npu.cost import NpuConfig

__all__ = ["NpuAdapter", "NpuConfig", "NpuDevice", "NpuExecutable"]
