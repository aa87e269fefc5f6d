"""Fast Conv: im2col through strided views, then one BLAS matmul per group.

The input is padded once (:class:`~._windows.Windows`); its windows are read
through one ``as_strided`` view ``[G, C/G, K..., N, O...]`` that is copied,
several whole images at a time, into a reused buffer of at most
:data:`TILE_BYTES`, and multiplied by the filters ``[G, M/G, C/G * prod(K)]``
in one wide matmul per group (an image too large for a tile is split by
output rows). A 1x1 convolution with unit strides and no padding needs no
copy at all, and a depthwise convolution (one input channel per group)
accumulates one broadcast multiply per kernel position instead of many tiny
matmuls.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from polyhal.adapters.cpu.kernels._windows import Windows
from polyhal.ir.limits import ensure_allocatable

TILE_BYTES = 16 << 20
"""At most how many bytes of im2col columns one matmul takes (unless one output row
needs more)."""
DEPTHWISE_BYTES = 256 << 10
"""About how many bytes of output one depthwise block accumulates."""
DIRECT_MAX_DEPTH = 576
"""A lowered Conv whose window holds at most this many values (``C * KH * KW``: 64
channels of 3x3) runs :mod:`.direct_conv`'s micro-kernel, unless it is a 1x1 Conv
with unit strides and no padding (one BLAS product of the input as it lies); deeper
windows go to BLAS through im2col. Measured on the 3x3 layers of
``benchmarks/models.py`` (2 cores): 16 channels 3.5x faster than im2col and 2.4x
faster than BLAS products of shifted rows (the strategy it replaces), 32 channels
1.1x, 64 channels about even; at 96-128 channels BLAS is 1.5-3x faster."""


def conv(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *, auto_pad: str,
         dilations: Any, group: int, kernel_shape: Any, pads: Any, strides: Any
         ) -> np.ndarray:
    """``core.Conv``: the reference's semantics (see :mod:`polyhal.ops.nn`)."""
    attrs = {"auto_pad": auto_pad, "dilations": dilations, "pads": pads, "strides": strides}
    win = Windows(x.shape[2:], w.shape[2:], attrs, pool=False)
    n, c, m = x.shape[0], x.shape[1], w.shape[0]
    out, dtype = win.out, np.result_type(x.dtype, w.dtype)
    c_group, m_group = c // group, m // group
    positions, pixels = win.positions, math.prod(out)
    ensure_allocatable((n, m, *out), "Conv: output")
    y = np.empty((n, group, m_group, pixels), dtype=dtype)
    if y.size == 0:
        pass
    elif c_group * positions == 0:
        y.fill(0)
    elif c_group == 1:
        _depthwise(x, w, win, group, y)
    elif (all(k == 1 for k in win.kernel) and all(s == 1 for s in win.strides)
          and not any(win.begin) and not any(win.end)):
        cols = x.reshape(n, group, c_group, pixels)
        np.matmul(w.reshape(group, m_group, c_group), cols, out=y)
    else:
        _im2col(x, w, win, group, y)
    y = y.reshape(n, m, *out)
    if b is not None:
        y += b.reshape(1, m, *[1] * len(out))
    return y.astype(x.dtype, copy=False)


