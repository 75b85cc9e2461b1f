"""Where each array sits in the pickled object, read from the opcodes.

The pickle stream of a cpersist file is never executed here: the tree that
:func:`cpersist.stream.opcodes.walk` builds records which dict key, list index or
attribute holds each ``stored_array(n)`` and ``inline_array(...)`` call. The
result is best effort: arrays reached only through something the walk does
not model (an extension code, a persistent id, a custom ``__setstate__``
taking a non-dict state) get no path.
"""

from collections import deque

from ..format import named_dtypes, names
from . import MAX_PATH
from .opcodes import walk
from .symbolic import Node, tuple_children

_REBUILD_TENSOR = names.split(names.REBUILD_TENSOR)


def scan_arrays(pickled, root="obj", limits=None, source=None):
    """Find where the arrays of a cpersist pickle stream sit in the object.

    Parameters
    ----------
    pickled : bytes-like
        A cpersist pickle stream (the file's root section), decoded.
    root : str
        How the paths name the object itself.

    Returns
    -------
    dict
        ``"paths"``: ``{section: path}`` for the arrays stored in sections,
        e.g. ``{0: "obj['weights']", 1: "obj.coef_"}`` (sections not found
        are missing); ``"inline"``: one dict per small array kept inside the
        stream, with ``path``, ``dtype`` (``dtype.str``, or ``"?"``),
        ``shape``, ``order`` and ``raw_bytes`` (None if unknown), and for
        one whose bytes are an out-of-band buffer, ``buffer``: its number
        among the file's buffers, in stream order;
        ``"tensors"``: one dict per torch tensor stored through its storage
        (``path``, ``section`` of the storage, ``dtype`` torch's name,
        ``offset``, ``shape``, ``stride``, ``requires_grad``, ``kind``,
        ``device``), as the stream gives them (not validated);
        ``"torch_pickled"``: ``path`` and ``global`` of each object torch
        pickled itself (sparse, quantized and nested tensors, tensor
        subclasses). An array or tensor the object holds at more than one
        place (tied weights) is given its first path, and its entry in
        ``"inline"`` or ``"tensors"`` an ``"also"`` list of the others (up to
        :data:`MAX_ALSO`); ``"also"``: ``{section: [paths]}`` of the arrays
        stored in sections. Never raises on a strange stream: what was understood
        up to the problem is returned. Raises only
        :class:`~cpersist.LimitExceededError`, when walking the stream would
        exceed ``limits``.
    """
    return arrays_of(walk(pickled, limits, source), root)


def array_paths(pickled, root="obj", limits=None, source=None):
    """``{section: path}`` of the arrays stored in sections (see :func:`scan_arrays`)."""
    return scan_arrays(pickled, root, limits, source)["paths"]


#: Other paths given of an array the object holds at several places.
MAX_ALSO = 8


def arrays_of(walked, root="obj"):
    """:func:`scan_arrays`'s result from a :class:`cpersist.stream.opcodes.Walk`.

    Breadth-first, so each array gets the shortest path that reaches it.
    Each node queued keeps its parent's place and its own label, and a path
    is spelled out only for an array (at most :data:`MAX_PATH` characters):
    time stays linear in the stream however deep the nesting.
    """
    paths = {}
    inline = []
    tensors = []
    torch_pickled = []
    also = {}
    found = {"paths": paths, "inline": inline, "tensors": tensors, "torch_pickled": torch_pickled,
             "also": also}
    top = walked.top
    if type(top) is not Node and type(top) is not tuple or not walked.globals:
        # Every array, inline array, tensor and object torch pickled is a
        # call of a global the stream names: without one, nothing to find
        # (and a stranger's million nested tuples need no walk).
        return found
    seen = {id(top)}
    parents = [-1]   # per place: the place of its parent
    labels = [root]  # per place: its label
    under_torch = set()  # places of objects torch pickled itself, and inside them
    entries = {}  # id of an inline or tensor node: its entry
    again = {}    # id of an array, inline or call node met again: (node, where else)
    queue = deque([(top, 0)])
    pop = queue.popleft
    push = queue.append

    def path_of(place, label):
        parts = [label]
        size = len(label)
        while place >= 0:
            part = labels[place]
            size += len(part)
            if size > MAX_PATH:
                return "?"
            parts.append(part)
            place = parents[place]
        return "".join(reversed(parts))

    while queue:
        node, place = pop()
        if type(node) is tuple:
            children = tuple_children(node)
        elif node.kind == "array":
            paths.setdefault(node.value, path_of(parents[place], labels[place]))
            continue
        elif node.kind == "inline":
            inline.append({"path": path_of(parents[place], labels[place]),
                           **_inline_description(node.value)})
            entries[id(node)] = inline[-1]
            continue
        else:
            children = node.children
            if node.kind == "call":
                if _note_tensor(node, place,
                                lambda: path_of(parents[place], labels[place]),  # noqa: B023
                                tensors, torch_pickled, under_torch):
                    entries[id(node)] = tensors[-1]
        for label, child in children:
            if id(child) not in seen:
                seen.add(id(child))
                if type(child) is Node and child.kind == "array":
                    # A leaf: recorded now, as it would be when popped (the
                    # queue pops in the order it is filled).
                    if child.value not in paths:
                        paths[child.value] = path_of(place, label)
                else:
                    parents.append(place)
                    labels.append(label)
                    if place in under_torch:
                        under_torch.add(len(labels) - 1)
                    push((child, len(labels) - 1))
            elif type(child) is Node and child.kind in _SHAREABLE:
                # The same object again (a memo get): tied weights.
                # Where, kept as the place and label: most nodes met again
                # are no array, and need no path spelled out.
                more = again.setdefault(id(child), (child, []))[1]
                if len(more) < MAX_ALSO:
                    more.append((place, label))
    storages = {t["section"] for t in tensors}
    for node, more in again.values():
        entry = entries.get(id(node))
        if entry is not None:
            entry["also"] = [path_of(*where) for where in more]
        elif node.kind == "array" and node.value not in storages:
            # (A storage met again is another view of it, which "tensors" lists.)
            also[node.value] = [path_of(*where) for where in more]
    return found


