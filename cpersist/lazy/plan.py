"""What a lazy read reads: numpy basic indexing resolved against a shape
without any array, and the geometry of the selected elements in the stored
bytes (one contiguous span, or groups of elements starting in the same
chunk; dask blocks merged up to a size).

:class:`cpersist.LazyArray` reads only what an index selects, so it needs to
know, before reading, which elements of each axis the index picks and what
shape the result has. The rules are numpy's (integers, negative integers,
slices of any step, ``Ellipsis``, ``None``), and so are the errors.
"""

import itertools
import math
import operator

import numpy as np

#: The TypeError for indexes that are not basic ones.
NOT_BASIC = ("LazyArray supports basic indexing only (integers, slices, Ellipsis, None), "
             "got {!r}; read the part you need first, e.g. lazy[a:b][mask]")


class Selection:
    """What a basic index picks from an array of a given shape.

    Attributes
    ----------
    axes : list of (start, step, count)
        Per axis of the array: the first index picked, the step between
        picks and how many are picked (an integer index picks one).
    dropped : list of bool
        Per axis, whether an integer index removes it from the result.
    result_index : tuple
        Applied to the array of ``counts`` (one axis per array axis), gives
        the result's shape: ``0`` drops an axis, ``None`` inserts one.
    scalar : bool
        numpy returns a scalar rather than a 0-d array (every axis taken by
        an integer, no ``Ellipsis``).
    """

    __slots__ = ("axes", "dropped", "result_index", "scalar")

    @property
    def counts(self):
        return tuple(count for _, _, count in self.axes)


def _is_basic_int(item):
    if isinstance(item, bool) or type(item).__name__ == "bool_":
        return False  # numpy reads booleans as masks
    if hasattr(item, "ndim") and getattr(item, "ndim", 0) != 0:
        return False
    try:
        operator.index(item)
    except TypeError:
        return False
    return True


