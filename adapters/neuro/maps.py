"""The linear snn ops as explicit synapse lists.

Every linear op of the snn domain (``Linear``, ``Affine``, ``Scale``,
``Conv1d``/``Conv2d``, ``SumPool2d``, ``Flatten``, ``Delay``) maps the flat
elements of one batch item to flat output elements. A :class:`SynapseMap`
writes that map as entries ``(pre, post, weight, lag)``, each meaning
``y[t, post] += weight * x[t - lag, pre]``. A chain of linear ops composes
into one map, which the network realizes as brian2 Synapses from the chain's
source population to its target: explicit ``i``/``j`` index arrays, weights,
and whole-step delays.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from polyhal.errors import UnsupportedError

MAX_COMPOSED_ENTRIES = 50_000_000
"""Largest intermediate a composition of two maps may expand to (entries)."""


def _int(array: np.ndarray | Sequence[int]) -> np.ndarray:
    return np.asarray(array, np.int64)


@dataclass(frozen=True, eq=False)
class SynapseMap:
    """``y[t, post] += weight * x[t - lag, pre]`` for every entry.

    >>> m = SynapseMap.dense(np.array([[1.0, 2.0]]))
    >>> m.pre.tolist(), m.post.tolist(), m.weight.tolist()
    ([0, 1], [0, 0], [1.0, 2.0])
    """

    n_pre: int
    n_post: int
    pre: np.ndarray
    post: np.ndarray
    weight: np.ndarray
    lag: np.ndarray

    @classmethod
    def of(cls, n_pre: int, n_post: int, pre: np.ndarray, post: np.ndarray,
           weight: np.ndarray, lag: np.ndarray | int = 0) -> SynapseMap:
        """A map from entry arrays (``lag`` may be a scalar)."""
        pre, post = _int(pre).ravel(), _int(post).ravel()
        weight = np.asarray(weight, np.float64).ravel()
        lag = np.broadcast_to(_int(lag), pre.shape).copy()
        return cls(n_pre, n_post, pre, post, weight, lag)

    @classmethod
    def identity(cls, n: int) -> SynapseMap:
        """Each element to itself, weight 1, no lag."""
        index = np.arange(n, dtype=np.int64)
        return cls.of(n, n, index, index, np.ones(n))

    @classmethod
    def empty(cls, n_pre: int, n_post: int) -> SynapseMap:
        """No entries."""
        return cls.of(n_pre, n_post, [], [], [])

    @classmethod
    def diagonal(cls, weight: np.ndarray, lag: np.ndarray | int = 0) -> SynapseMap:
        """Element ``k`` to itself with ``weight[k]`` and ``lag[k]``."""
        index = np.arange(weight.size, dtype=np.int64)
        return cls.of(weight.size, weight.size, index, index, weight, lag)

    @classmethod
    def dense(cls, weight: np.ndarray) -> SynapseMap:
        """``y = W x`` for ``W`` of shape ``[out, in]``, every entry kept."""
        n_out, n_in = weight.shape
        post, pre = np.divmod(np.arange(n_out * n_in, dtype=np.int64), n_in)
        return cls.of(n_in, n_out, pre, post, weight)

    def __len__(self) -> int:
        return int(self.pre.size)

    @property
    def is_identity(self) -> bool:
        """True when the map copies every element to itself unchanged."""
        n = self.n_post
        return (self.n_pre == n and len(self) == n and not self.lag.any()
                and bool(np.all(self.weight == 1)) and np.array_equal(self.pre, self.post)
                and np.array_equal(np.sort(self.post), np.arange(n)))

    def plus(self, other: SynapseMap) -> SynapseMap:
        """Both maps' entries (same sizes): the sum of the two maps."""
        return SynapseMap(self.n_pre, self.n_post, np.concatenate([self.pre, other.pre]),
                          np.concatenate([self.post, other.post]),
                          np.concatenate([self.weight, other.weight]),
                          np.concatenate([self.lag, other.lag]))

    def select(self, keep: np.ndarray) -> SynapseMap:
        """Only the entries where ``keep`` is true."""
        return SynapseMap(self.n_pre, self.n_post, self.pre[keep], self.post[keep],
                          self.weight[keep], self.lag[keep])

    def then(self, other: SynapseMap) -> SynapseMap:
        """This map followed by ``other``: weights multiply, lags add."""
        if self.is_identity:
            return other
        if other.is_identity:
            return self
        counts = np.bincount(other.pre, minlength=other.n_pre)
        order = np.argsort(other.pre, kind="stable")
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        repeat = counts[self.post]
        total = int(repeat.sum())
        if total > MAX_COMPOSED_ENTRIES:
            raise UnsupportedError(
                f"neuro: composing two linear maps would expand to {total} synapses "
                f"(limit {MAX_COMPOSED_ENTRIES}); put a neuron layer between them")
        first = np.repeat(np.arange(len(self)), repeat)
        offset = np.arange(total) - np.repeat(np.cumsum(repeat) - repeat, repeat)
        second = order[np.repeat(starts[self.post], repeat) + offset]
        return SynapseMap.of(self.n_pre, other.n_post, self.pre[first], other.post[second],
                             self.weight[first] * other.weight[second],
                             self.lag[first] + other.lag[second]).merged()

    def merged(self) -> SynapseMap:
        """Entries with the same (pre, post, lag) summed into one."""
        if not len(self):
            return self
        keys, inverse = np.unique(np.stack([self.pre, self.post, self.lag]), axis=1,
                                  return_inverse=True)
        if keys.shape[1] == len(self):
            return self
        weight = np.bincount(inverse.ravel(), weights=self.weight, minlength=keys.shape[1])
        return SynapseMap(self.n_pre, self.n_post, keys[0], keys[1], weight, keys[2])


