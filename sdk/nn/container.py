"""``Sequential``: modules applied one after another."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, overload

from polyhal.errors import IRError
from polyhal.nn.module import Module


class Sequential(Module):
    """Applies its modules in order; they are named ``"0"``, ``"1"``, ...

    >>> from polyhal import nn
    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU()).append(nn.Linear(8, 2))
    >>> len(model), list(model.named_parameters())
    (3, ['0.weight', '0.bias', '2.weight', '2.bias'])

    Indexing gives a module (``model[-1]``) or, with a slice, a new
    ``Sequential`` of the same (shared) modules.
    """

    def __init__(self, *modules: Module) -> None:
        for module in modules:
            self.append(module)

    def append(self, module: Module) -> Sequential:
        """Add ``module`` at the end; returns ``self``."""
        if not isinstance(module, Module):
            raise IRError(f"Sequential: item {len(self)} must be a Module, got "
                          f"{type(module).__name__}")
        setattr(self, str(len(self)), module)
        return self

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._members.values()))  # type: ignore[arg-type]

    @overload
    def __getitem__(self, index: int) -> Module: ...

    @overload
    def __getitem__(self, index: slice) -> Sequential: ...

    def __getitem__(self, index: int | slice) -> Module | Sequential:
        modules = list(self)
        if isinstance(index, slice):
            return Sequential(*modules[index])
        if isinstance(index, bool) or not isinstance(index, int):
            raise IRError(f"Sequential: index must be an int or a slice, got {index!r}")
        if not -len(modules) <= index < len(modules):
            raise IRError(f"Sequential: index {index} is out of range for {len(modules)} "
                          "module(s)")
        return modules[index]

    def forward(self, x: Any) -> Any:
        """Each module's output is the next one's input."""
        for module in self:
            x = module(x)
        return x