def select(index, shape):
    """Resolve ``index`` against ``shape``.

    Returns
    -------
    Selection

    Raises
    ------
    IndexError
        For an index outside the array, too many indices or two Ellipses,
        with numpy's messages.
    TypeError
        For anything but a basic index (lists, arrays, boolean masks).
    ValueError
        For a slice of step 0.
    """
    items = index if type(index) is tuple else (index,)
    for item in items:
        if not (item is None or item is Ellipsis or isinstance(item, slice)
                or _is_basic_int(item)):
            raise TypeError(NOT_BASIC.format(item))
    ellipses = sum(item is Ellipsis for item in items)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(item is not None and item is not Ellipsis for item in items)
    ndim = len(shape)
    if used > ndim:
        raise IndexError(f"too many indices for array: array is {ndim}-dimensional, "
                         f"but {used} were indexed")
    if ellipses:
        at = next(i for i, item in enumerate(items) if item is Ellipsis)
        items = items[:at] + (slice(None),) * (ndim - used) + items[at + 1:]
    else:
        items = items + (slice(None),) * (ndim - used)

    sel = Selection()
    sel.axes, sel.dropped = [], []
    result_index = []
    axis = 0
    for item in items:
        if item is None:
            result_index.append(None)
            continue
        n = shape[axis]
        if isinstance(item, slice):
            start, stop, step = item.indices(n)
            count = len(range(start, stop, step))
            # The step of an axis that picks at most one element is never
            # used: 1 keeps a step beyond numpy's strides (10**20) out of
            # the strides computed from it, as numpy itself ignores it.
            sel.axes.append((start if count else 0, step if count > 1 else 1, count))
            sel.dropped.append(False)
            result_index.append(slice(None))
        else:
            i = operator.index(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            sel.axes.append((i % n, 1, 1))
            sel.dropped.append(True)
            result_index.append(0)
        axis += 1
    sel.result_index = tuple(result_index)
    sel.scalar = not ellipses and all(sel.dropped) and None not in result_index
    return sel


#: Groups along an axis of at most this many positions are found by locating
#: every position's chunk; longer ones from the chunk boundaries they cross,
#: so that memory stays small however many elements a slice selects.
LIST_POSITIONS_UP_TO = 4096


def merged_blocks(chunks, shape, nbytes, limit):
    """``chunks`` with consecutive blocks along the axis cut into several
    merged while a block stays within ``limit`` bytes."""
    out = []
    for axis, blocks in enumerate(chunks):
        if len(blocks) <= 1 or not shape[axis]:
            out.append(blocks)
            continue
        slice_bytes = nbytes // shape[axis]
        merged = [blocks[0]]
        for block in blocks[1:]:
            if (merged[-1] + block) * slice_bytes <= limit:
                merged[-1] += block
            else:
                merged.append(block)
        out.append(tuple(merged))
    return tuple(out)


def _c_strides(shape, itemsize):
    strides = []
    step = itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _lowest(start, step, count):
    return start if step > 0 else start + (count - 1) * step


def _contiguous_span(axes, shape, strides, itemsize):
    """``(lo, hi)`` if the selected elements are stored bytes ``lo:hi`` in
    the order of the result, else None."""
    k = len(shape)
    while k and axes[k - 1][2] == shape[k - 1] and (axes[k - 1][1] == 1 or shape[k - 1] <= 1):
        k -= 1
    if k:
        _, step, count = axes[k - 1]
        if count > 1 and step != 1 or any(c != 1 for _, _, c in axes[:k - 1]):
            return None
    lo = sum(_lowest(*axis) * stride for axis, stride in zip(axes, strides))
    return lo, lo + math.prod(count for _, _, count in axes) * itemsize


class _Groups:
    __slots__ = ("split", "items")


def _groups(axes, strides, itemsize, starts, largest_chunk):
    """Cut the selection into groups of elements starting in the same chunk.

    The selection is seen as "positions" along the axes up to ``split``, the
    first axis whose step in the stored bytes is at most a chunk, each
    position holding the elements the later axes select (a run at most one
    chunk long). A group is consecutive positions along axis ``split``, with
    the same indices on the axes before it, that start in one chunk; it is
    read as the stored bytes from its lowest selected byte to its highest,
    which lie in about three chunks at most.

    Returns
    -------
    _Groups
        ``split``, and ``items``: ``(position, count, first_byte, lo, hi,
        c0, c1)`` per group: its first position in the C-order list of
        positions, how many, the stored byte of its first selected element,
        the stored bytes ``lo:hi`` its elements lie in, and the range of
        chunks those are in.
    """
    ndim = len(axes)
    split = next(k for k in range(ndim) if strides[k] <= largest_chunk)
    inner_lo = sum(_lowest(*axes[k]) * strides[k] for k in range(split + 1, ndim))
    inner_hi = sum((_lowest(*axes[k]) + (axes[k][2] - 1) * abs(axes[k][1])) * strides[k]
                   for k in range(split + 1, ndim)) + itemsize
    first_inner = sum(axes[k][0] * strides[k] for k in range(split + 1, ndim))
    start_s, step_s, count_s = axes[split]
    d = step_s * strides[split]
    n_chunks = len(starts) - 1
    items = []
    prefixes = itertools.product(*(range(start, start + count * step, step)
                                   for start, step, count in axes[:split]))
    for p, prefix in enumerate(prefixes):
        base = sum(i * strides[k] for k, i in enumerate(prefix)) + start_s * strides[split]
        # Byte where the run of position j starts: base + inner_lo + j * d.
        run0 = base + inner_lo
        js = np.arange(count_s, dtype=np.int64) if count_s <= LIST_POSITIONS_UP_TO else None
        if js is not None:
            chunk_of = np.searchsorted(starts, run0 + js * d, "right") - 1
            cuts = np.flatnonzero(np.diff(chunk_of)) + 1
        else:
            cuts = _cuts(run0, d, count_s, starts)
        edges = [0, *(int(c) for c in cuts), count_s]
        for ja, jb in zip(edges, edges[1:]):
            lo = run0 + min(ja * d, (jb - 1) * d)
            hi = run0 + max(ja * d, (jb - 1) * d) + (inner_hi - inner_lo)
            c0 = int(np.searchsorted(starts, lo, "right")) - 1
            c1 = min(int(np.searchsorted(starts, hi - 1, "right")) - 1, n_chunks - 1)
            items.append((p * count_s + ja, jb - ja, base + ja * d + first_inner, lo, hi, c0, c1))
    groups = _Groups()
    groups.split, groups.items = split, items
    return groups


def _cuts(run0, d, count, starts):
    """Positions ``j`` in ``1..count-1`` where ``run0 + j * d`` enters a new
    chunk, computed from the chunk boundaries rather than every position."""
    last = run0 + (count - 1) * d
    lo, hi = min(run0, last), max(run0, last)
    inner = starts[(starts > lo) & (starts <= hi)]
    if d > 0:
        js = -((run0 - inner) // d)  # first j with run0 + j * d >= boundary
    else:
        js = (run0 - inner) // -d + 1  # first j with run0 + j * d < boundary
    return np.unique(js[(js > 0) & (js < count)])
