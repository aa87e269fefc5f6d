"""``Module.predict``: run a model on arrays through ``polyhal.compile``."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from polyhal.errors import InputBindingError
from polyhal.ir.builder import Var
from polyhal.ir.types import TensorType
from polyhal.nn.build import ParamsMode, check_params_mode

if TYPE_CHECKING:
    from polyhal.nn.module import Module

CACHE_SIZE = 8  # compiled graphs kept per model; the oldest is dropped first


def predict(model: Module, inputs: Sequence[Any], device: str, params: ParamsMode) -> Any:
    """Run ``model`` on ``inputs`` (arrays) on ``device``.

    The graph is built for the inputs' exact types and compiled with
    ``polyhal.compile(graph, device=device, fallback="reference")`` (no fallback
    when ``device`` is ``"reference"``). Compiled graphs are cached per device,
    ``params`` mode and input types, and rebuilt when an attribute of any module
    changes. With ``params="inputs"`` (the default) the current parameter values
    are fed on every call; with ``"constants"`` they are baked in, for devices
    that need constant parameters, and the cache key includes a digest of the
    values, so a changed value never runs stale.
    """
    from polyhal.nn.module import structure_version
    from polyhal.runtime import compile

    where = f"{type(model).__name__}.predict"
    mode = check_params_mode(params, where)
    arrays = []
    for index, value in enumerate(inputs):
        if isinstance(value, Var):
            raise InputBindingError(f"{where}: input {index} is a graph value; predict runs on "
                                    "arrays (inside a build, call the model instead)")
        arrays.append(np.asarray(value))
    types = tuple(TensorType.of(a, f"{where}: input {i}") for i, a in enumerate(arrays))
    model._ensure_initialized()
    key: tuple[Any, ...] = (device, mode, types, structure_version())
    if mode == "constants":
        key += (_digest(model),)
    cache: dict[tuple[Any, ...], Any] = model._predict_cache
    if key not in cache:
        graph = model.graph(*types, name=f"{type(model).__name__}_predict", params=mode)
        fallback = None if device == "reference" else "reference"
        cache[key] = compile(graph, device=device, fallback=fallback)
        while len(cache) > CACHE_SIZE:
            del cache[next(iter(cache))]
    compiled = cache[key]
    names = [v.name for v in compiled.source.inputs][:len(arrays)]
    feeds = dict(zip(names, arrays, strict=True))
    if mode == "inputs":
        feeds = model.feeds(**feeds)
    outputs = compiled(**feeds)
    values = [outputs[v.name] for v in compiled.source.outputs]
    return values[0] if [v.name for v in compiled.source.outputs] == ["y"] else tuple(values)


def _digest(model: Module) -> str:
    """A hash of every parameter's name, type and bytes."""
    digest = hashlib.blake2b(digest_size=16)
    for name, parameter in model._named_parameters().items():
        digest.update(f"{name}:{parameter.type};".encode())
        digest.update(np.ascontiguousarray(parameter.data).tobytes())
    return digest.hexdigest()
