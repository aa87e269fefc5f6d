"""The build context: which graph values stand for a model's parameters.

``model.bind(builder)`` (and ``model.graph``, which uses it) makes a
:class:`Build` current for the duration of a ``with`` block. While one is
current, reading a parameter attribute of a module of that model
(``self.weight``) gives the parameter's graph value instead of the
:class:`~polyhal.nn.Parameter`. Builds nest (a stack per thread and task, in a
``ContextVar``), so two models can be bound to one builder at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Literal

from polyhal.errors import IRError
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.nn.parameter import Parameter

if TYPE_CHECKING:
    from polyhal.nn.module import Module

ParamsMode = Literal["inputs", "constants"]
PARAMS_MODES = ("inputs", "constants")

_ACTIVE: ContextVar[tuple[Build, ...]] = ContextVar("polyhal_nn_builds", default=())


def check_params_mode(params: object, where: str) -> ParamsMode:
    """``params`` if it is ``"inputs"`` or ``"constants"``; an :class:`IRError` otherwise."""
    if params not in PARAMS_MODES:
        raise IRError(f"{where}: params={params!r} is not one of 'inputs' (parameters are graph "
                      "inputs, for training) or 'constants' (baked in, for deployment)")
    return params  # type: ignore[return-value]


class Build(Mapping[str, Var]):
    """One model bound to one graph builder: parameter name -> graph value.

    With ``params="inputs"`` every parameter is declared as a graph input named
    ``prefix + dotted name`` when the build starts (frozen ones too, in named
    order); with ``"constants"`` a parameter becomes a constant of that name
    the first time it is used, holding a copy of its current value.
    """

    def __init__(self, model: Module, builder: GraphBuilder, params: ParamsMode,
                 prefix: str) -> None:
        self.model = model
        self.builder = builder
        self.params = params
        self.prefix = prefix
        self._parameters, modules = model._walk()
        self._names = {id(p): name for name, p in self._parameters.items()}
        self._modules = {id(m): name for name, m in modules.items()}
        self._vars: dict[int, Var] = {}
        if params == "inputs":
            for name, parameter in self._parameters.items():
                self._vars[id(parameter)] = builder.input(prefix + name, parameter.type)

    def var(self, parameter: Parameter) -> Var | None:
        """The graph value of ``parameter``, or ``None`` if it is not in this model."""
        key = id(parameter)
        if key not in self._names:
            return None
        if key not in self._vars:
            self._vars[key] = self.builder.constant(parameter.data,
                                                    name=self.prefix + self._names[key])
        return self._vars[key]

    def module_name(self, module: Module) -> str | None:
        """The dotted name of ``module`` in this model (``""`` for the model itself)."""
        name = self._modules.get(id(module))
        return None if name is None else self.prefix + name if name else self.prefix.rstrip(".")

    def __getitem__(self, name: str) -> Var:
        if name not in self._parameters:
            raise KeyError(name)
        var = self.var(self._parameters[name])
        assert var is not None
        return var

    def __iter__(self) -> Iterator[str]:
        return iter(self._parameters)

    def __len__(self) -> int:
        return len(self._parameters)


def active_builds() -> tuple[Build, ...]:
    """The current builds, innermost last."""
    return _ACTIVE.get()


@contextmanager
def activate(build: Build) -> Iterator[Build]:
    """Make ``build`` current inside the ``with`` block."""
    token = _ACTIVE.set((*_ACTIVE.get(), build))
    try:
        yield build
    finally:
        _ACTIVE.reset(token)


def resolve(parameter: Parameter, owner: Module) -> Var | Parameter:
    """What ``owner.<name>`` gives for a registered parameter: its graph value while a
    build is current, the :class:`Parameter` otherwise."""
    builds = _ACTIVE.get()
    if not builds:
        return parameter
    for build in reversed(builds):
        var = build.var(parameter)
        if var is not None:
            return var
    raise IRError(f"parameter {parameter.name!r} of {type(owner).__name__} is used while "
                  "building, but it does not belong to the model being built: register its "
                  "module as an attribute of the model (or bind that model too)")