#: Nodes whose second sighting is the same array or tensor at another place.
_SHAREABLE = frozenset({"array", "inline", "call"})


def _note_tensor(node, place, path_of, tensors, torch_pickled, under_torch):
    """Record a ``rebuild_tensor`` call in ``tensors`` (and return True), or
    the path of a tensor torch pickled itself (a call of a torch global,
    outside any already recorded: ``under_torch`` holds their places and
    their descendants') in ``torch_pickled``."""
    func = node.value
    if type(func) is not Node or func.kind != "global":
        return False
    if func.value == _REBUILD_TENSOR:
        items = node.items
        if len(items) == 9 and type(items[0]) is Node and items[0].kind == "array":
            dtype, offset, shape, stride, requires_grad, kind, _, device = items[1:]
            tensors.append({"path": path_of(), "section": items[0].value, "dtype": dtype,
                            "offset": offset, "shape": shape, "stride": stride,
                            "requires_grad": requires_grad, "kind": kind, "device": device})
            return True
        return False
    module = func.value[0]
    if (module == "torch" or module.startswith("torch.")) and place not in under_torch:
        under_torch.add(place)
        torch_pickled.append({"path": path_of(), "global": ".".join(func.value)})
    return False


def _inline_description(args):
    """dtype, shape and order of an ``inline_array(data, dtype, shape, order)`` call."""
    desc = {"dtype": "?", "shape": None, "order": "?", "raw_bytes": None}
    items = args if type(args) is tuple else ()
    if len(items) != 4:
        return desc
    data, dtype, shape, order = items
    if type(data) is Node and data.kind == "buffer":
        desc["buffer"] = data.value
    if order in ("C", "F"):
        desc["order"] = order
    if type(shape) is tuple and all(type(i) is int for i in shape):
        desc["shape"] = list(shape)
    if type(dtype) is str and dtype in named_dtypes.ITEMSIZES:  # an ml_dtypes type
        label, itemsize = dtype, named_dtypes.ITEMSIZES[dtype]
    else:
        dt = _dtype_of(dtype)
        label = None if dt is None else dt.str if dt.fields is None else str(dt.descr)
        itemsize = None if dt is None else dt.itemsize
    if label is not None:
        desc["dtype"] = label
        if desc["shape"] is not None:
            n = itemsize
            for dim in desc["shape"]:
                n *= dim
            desc["raw_bytes"] = n
    return desc


def _dtype_of(node):
    """The numpy dtype a ``numpy.dtype(...)`` call node builds, or None.

    Only simple dtypes (no fields, no datetime unit) are rebuilt; numpy is
    imported lazily and nothing from the stream is called.
    """
    try:
        func = node.value
        if node.kind != "call" or type(func) is not Node or func.kind != "global" or (
            func.value[0] not in ("numpy", "numpy.core.multiarray", "numpy._core.multiarray")
        ) or func.value[1] != "dtype":
            return None
        typestr = node.items[0] if node.items else None
        state = node.state
        state = state if type(state) is tuple else ()
        byteorder = state[1] if len(state) > 1 and isinstance(state[1], str) else "="
        fields = state[3] if len(state) > 3 and type(state[3]) is not Node else "?"
        if fields is not None or not isinstance(typestr, str) or typestr[:1] in ("M", "m", "V"):
            return None
        import numpy as np

        dt = np.dtype(typestr)
        return dt.newbyteorder(byteorder) if byteorder in ("<", ">") else dt
    except Exception:
        return None
