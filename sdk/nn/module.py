"""``Module``: the base class of every layer and model.

A module is a Python object whose attributes hold its parameters
(:class:`~polyhal.nn.Parameter`) and submodules; assigning one registers it,
in order, under the attribute's name. Its :meth:`Module.forward` builds graph
nodes from graph values (:class:`polyhal.ir.Var`) with ``polyhal.ops``: any
domain's ops, not only ``core``.

**Parameters inside forward.** While a model is being built (``model.graph``,
``with model.bind(builder):``) reading a parameter attribute gives its graph
value, so ``x @ self.weight + self.bias`` adds nodes that take the parameter as
a graph input (``params="inputs"``) or as a constant (``params="constants"``).
Outside a build the same attribute is the :class:`Parameter` (read ``.data``
for its value). A ``Parameter`` used as an array raises, so it can never be
baked into a graph as a constant by accident. One design, no ``use()`` call.

**Names** are dotted paths in registration order (``"0.weight"``,
``"encoder.1.bias"``). A module or parameter reachable under several names (a
module used twice) is one object: it is listed once, under its first name,
and both uses share its values.

**Initialization.** :meth:`Module.initialize` draws every parameter, in named
order, from ``numpy.random.default_rng(seed)``. A parameter that was never
drawn nor loaded is drawn on first use of the model (``graph``, ``bind``,
``feeds``, ``predict``, ``state_dict``, ``named_parameters``, ``parameters``)
as ``initialize(0)`` would draw it: a model never initialized behaves as if
initialized with seed 0.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np

from polyhal.errors import InputBindingError, IRError, PolyhalError
from polyhal.ir.builder import GraphBuilder, Var
from polyhal.ir.graph import Graph
from polyhal.ir.types import TensorType
from polyhal.nn.build import Build, ParamsMode, activate, active_builds, check_params_mode, resolve
from polyhal.nn.parameter import Parameter

_LOCATED = "_polyhal_nn_located"


class LoadResult(NamedTuple):
    """What ``load_state_dict(strict=False)`` left alone."""

    missing: list[str]
    unexpected: list[str]


# Bumped by every attribute assignment on any module, so that the graphs
# ``predict`` caches are rebuilt when a model's structure may have changed.
_structure = [0]


def structure_version() -> int:
    """A counter that changes whenever an attribute of any module changes."""
    return _structure[0]


def _touch() -> None:
    _structure[0] += 1


class Module:
    """Base class of layers and models: subclass it and define ``forward``.

    >>> from polyhal import nn, ops
    >>> from polyhal.ir import f32
    >>> class Affine(nn.Module):
    ...     def __init__(self, features: int) -> None:
    ...         self.scale = nn.Parameter((features,), nn.init.ones())
    ...         self.shift = nn.Parameter((features,), nn.init.zeros())
    ...     def forward(self, x):
    ...         return x * self.scale + self.shift
    >>> model = Affine(3)
    >>> list(model.named_parameters())
    ['scale', 'shift']
    >>> [v.name for v in model.graph(f32["batch", 3]).inputs]
    ['x', 'scale', 'shift']

    Calling ``super().__init__()`` is optional.
    """

    _members: dict[str, Parameter | Module]

    def __new__(cls, *args: Any, **kwargs: Any) -> Module:
        self = super().__new__(cls)
        object.__setattr__(self, "_members", {})
        object.__setattr__(self, "_predict_cache", {})
        return self

    def __init__(self) -> None:
        """Nothing to do: registration needs no set-up."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_predict_cache"] = {}  # compiled graphs hold devices: rebuilt on demand
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    # ------------------------------------------------------------------ registration

    def __setattr__(self, name: str, value: Any) -> None:
        members = self._members
        if isinstance(value, Parameter | Module):
            if "." in name:
                raise IRError(f"{type(self).__name__}: member name {name!r} must not contain "
                              "'.' (dots separate the levels of dotted names)")
            if value is self:
                raise IRError(f"{type(self).__name__}: a module cannot contain itself "
                              f"(attribute {name!r})")
            if isinstance(value, Parameter) and value.name is None:
                value.name = name
            self.__dict__.pop(name, None)
            members[name] = value
        elif name in members:
            if value is not None:
                kind = "parameter" if isinstance(members[name], Parameter) else "submodule"
                raise IRError(f"{type(self).__name__}: {name!r} is a registered {kind}; assign "
                              f"a {'Parameter' if kind == 'parameter' else 'Module'} or None "
                              f"(to set a parameter's value use .{name}.data = array)")
            del members[name]
            object.__setattr__(self, name, None)
        else:
            object.__setattr__(self, name, value)
        _touch()

    def __delattr__(self, name: str) -> None:
        if name in self._members:
            del self._members[name]
        else:
            object.__delattr__(self, name)
        _touch()

    def __getattr__(self, name: str) -> Any:
        members = self.__dict__.get("_members", {})
        if name in members:
            member = members[name]
            return resolve(member, self) if isinstance(member, Parameter) else member
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ forward

    def forward(self, *inputs: Var) -> Var | tuple[Var, ...]:
        """Build this module's nodes from its inputs; subclasses define it."""
        raise IRError(f"{type(self).__name__} does not define forward(self, x)")

    def __call__(self, *inputs: Any) -> Any:
        """Run ``forward`` inside a build; errors get this module's dotted name."""
        builds = active_builds()
        if not builds:
            raise IRError(f"{type(self).__name__} was called outside a build: modules run while "
                          "a graph is built (model.graph(...), `with model.bind(builder):`); "
                          "to run on arrays use model.predict(...)")
        for value in inputs:
            if isinstance(value, Var) and all(b.builder is not value.builder for b in builds):
                raise IRError(f"{type(self).__name__}: input {value.name!r} belongs to a graph "
                              "builder no model is bound to; use `with model.bind(builder):`")
        try:
            return self.forward(*inputs)
        except PolyhalError as error:
            if getattr(error, _LOCATED, False):
                raise
            located = _with_context(error, self._describe(builds))
            if located is error:
                raise
            raise located from error

    def _describe(self, builds: Sequence[Build]) -> str:
        for build in reversed(builds):
            name = build.module_name(self)
            if name is not None:
                return f"layer {name!r} ({type(self).__name__})" if name else type(self).__name__
        return f"unregistered {type(self).__name__}"

    # ------------------------------------------------------------------ listing

    def _walk(self) -> tuple[dict[str, Parameter], dict[str, Module]]:
        """Parameters and modules by dotted name, depth first in registration order; an
        object reachable under several names is listed under its first."""
        parameters: dict[str, Parameter] = {}
        modules: dict[str, Module] = {"": self}
        seen = {id(self)}

        def visit(module: Module, prefix: str) -> None:
            for name, member in module._members.items():
                if id(member) in seen:
                    continue
                seen.add(id(member))
                if isinstance(member, Parameter):
                    parameters[prefix + name] = member
                else:
                    modules[prefix + name] = member
                    visit(member, prefix + name + ".")

        visit(self, "")
        return parameters, modules

    def _named_parameters(self) -> dict[str, Parameter]:
        return self._walk()[0]

    def named_modules(self) -> dict[str, Module]:
        """Every module by dotted name, this one as ``""``, each listed once."""
        return self._walk()[1]

    def named_parameters(self) -> dict[str, Parameter]:
        """Every parameter by dotted name, in registration order (drawing missing values)."""
        self._ensure_initialized()
        return self._named_parameters()

    def parameters(self) -> list[Parameter]:
        """Every parameter, in named order."""
        return list(self.named_parameters().values())

    def trainable_names(self, prefix: str = "") -> list[str]:
        """Dotted names of the trainable parameters (``prefix`` prepended): the ``wrt`` of
        ``polyhal.autodiff.grad`` on a graph with ``params="inputs"``."""
        return [prefix + n for n, p in self._named_parameters().items() if p.trainable]

    def num_parameters(self, trainable_only: bool = False) -> int:
        """The number of parameter elements (shared parameters counted once)."""
        return sum(p.size for p in self._named_parameters().values()
                   if p.trainable or not trainable_only)

    def freeze(self, *names: str) -> Module:
        """Mark parameters not trainable: all, or those named (a parameter's dotted name,
        or a submodule's, meaning all of its parameters). Returns ``self``."""
        for parameter in self._select(names, "freeze"):
            parameter.trainable = False
        return self

    def unfreeze(self, *names: str) -> Module:
        """Mark parameters trainable again (the same names as :meth:`freeze`)."""
        for parameter in self._select(names, "unfreeze"):
            parameter.trainable = True
        return self

    def _select(self, names: Sequence[str], what: str) -> list[Parameter]:
        parameters = self._named_parameters()
        if not names:
            return list(parameters.values())
        modules = self.named_modules()
        chosen: list[Parameter] = []
        unknown = []
        for name in names:
            if name in parameters:
                chosen.append(parameters[name])
            elif name in modules and name:
                chosen += [p for n, p in parameters.items() if n.startswith(name + ".")]
            else:
                unknown.append(name)
        if unknown:
            raise IRError(f"{type(self).__name__}.{what}: no parameter or submodule named "
                          f"{', '.join(map(repr, unknown))} (parameters: "
                          f"{', '.join(parameters) or 'none'})")
        return chosen

    # ------------------------------------------------------------------ values

    def initialize(self, seed: int = 0) -> Module:
        """Draw every parameter, in named order, from ``numpy.random.default_rng(seed)``;
        returns ``self``."""
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
            raise IRError(f"{type(self).__name__}.initialize: seed must be an int >= 0, "
                          f"got {seed!r}")
        rng = np.random.default_rng(int(seed))
        for parameter in self._named_parameters().values():
            parameter.initialize(rng)
        return self

    def _ensure_initialized(self) -> None:
        """Draw the parameters that have no value, as ``initialize(0)`` would draw them."""
        parameters = list(self._named_parameters().values())
        if all(p.is_initialized for p in parameters):
            return
        rng = np.random.default_rng(0)
        for parameter in parameters:
            if parameter.is_initialized:
                # Advance the stream past it, so later ones get initialize(0)'s values.
                parameter.init(parameter, rng)
            else:
                parameter.initialize(rng)

    def state_dict(self) -> dict[str, np.ndarray]:
        """A copy of every parameter's value, by dotted name."""
        return {name: p.data.copy() for name, p in self.named_parameters().items()}

    def load_state_dict(self, state: Mapping[str, Any], strict: bool = True) -> LoadResult:
        """Set parameter values from ``state`` (as :meth:`state_dict` makes).

        Every value must be a numpy array of exactly the parameter's shape and
        dtype. With ``strict`` an unknown or a missing name is an error too;
        otherwise they are returned. Nothing is changed unless everything fits:
        an :class:`~polyhal.errors.InputBindingError` lists every problem.
        """
        if not isinstance(state, Mapping):
            raise InputBindingError(f"{type(self).__name__}.load_state_dict: expected a mapping "
                                    f"of parameter name to array, got {type(state).__name__}")
        parameters = self._named_parameters()
        unexpected = [str(k) for k in state if k not in parameters]
        missing = [n for n in parameters if n not in state]
        problems = []
        if strict and unexpected:
            problems.append(f"unknown parameter(s) {', '.join(map(repr, unexpected))}")
        if strict and missing:
            problems.append(f"missing parameter(s) {', '.join(map(repr, missing))}")
        for name, parameter in parameters.items():
            if name in state:
                problem = parameter._mismatch(state[name])
                if problem:
                    problems.append(f"{name!r}: {problem}")
        if problems:
            raise InputBindingError(f"{type(self).__name__}.load_state_dict: "
                                    + "; ".join(problems) + " (nothing was loaded)")
        for name, parameter in parameters.items():
            if name in state:
                parameter.data = state[name]
        return LoadResult(missing, unexpected)

    # ------------------------------------------------------------------ graphs

    @contextmanager
    def bind(self, builder: GraphBuilder, params: ParamsMode = "inputs",
             prefix: str = "") -> Iterator[Build]:
        """Bind this model's parameters to ``builder`` inside the ``with`` block, so that
        calling the model on the builder's values adds its nodes there.

        With ``params="inputs"`` each parameter becomes a graph input named
        ``prefix + dotted name`` (declared now, after the inputs already
        declared); with ``"constants"`` a constant, when first used. Yields a
        mapping of dotted name to graph value (for a weight-decay term, say).
        """
        mode = check_params_mode(params, f"{type(self).__name__}.bind")
        if not isinstance(builder, GraphBuilder):
            raise IRError(f"{type(self).__name__}.bind: expected a GraphBuilder, got "
                          f"{type(builder).__name__}")
        self._ensure_initialized()
        with activate(Build(self, builder, mode, prefix)) as build:
            yield build

    def graph(self, *input_types: TensorType | Sequence[int | str], name: str = "model",
              params: ParamsMode = "inputs", input_names: Sequence[str] | None = None,
              output_names: Sequence[str] | None = None) -> Graph:
        """The forward graph for inputs of ``input_types`` (a ``TensorType`` such as
        ``f32["batch", 4]``, or a shape tuple, meaning float32).

        Inputs: the model's (``x``, or ``x0, x1, ...``), then with
        ``params="inputs"`` every parameter by dotted name; with
        ``"constants"`` the parameters' current values are baked in. Outputs:
        ``y``, or ``y0, y1, ...`` when ``forward`` returns a tuple.
        """
        from polyhal.nn.graph import model_graph

        return model_graph(self, input_types, name, params, input_names, output_names)

    def feeds(self, *, prefix: str = "", **inputs: Any) -> dict[str, np.ndarray]:
        """``inputs`` plus every parameter's value (read-only) keyed by its graph input
        name, for a graph with ``params="inputs"``:
        ``polyhal.run(graph, **model.feeds(x=batch))``."""
        self._ensure_initialized()
        result = dict(inputs)
        for name, parameter in self._named_parameters().items():
            if prefix + name in result:
                raise InputBindingError(f"{type(self).__name__}.feeds: input {prefix + name!r} "
                                        "is also a parameter name")
            view = parameter.data.view()
            view.flags.writeable = False
            result[prefix + name] = view
        return result

    def predict(self, *inputs: Any, device: str = "reference",
                params: ParamsMode = "inputs") -> Any:
        """Run the model on arrays: compile its graph for these input types on ``device``
        (falling back to the reference executor node by node), cached, and run it.
        Returns an array, or a tuple when ``forward`` returns one. See
        :func:`polyhal.nn.predict.predict`."""
        from polyhal.nn.predict import predict

        return predict(self, inputs, device, params)

    # ------------------------------------------------------------------ printing

    def extra_repr(self) -> str:
        """The text inside this module's parentheses in ``repr`` (its settings)."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        lines = []
        for name, member in self._members.items():
            if isinstance(member, Module):
                lines.append(f"({name}): " + repr(member).replace("\n", "\n  "))
            elif not extra:  # a layer with settings describes itself; others list parameters
                lines.append(f"({name}): {member!r}")
        head = f"{type(self).__name__}({extra}"
        return head + ")" if not lines else head + "\n  " + "\n  ".join(lines) + "\n)"


def _with_context(error: PolyhalError, where: str) -> PolyhalError:
    """``error`` again with ``where`` in front of its message, marked as located."""
    try:
        located = type(error)(f"{where}: {error}")
    except TypeError:
        return error
    setattr(located, _LOCATED, True)
    return located
