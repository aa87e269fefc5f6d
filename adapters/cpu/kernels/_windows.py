"""Window geometry shared by the fast Conv and pooling kernels.

The geometry (output sizes, begin/end pads, attribute validation) is the
reference's own (:mod:`polyhal.ops.window`), so the fast kernels accept and
reject exactly what the specification does. What differs is how windows are
read: instead of gathering every window into an ``[N, C, O..., K...]`` array,
the input is padded once (only as far as some window reaches) and read
through strided views, one per kernel position or all at once
(``as_strided``).

Pools read only the kernel positions that reach the input from some output
position (:attr:`Windows.taps`): the others read nothing but padding, which
neither a max nor a sum sees, so a kernel far wider than the input costs no
more than one as wide as it (a model file cannot make a pool loop or pad
per unit of an absurd ``kernel_shape``). A Conv reads every position: a
non-finite weight times a padding zero is NaN.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from polyhal.ir.limits import ensure_allocatable
from polyhal.ops.window import axis_geometry, window_attrs


class Windows:
    """The validated window geometry of one node applied to one input shape."""

    def __init__(self, spatial: Sequence[int], kernel: Sequence[int], attrs: dict[str, Any],
                 pool: bool) -> None:
        win = window_attrs(tuple(int(k) for k in kernel), attrs, pool)
        self.kernel = tuple(int(k) for k in kernel)
        self.strides = win.strides
        self.dilations = win.dilations
        self.spatial = tuple(int(s) for s in spatial)
        geometry = [axis_geometry(size, i, win) for i, size in enumerate(self.spatial)]
        self.begin = tuple(g[0] for g in geometry)
        self.end = tuple(g[1] for g in geometry)
        self.out = tuple(g[2] for g in geometry)
        self.taps = tuple(self._reaching(i) if pool else range(k)
                          for i, k in enumerate(self.kernel))
        """Per spatial axis, the kernel offsets read: for pools those that reach the
        input from some output position (a superset, which is harmless; one offset
        when none does, so that every window is still read, as padding), all for Conv."""
        # the padding kept before each axis: as far as the first offset read reaches
        self.lead = tuple(max(0, b - t.start * d)
                          for b, t, d in zip(self.begin, self.taps, self.dilations, strict=True))

    def _reaching(self, axis: int) -> range:
        k, s, d = self.kernel[axis], self.strides[axis], self.dilations[axis]
        begin, size, out = self.begin[axis], self.spatial[axis], self.out[axis]
        if out == 0 or size == 0:
            return range(1)
        # offset j reads coordinates j * d - begin + [0, (out - 1) * s]; keep the j
        # whose span meets [0, size)
        first = max(0, -(-(begin - (out - 1) * s) // d))
        last = min(k - 1, (begin + size - 1) // d)
        if last < first:  # no offset reaches the input
            first = last = min(first, k - 1)
        return range(first, last + 1)

    @property
    def rank(self) -> int:
        """Spatial axes."""
        return len(self.kernel)

    @property
    def positions(self) -> int:
        """Kernel positions (the product of the kernel sizes)."""
        return math.prod(self.kernel)

    def coords(self, axis: int, k: int) -> np.ndarray:
        """Input coordinate of every output position of ``axis`` at kernel offset ``k``."""
        return (np.arange(self.out[axis]) * self.strides[axis]
                + (k * self.dilations[axis] - self.begin[axis]))  # small, however wide

    def pads(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(begin, after)``: the padding the offsets read need before and after each
        spatial axis (the end only as far as the last window reaches). For a Conv,
        ``begin`` is the node's own begin padding."""
        after = []
        for i, size in enumerate(self.spatial):
            taps = self.taps[i]
            if self.out[i] == 0:
                after.append(0)
                continue
            reach = ((self.out[i] - 1) * self.strides[i]
                     + (taps[-1]) * self.dilations[i] + 1)
            after.append(max(0, reach - self.begin[i] - size))
        return self.lead, tuple(after)

    def padded(self, x: np.ndarray, fill: Any, where: str) -> np.ndarray:
        """``x`` padded with ``fill`` so that every window lies inside it.

        Index ``j`` of a padded spatial axis is input coordinate ``j - lead``;
        ``x`` itself when no window reaches outside it.
        """
        begin, after = self.pads()
        if not any(begin) and not any(after):
            return x
        shape = (*x.shape[:2], *(size + b + a for size, b, a in
                                 zip(self.spatial, begin, after, strict=True)))
        ensure_allocatable(shape, f"{where}: padded input")
        padded = np.empty(shape, dtype=x.dtype)
        padded.fill(fill)
        padded[(slice(None), slice(None), *self._inner())] = x
        return padded

    def _inner(self) -> tuple[slice, ...]:
        return tuple(slice(b, b + size) for b, size in zip(self.lead, self.spatial,
                                                           strict=True))

    def blocks(self, x: np.ndarray, fill: Any, nbytes: int
               ) -> Iterator[tuple[int, int, np.ndarray]]:
        """``(start, stop, padded)`` over blocks of the ``N * C`` planes of ``x``:
        ``padded`` is planes ``start:stop`` padded like :meth:`padded` does, in a
        buffer of about ``nbytes`` reused from block to block (so it stays in cache)."""
        planes = x.reshape(x.shape[0] * x.shape[1], *self.spatial)
        count = planes.shape[0]
        begin, after = self.pads()
        shape = tuple(size + b + a for size, b, a in zip(self.spatial, begin, after,
                                                         strict=True))
        plane_bytes = max(1, math.prod(shape) * x.itemsize)
        block = max(1, min(count, nbytes // plane_bytes))
        if not any(begin) and not any(after):
            for start in range(0, count, block):
                stop = min(count, start + block)
                yield start, stop, planes[start:stop]
            return
        buffer = np.empty((block, *shape), dtype=x.dtype)
        buffer.fill(fill)  # the border keeps ``fill``; each block overwrites the inside
        inner = (slice(None), *self._inner())
        for start in range(0, count, block):
            stop = min(count, start + block)
            padded = buffer[:stop - start]
            padded[inner] = planes[start:stop]
            yield start, stop, padded

    def at(self, padded: np.ndarray, offset: Sequence[int]) -> np.ndarray:
        """The strided view ``[..., O...]`` of ``padded`` at kernel position ``offset``."""
        index = []
        for i, k in enumerate(offset):
            start = k * self.dilations[i] - self.begin[i] + self.lead[i]
            stop = start + (self.out[i] - 1) * self.strides[i] + 1 if self.out[i] else start
            index.append(slice(start, stop, self.strides[i]))
        return padded[(Ellipsis, *index)]

    def offsets(self) -> list[tuple[int, ...]]:
        """Every kernel position read (:attr:`taps`), row-major."""
        return list(itertools.product(*self.taps))

    def all_windows(self, padded: np.ndarray, groups: int) -> np.ndarray:
        """Read-only view ``[N, groups, C / groups, K..., O...]`` of every window."""
        n, c = padded.shape[:2]
        sn, sc, *sp = padded.strides
        shape = (n, groups, c // groups, *self.kernel, *self.out)
        strides = (sn, sc * (c // groups), sc,
                   *(s * d for s, d in zip(sp, self.dilations, strict=True)),
                   *(s * st for s, st in zip(sp, self.strides, strict=True)))
        return as_strided(padded, shape, strides, writeable=False)

    def in_bounds(self, offset: Sequence[int], low: Sequence[int], high: Sequence[int]
                  ) -> np.ndarray | None:
        """``[O...]`` mask of the output positions whose input coordinate at kernel
        position ``offset`` is inside ``[low, high)`` on every axis; ``None`` when
        all of them are."""
        mask: np.ndarray | None = None
        for i, k in enumerate(offset):
            c = self.coords(i, k)
            inside = (c >= low[i]) & (c < high[i])
            if inside.all():
                continue
            shape = [1] * self.rank
            shape[i] = self.out[i]
            inside = inside.reshape(shape)
            mask = inside if mask is None else mask & inside
        return mask

    def counts(self, low: Sequence[int], high: Sequence[int]) -> np.ndarray:
        """``[O...]``: how many kernel positions of each window have every coordinate
        in ``[low, high)`` (a product of per-axis counts, each worked out from the
        window's first coordinate, whatever the kernel size)."""
        total = np.ones([1] * self.rank, dtype=np.int64)
        for i in range(self.rank):
            d = self.dilations[i]
            start = np.arange(self.out[i], dtype=np.int64) * self.strides[i] - self.begin[i]
            # offsets j in [0, kernel) with low <= start + j * d < high
            first = np.maximum(0, -((start - low[i]) // d))
            last = np.minimum(self.kernel[i] - 1, (high[i] - 1 - start) // d)
            count = np.maximum(0, last - first + 1)
            shape = [1] * self.rank
            shape[i] = self.out[i]
            total = total * count.reshape(shape)
        return total