def _im2col(x: np.ndarray, w: np.ndarray, win: Windows, group: int, y: np.ndarray) -> None:
    """``y[N, G, M/G, P]`` = filters @ columns, over cache-sized tiles of columns.

    Whole images are batched into one matmul per group (``[M/G, depth] @ [depth,
    images * P]``): BLAS is far faster on one wide product than on one narrow
    product per image. An image whose columns exceed a tile is split by output rows.
    """
    n, c = x.shape[:2]
    m = w.shape[0]
    c_group, m_group = c // group, m // group
    depth = c_group * win.positions
    filters = w.reshape(group, m_group, depth)
    windows = win.all_windows(win.padded(x, 0, "Conv"), group)  # [N, G, C/G, K..., O...]
    lead = 3 + win.rank  # axes before the first output axis in ``windows``
    pixels = math.prod(win.out)
    per_item = group * depth * pixels * y.itemsize
    if per_item > TILE_BYTES:
        for item in range(n):
            _im2col_rows(windows[item], filters, win, y[item])
        return
    batch = max(1, min(n, TILE_BYTES // per_item))
    by_group = np.moveaxis(windows, 0, lead - 1)  # [G, C/G, K..., N, O...]
    buffers: dict[int, np.ndarray] = {}
    for n0 in range(0, n, batch):
        n1 = min(n, n0 + batch)
        count = n1 - n0
        if count not in buffers:  # at most two sizes: full tiles and the last one
            buffers[count] = np.empty((group, c_group, *win.kernel, count, *win.out),
                                      dtype=y.dtype)
        cols = buffers[count]
        np.copyto(cols, by_group[(*[slice(None)] * (lead - 1), slice(n0, n1))])
        product = np.matmul(filters, cols.reshape(group, depth, count * pixels))
        y[n0:n1] = product.reshape(group, m_group, count, pixels).transpose(2, 0, 1, 3)


def _im2col_rows(windows: np.ndarray, filters: np.ndarray, win: Windows, y: np.ndarray
                 ) -> None:
    """One image, ``y[G, M/G, P]``, a tile of output rows at a time."""
    group, m_group, depth = filters.shape
    rows, rest = win.out[0], math.prod(win.out[1:])
    per_row = group * depth * rest * y.itemsize
    step = max(1, TILE_BYTES // per_row)
    if step * per_row > TILE_BYTES:  # one output row's columns exceed a tile
        ensure_allocatable((group, depth, step * rest), "Conv: columns")
    buffer = np.empty((group, depth // win.positions, *win.kernel, step, *win.out[1:]),
                      dtype=y.dtype)
    out = y.reshape(group, m_group, rows, rest)
    lead = 2 + win.rank  # axes before the first output axis in ``windows``
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        cols = buffer[(*[slice(None)] * lead, slice(r1 - r0))]
        np.copyto(cols, windows[(*[slice(None)] * lead, slice(r0, r1))])
        product = np.matmul(filters, cols.reshape(group, depth, (r1 - r0) * rest))
        out[:, :, r0:r1] = product.reshape(group, m_group, r1 - r0, rest)


def _depthwise(x: np.ndarray, w: np.ndarray, win: Windows, group: int, y: np.ndarray) -> None:
    """One input channel per group: ``y[n, g, j] = sum_k w[g*M/G + j, 0, k] * x_k[n, g]``,
    one broadcast multiply-add per kernel position, over cache-sized channel blocks."""
    n = x.shape[0]
    m_group = w.shape[0] // group
    padded = np.ascontiguousarray(win.padded(x, 0, "Conv"))  # [N, C] flattens as a view
    filters = w.reshape(group, m_group, win.positions)
    out = y.reshape(n * group, m_group, *win.out)
    per_group = m_group * math.prod(win.out) * y.itemsize
    block = max(1, min(n * group, DEPTHWISE_BYTES // max(1, per_group)))
    term = np.empty((block, m_group, *win.out), dtype=y.dtype)
    views = [win.at(padded, offset).reshape(n * group, 1, *win.out)
             for offset in win.offsets()]
    weights = filters.reshape(1, group, m_group, win.positions)
    for start in range(0, n * group, block):
        stop = min(n * group, start + block)
        target, scratch = out[start:stop], term[:stop - start]
        rows = np.arange(start, stop) % group
        spread = (stop - start, m_group, *[1] * win.rank)
        for index, view in enumerate(views):
            weight = weights[0, rows, :, index].reshape(spread)
            if index == 0:
                np.multiply(view[start:stop], weight, out=target)
            else:
                np.multiply(view[start:stop], weight, out=scratch)
                target += scratch


class Conv2dLowering:
    """A 2-D Conv of fixed shapes and one group, lowered for the plan, writing a
    **channels-last** output (``[N, OH, OW, M]`` memory, seen as ``[N, M, OH, OW]``),
    optionally followed by a residual added and a Relu, both applied while the output
    is written (arguments of each call, so one lowering serves with or without them).

    Two strategies. **Direct** (float32/float64 windows of at most
    :data:`DIRECT_MAX_DEPTH` values, but not a plain 1x1 product):
    :mod:`.direct_conv`'s register-blocked micro-kernel reads the input in either
    layout (the rows each output row needs are copied into a small zero-bordered
    buffer, so padding costs nothing) and writes each output pixel once, bias,
    residual and Relu included. **im2col** (deeper windows, where a GEMM is wide
    enough for BLAS): columns into a reused scratch tile, one GEMM per tile of
    whole images, with a column of ones that multiplies the bias row; the
    residual and the Relu follow the product.

    Channels-last is what the GEMM produces when columns are rows
    (``[images * pixels, depth] @ [depth, M]``) and what the direct kernel reads
    and writes: no transpose of the output, and the next Conv reads channels-last
    input, whose window rows ``(KW, C)`` are contiguous runs, without one. An
    input in the usual NCHW memory (a graph input, a layer after a non-Conv op) is
    gathered row by row (direct) or read as NCHW columns ``[depth, images *
    pixels]`` multiplied transposed (im2col). Filters are packed once per
    strategy (:meth:`filters`).

    Built by :meth:`build` for im2col only when every image's columns fit in a
    tile; scratch buffers (:attr:`scratch`) come from the plan's arena, so nothing is
    allocated while running.
    """

    def __init__(self, x_shape: tuple[int, ...], w_shape: tuple[int, ...], win: Windows,
                 dtype: np.dtype) -> None:
        self.n, self.c, *_ = x_shape
        self.m = w_shape[0]
        self.win = win
        self.dtype = np.dtype(dtype)
        self.depth = self.c * win.positions
        self.width = self.depth + 1
        """Columns per GEMM row: the window and a 1 that multiplies the bias row."""
        self.pixels = math.prod(win.out)
        self.images = max(1, min(self.n, TILE_BYTES // (self.width * self.pixels
                                                        * self.dtype.itemsize)))
        begin, after = win.pads()
        self.begin = begin
        """Padding before each spatial axis."""
        self.padded_spatial = tuple(s + b + a for s, b, a in zip(win.spatial, begin, after,
                                                                 strict=True))
        self.needs_padding = any(begin) or any(after)
        self.pointwise = (win.kernel == (1, 1) and win.strides == (1, 1)
                          and not self.needs_padding)
        self.padded_shape = (self.n, *self.padded_spatial, self.c)
        self.padded_name = f"conv-padded{self.padded_shape}{begin}"
        """Named by everything that places the input in it, so Convs share the grid
        only where each leaves the other's zero border intact."""
        self.direct = (self.depth <= DIRECT_MAX_DEPTH and not self.pointwise
                       and self.dtype in (np.dtype(np.float32), np.dtype(np.float64)))
        # imported here, not with this module: they need numba
        from polyhal.adapters.cpu.kernels import epilogue

        self._epilogue = epilogue
        if self.direct:
            from polyhal.adapters.cpu.kernels import direct_conv

            self._kernel = direct_conv

    @classmethod
    def build(cls, x_shape: tuple[int, ...], w_shape: tuple[int, ...], attrs: dict[str, Any],
              dtype: np.dtype) -> Conv2dLowering | None:
        """The lowering of ``Conv(x, w)`` with resolved ``attrs``; ``None`` where the
        generic kernel is used instead (not 2-D, grouped, empty, or, for im2col, an
        image whose columns exceed a tile)."""
        if len(x_shape) != 4 or attrs["group"] != 1 or 0 in x_shape or 0 in w_shape:
            return None
        geometry = {k: attrs[k] for k in ("auto_pad", "dilations", "pads", "strides")}
        win = Windows(x_shape[2:], w_shape[2:], geometry, pool=False)
        if 0 in win.out:
            return None
        lowering = cls(x_shape, w_shape, win, dtype)
        if (not lowering.direct
                and lowering.width * lowering.pixels * lowering.dtype.itemsize > TILE_BYTES):
            return None
        return lowering

    @property
    def out_shape(self) -> tuple[int, ...]:
        """The output's logical (NCHW) shape."""
        return (self.n, self.m, *self.win.out)

    @property
    def scratch(self) -> dict[str, tuple[tuple[int, ...], bool]]:
        """Scratch buffers by name: ``(shape, zeroed)``. The padded channels-last input
        of im2col keeps a zero border that each run leaves alone."""
        if self.direct:
            return {}
        needed = {"conv-columns": ((self.images * self.width * self.pixels,), False)}
        if self.needs_padding:
            needed[self.padded_name] = (self.padded_shape, True)
        return needed

    def filters(self, w: np.ndarray, bias: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """``w`` and the bias packed for the strategy: the direct kernel's
        (:func:`.direct_conv.pack_filters`), or GEMM operands ``[depth + 1, M]`` for
        im2col, rows ``(KH, KW, C)`` for channels-last columns and ``(C, KH, KW)``
        for NCHW columns, then the bias (zero when absent)."""
        w = w.astype(self.dtype, copy=False)
        if self.direct:
            return self._kernel.pack_filters(w, bias, self.dtype)
        last = np.zeros(self.m, self.dtype) if bias is None else bias.astype(self.dtype)
        rows_last = np.concatenate([w.transpose(2, 3, 1, 0).reshape(-1, self.m), last[None]])
        rows_first = np.concatenate([w.reshape(self.m, -1).T, last[None]])
        return rows_last, rows_first

    def __call__(self, x: np.ndarray, filters: tuple[np.ndarray, np.ndarray], out: np.ndarray,
                 scratch: dict[str, np.ndarray], residual: np.ndarray | None = None,
                 relu: bool = False) -> None:
        """``out`` (channels-last memory) = Conv(x) + bias (+ ``residual``, a tensor of
        the output's shape) (then Relu if ``relu``), ``x`` and ``residual`` in any
        memory layout (``filters`` from :meth:`filters`)."""
        x = x.astype(self.dtype, copy=False)
        last = x.transpose(0, 2, 3, 1)
        added = None if residual is None else np.ascontiguousarray(
            residual.astype(self.dtype, copy=False).transpose(0, 2, 3, 1))  # a view if it can
        if self.direct:
            win = self.win
            self._kernel.convolve(last, filters, out.transpose(0, 2, 3, 1), win.kernel,
                                  win.strides, win.dilations, self.begin, relu, added)
            return
        rows = out.transpose(0, 2, 3, 1).reshape(self.n * self.pixels, self.m)  # a view
        columns = scratch["conv-columns"]
        if last.flags.c_contiguous:
            self._channels_last(last, filters[0], rows, columns, scratch)
        else:
            self._channels_first(np.ascontiguousarray(x), filters[1], rows, columns)
        self._epilogue.apply(rows, None if added is None else added.reshape(rows.shape), relu)

    def _channels_last(self, x: np.ndarray, filters: np.ndarray, rows: np.ndarray,
                       columns: np.ndarray, scratch: dict[str, np.ndarray]) -> None:
        if self.pointwise:
            np.matmul(x.reshape(-1, self.c), filters[:-1], out=rows)
            np.add(rows, filters[-1], out=rows)
            return
        win = self.win
        padded = x
        if self.needs_padding:  # x inside the zero border of the padded scratch input
            padded = scratch[self.padded_name]
            (top, left), (h, w) = self.begin, win.spatial
            padded[:, top:top + h, left:left + w] = x
        sn, sh, sw, sc = padded.strides
        windows = as_strided(
            padded, (self.n, *win.out, *win.kernel, self.c),
            (sn, sh * win.strides[0], sw * win.strides[1],
             sh * win.dilations[0], sw * win.dilations[1], sc), writeable=False)
        self._tiles(windows, filters, rows, columns, transposed=False)

    def _channels_first(self, x: np.ndarray, filters: np.ndarray, rows: np.ndarray,
                        columns: np.ndarray) -> None:
        windows = self.win.all_windows(self.win.padded(x, 0, "Conv"), 1)[:, 0]
        # [N, C, KH, KW, OH, OW] -> [C, KH, KW, N, OH, OW]: image tiles are then
        # contiguous column blocks, ordered like the output's rows.
        self._tiles(np.moveaxis(windows, 0, 3), filters, rows, columns, transposed=True)

    def _tiles(self, windows: np.ndarray, filters: np.ndarray, rows: np.ndarray,
               columns: np.ndarray, transposed: bool) -> None:
        image_axis = 3 if transposed else 0
        for n0 in range(0, self.n, self.images):
            n1 = min(self.n, n0 + self.images)
            index = [slice(None)] * windows.ndim
            index[image_axis] = slice(n0, n1)
            tile = windows[tuple(index)]
            count = (n1 - n0) * self.pixels
            used = columns[:count * self.width]
            if transposed:  # [depth + 1, count]: a row of ones last
                cols = used.reshape(self.width, count)
                np.copyto(cols[:-1].reshape(tile.shape), tile)
                cols[-1] = 1
                cols = cols.T
            else:  # [count, depth + 1]: a column of ones last
                cols = used.reshape(count, self.width)
                np.copyto(cols[:, :-1].reshape(tile.shape), tile)
                cols[:, -1] = 1
            np.matmul(cols, filters, out=rows[n0 * self.pixels:n1 * self.pixels])
