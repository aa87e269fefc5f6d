"""Layers with parameters or shape logic: ``Linear``, ``Conv2d``, ``Flatten``.

Weight layouts follow the IR's ops, so a graph reads as its layer:

* ``Linear`` stores its weight ``[in_features, out_features]`` and computes
  ``x @ W + b`` (one ``MatMul`` and one ``Add``; leading axes of ``x`` are
  batch axes). This is the transpose of torch's ``[out, in]``: load torch
  weights with ``.T``.
* ``Conv2d`` is ONNX ``Conv`` on NCHW inputs with the weight
  ``[out_channels, in_channels / groups, kh, kw]`` (torch's layout too).

Weights default to :func:`~polyhal.nn.init.kaiming_uniform` (He, gain
``sqrt(2)``) with the fan-in of the layout (``in_features``;
``in_channels / groups * kh * kw``); biases default to zeros.
"""

from __future__ import annotations

import numpy as np

from polyhal import ops
from polyhal.errors import IRError, VerificationError
from polyhal.ir.builder import Var
from polyhal.ir.dtypes import DType
from polyhal.nn import checks
from polyhal.nn.init import kaiming_uniform, zeros
from polyhal.nn.module import Module
from polyhal.nn.parameter import InitFunction, Parameter


class Linear(Module):
    """``y = x @ W + b`` with ``W: [in_features, out_features]``, ``b: [out_features]``.

    >>> from polyhal import nn
    >>> nn.Linear(4, 2)
    Linear(in_features=4, out_features=2, bias=True, dtype=float32)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 weight_init: InitFunction | None = None,
                 bias_init: InitFunction | None = None,
                 dtype: DType | str = "float32") -> None:
        self.in_features = checks.positive_int(in_features, "in_features", "Linear")
        self.out_features = checks.positive_int(out_features, "out_features", "Linear")
        self.dtype = checks.float_dtype(dtype, "Linear")
        self.use_bias = bool(bias)
        self.weight = Parameter((in_features, out_features), weight_init or kaiming_uniform(),
                                dtype=self.dtype, fans=(in_features, out_features))
        if self.use_bias:
            self.bias = Parameter((out_features,), bias_init or zeros(), dtype=self.dtype,
                                  fans=(in_features, out_features))
        elif bias_init is not None:
            raise IRError("Linear: bias_init is given but bias=False")
        else:
            self.bias = None

    def forward(self, x: Var) -> Var:
        """``x [..., in_features] -> [..., out_features]``."""
        checks.graph_value(x)
        checks.matching_dtype(x, self.dtype)
        if x.type.rank < 1:
            raise VerificationError(f"input {x.type} is a scalar; expected [..., "
                                    f"{self.in_features}]")
        features = x.shape[-1]
        if isinstance(features, int) and features != self.in_features:
            raise VerificationError(f"input {x.type} has {features} features in its last axis, "
                                    f"expected in_features={self.in_features}")
        y = x @ self.weight
        return y + self.bias if self.use_bias else y

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.use_bias}, dtype={self.dtype.value}")


class Conv2d(Module):
    """2-D convolution of NCHW inputs (ONNX ``Conv``), weight ``[out, in/groups, kh, kw]``.

    ``kernel_size``, ``stride`` and ``dilation`` are an int or ``(h, w)``;
    ``padding`` (zeros) is an int, ``(h, w)`` (both sides) or
    ``(top, left, bottom, right)`` (ONNX ``pads`` order).

    >>> from polyhal import nn
    >>> nn.Conv2d(3, 8, 3, padding=1)
    Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1, 1, 1), bias=True, dtype=float32)
    """

    def __init__(self, in_channels: int, out_channels: int,
                 kernel_size: int | tuple[int, int], stride: int | tuple[int, int] = 1,
                 padding: int | tuple[int, ...] = 0, dilation: int | tuple[int, int] = 1,
                 groups: int = 1, bias: bool = True, *,
                 weight_init: InitFunction | None = None,
                 bias_init: InitFunction | None = None,
                 dtype: DType | str = "float32") -> None:
        self.in_channels = checks.positive_int(in_channels, "in_channels", "Conv2d")
        self.out_channels = checks.positive_int(out_channels, "out_channels", "Conv2d")
        self.kernel_size = checks.int_pair(kernel_size, "kernel_size", "Conv2d")
        self.stride = checks.int_pair(stride, "stride", "Conv2d")
        self.dilation = checks.int_pair(dilation, "dilation", "Conv2d")
        self.padding = _pads(padding)
        self.groups = checks.positive_int(groups, "groups", "Conv2d")
        for what, channels in (("in_channels", in_channels), ("out_channels", out_channels)):
            if channels % groups:
                raise IRError(f"Conv2d: {what}={channels} is not divisible by groups={groups}")
        self.dtype = checks.float_dtype(dtype, "Conv2d")
        self.use_bias = bool(bias)
        receptive = self.kernel_size[0] * self.kernel_size[1]
        fans = (in_channels // groups * receptive, out_channels * receptive)
        self.weight = Parameter((out_channels, in_channels // groups, *self.kernel_size),
                                weight_init or kaiming_uniform(), dtype=self.dtype, fans=fans)
        if self.use_bias:
            self.bias = Parameter((out_channels,), bias_init or zeros(), dtype=self.dtype,
                                  fans=fans)
        elif bias_init is not None:
            raise IRError("Conv2d: bias_init is given but bias=False")
        else:
            self.bias = None

    def forward(self, x: Var) -> Var:
        """``x [N, in_channels, H, W] -> [N, out_channels, H', W']``."""
        checks.graph_value(x)
        checks.matching_dtype(x, self.dtype)
        if x.type.rank != 4:
            raise VerificationError(f"input {x.type} has rank {x.type.rank}; expected "
                                    f"[N, C, H, W] with C={self.in_channels}")
        channels = x.shape[1]
        if isinstance(channels, int) and channels != self.in_channels:
            raise VerificationError(f"input {x.type} has {channels} channels (axis 1), expected "
                                    f"in_channels={self.in_channels}")
        for axis, size in enumerate(x.shape[2:]):
            span = self.dilation[axis] * (self.kernel_size[axis] - 1) + 1
            padded = (size + self.padding[axis] + self.padding[axis + 2]
                      if isinstance(size, int) else None)
            if padded is not None and span > padded:
                raise VerificationError(
                    f"kernel spans {span} along {'HW'[axis]} (kernel_size {self.kernel_size}, "
                    f"dilation {self.dilation}) but the padded input {x.type} has only {padded}")
        inputs = (x, self.weight, self.bias) if self.use_bias else (x, self.weight)
        return ops.conv(*inputs, kernel_shape=list(self.kernel_size), strides=list(self.stride),
                        pads=list(self.padding), dilations=list(self.dilation),
                        group=self.groups)

    def extra_repr(self) -> str:
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}")
        if self.dilation != (1, 1):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        return text + f", bias={self.use_bias}, dtype={self.dtype.value}"


class Flatten(Module):
    """Merge the axes from ``start_axis`` to the last into one (leading axes stay).

    ``[N, C, H, W] -> [N, C*H*W]`` with the default ``start_axis=1``; a
    negative ``start_axis`` counts from the end. Emits one ``Reshape``.
    """

    def __init__(self, start_axis: int = 1) -> None:
        if isinstance(start_axis, bool) or not isinstance(start_axis, int):
            raise IRError(f"Flatten: start_axis must be an int, got {start_axis!r}")
        self.start_axis = start_axis

    def forward(self, x: Var) -> Var:
        """``x [d0, .., d(k-1), dk, ..] -> [d0, .., d(k-1), dk * ..]``."""
        checks.graph_value(x)
        start = checks.axis_in_range(x, self.start_axis, "start_axis")
        # Reshape's 0 copies an input dimension, so symbolic leading axes stay symbolic.
        return ops.reshape(x, np.array([0] * start + [-1], dtype=np.int64))

    def extra_repr(self) -> str:
        return f"start_axis={self.start_axis}"


def _pads(padding: int | tuple[int, ...]) -> tuple[int, int, int, int]:
    items = padding if isinstance(padding, tuple | list) else (padding,)
    if len(items) not in (1, 2, 4):
        raise IRError(f"Conv2d: padding must be an int, (h, w) or (top, left, bottom, right), "
                      f"got {padding!r}")
    values = [checks.positive_int(v, "padding", "Conv2d", minimum=0) for v in items]
    if len(values) == 1:
        values *= 4
    elif len(values) == 2:
        values *= 2
    return values[0], values[1], values[2], values[3]
