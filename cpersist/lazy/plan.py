"""numpy basic indexing, resolved against a shape without any array.

:class:`cpersist.LazyArray` reads only what an index selects, so it needs to
know, before reading, which elements of each axis the index picks and what
shape the result has. The rules are numpy's (integers, negative integers,
slices of any step, ``Ellipsis``, ``None``), and so are the errors.
"""

import operator

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
