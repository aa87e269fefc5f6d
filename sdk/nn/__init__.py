"""Building models: modules, layers, parameters and initializers.

A model is a tree of :class:`Module` objects holding :class:`Parameter` s; its
``forward`` writes graph nodes, so a model becomes an IR graph
(:meth:`Module.graph`) for training (parameters as inputs, differentiated with
``polyhal.autodiff.grad``) or deployment (parameters as constants), and runs
on any device (:meth:`Module.predict`)::

    from polyhal import nn
    from polyhal.ir import f32

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    graph = model.graph(f32["batch", 4])          # inputs x, 0.weight, 0.bias, ...

See ``docs/nn.md``.
"""

from polyhal.nn import init
from polyhal.nn.activations import (
    GELU,
    Identity,
    LeakyReLU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
)
from polyhal.nn.build import Build
from polyhal.nn.container import Sequential
from polyhal.nn.layers import Conv2d, Flatten, Linear
from polyhal.nn.module import LoadResult, Module
from polyhal.nn.parameter import Parameter
from polyhal.nn.quantum import QuantumLayer

__all__ = [
    "GELU", "Build", "Conv2d", "Flatten", "Identity", "LeakyReLU", "Linear", "LoadResult",
    "LogSoftmax", "Module", "Parameter", "QuantumLayer", "ReLU", "Sequential", "Sigmoid",
    "Softmax", "Tanh",
    "init",
]