def conv_map(weight: np.ndarray, in_shape: Sequence[int], out_shape: Sequence[int],
             strides: Sequence[int], pads: Sequence[int], dilations: Sequence[int],
             group: int) -> SynapseMap:
    """The connections of an N-d cross-correlation (ONNX Conv), one per kernel tap.

    ``in_shape`` is ``[C, *spatial]``, ``out_shape`` ``[M, *spatial_out]``,
    ``weight`` ``[M, C/group, *kernel]``; zero padding makes no connection.
    """
    channels, space = int(in_shape[0]), tuple(int(s) for s in in_shape[1:])
    maps, out_space = int(out_shape[0]), tuple(int(s) for s in out_shape[1:])
    n_pre, n_post = channels * math.prod(space), maps * math.prod(out_space)
    if not n_pre or not n_post:  # no channel (a depthwise pool over none): no connection
        return SynapseMap.empty(n_pre, n_post)
    per_group_in, kernel = weight.shape[1], weight.shape[2:]
    per_group_out = maps // group
    rank = len(space)
    out_grid = np.indices(out_space, dtype=np.int64).reshape(rank, -1)
    out_flat = np.arange(math.prod(out_space), dtype=np.int64)
    m = np.arange(maps, dtype=np.int64)[:, None, None]
    local_c = np.arange(per_group_in, dtype=np.int64)[None, :, None]
    in_channel = (m // per_group_out) * per_group_in + local_c
    parts = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        position = np.stack([out_grid[d] * strides[d] - pads[d] + tap[d] * dilations[d]
                             for d in range(rank)])
        inside = np.all((position >= 0) & (position < np.array(space)[:, None]), axis=0)
        if not inside.any():
            continue
        in_flat = np.ravel_multi_index(tuple(position[:, inside]), space)[None, None, :]
        pre = in_channel * math.prod(space) + in_flat
        post = m * math.prod(out_space) + out_flat[inside][None, None, :]
        w = weight[(slice(None), slice(None), *tap)][:, :, None]
        shape = (maps, per_group_in, int(inside.sum()))
        parts.append((np.broadcast_to(pre, shape).ravel(), np.broadcast_to(post, shape).ravel(),
                      np.broadcast_to(w, shape).ravel()))
    if not parts:
        return SynapseMap.empty(n_pre, n_post)
    pre, post, w = (np.concatenate(p) for p in zip(*parts, strict=True))
    return SynapseMap.of(n_pre, n_post, pre, post, w)


def channel_bias(bias: np.ndarray, out_shape: Sequence[int]) -> SynapseMap:
    """The constant 1 to every element of channel ``m`` with weight ``bias[m]``."""
    per_channel = math.prod(int(s) for s in out_shape[1:])
    values = np.repeat(np.asarray(bias, np.float64), per_channel)
    return SynapseMap.of(1, values.size, np.zeros(values.size), np.arange(values.size), values)
