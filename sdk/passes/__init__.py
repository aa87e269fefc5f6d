"""Graph-to-graph passes. Each returns a new graph; none mutates its input."""

from polyhal.passes.decompose import decompose, decompose_node
from polyhal.passes.rebuild import rebuild, replay
from polyhal.passes.specialize import specialize

__all__ = ["decompose", "decompose_node", "rebuild", "replay", "specialize"]
