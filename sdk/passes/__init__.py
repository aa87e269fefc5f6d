"""Graph-to-graph passes. None mutates its input; a pass with nothing to change may
return its input itself (graphs are immutable)."""

from polyhal.passes.autocast import FLOAT32_OPS, LOW_PRECISION_OPS, autocast
from polyhal.passes.cleanup import (
    eliminate_common_subexpressions,
    eliminate_dead_code,
    fold_constants,
    simplify,
)
from polyhal.passes.decompose import decompose, decompose_node
from polyhal.passes.fusion import FUSION_RULES
from polyhal.passes.quantize import quantize
from polyhal.passes.rebuild import rebuild, replay
from polyhal.passes.rewrite import Computed, Match, P, R, Rule, V, apply_rules, find_match
from polyhal.passes.sparsity import (
    Sparse24,
    compress_2_4,
    decompress_2_4,
    is_2_4_sparse,
    prune_2_4,
    prune_2_4_array,
)
from polyhal.passes.specialize import specialize, specialize_to

__all__ = [
    "FLOAT32_OPS",
    "FUSION_RULES",
    "LOW_PRECISION_OPS",
    "Computed",
    "Match",
    "P",
    "R",
    "Rule",
    "Sparse24",
    "V",
    "apply_rules",
    "autocast",
    "compress_2_4",
    "decompose",
    "decompose_node",
    "decompress_2_4",
    "eliminate_common_subexpressions",
    "eliminate_dead_code",
    "find_match",
    "fold_constants",
    "is_2_4_sparse",
    "prune_2_4",
    "prune_2_4_array",
    "quantize",
    "rebuild",
    "replay",
    "simplify",
    "specialize",
    "specialize_to",
]
