"""Where each array of a dump sits in the object, found on the object itself.

A file of arrays in plain containers records each array's path in its
section's ``meta`` (``"path"``), so that listing the file
(``cpersist.open(...).arrays``) reads the paths from the index instead of
walking the pickle stream. They are found at dump time by a breadth-first
pass over the object, which gives the paths :mod:`cpersist.stream.paths` would
find in the stream only when the object is made of plain dicts, lists and
tuples around the arrays and literals: for anything else (an instance, a
subclass, a set) the stream's opcodes describe the object in a way this pass
does not model, and it finds nothing, leaving readers to walk the stream.
"""

from collections import deque

import numpy as np

from ..stream import MAX_KEPT_BYTES, MAX_PATH

#: Values that hold no array, as the pickle stream writes them.
_LEAVES = frozenset((str, bytes, bytearray, int, float, complex, bool, type(None)))
#: Keys the stream writes as the literals the walker labels (bytes keys are
#: left out: protocol 2 writes them as a call).
_LITERAL_KEYS = frozenset((int, float, bool))
#: Keys this pass models (None is labelled ``[?]``, as the walk does).
_KEYS = _LITERAL_KEYS | {str, type(None)}


def object_paths(obj, placed, n_sections, root="obj"):
    """``{section: path}`` of every array stored in a section, or None.

    Parameters
    ----------
    obj : object
        The object just pickled.
    placed : dict
        ``{id(array): section}`` for the arrays pickled as a section of
        their own (numpy arrays, and dask arrays stored as the numpy arrays
        they compute to), ``{id(array): None}`` for those kept in the stream
        (:attr:`cpersist.pickling.array_pickler.ArrayPickler.placed`).
    n_sections : int
        How many array sections the dump wrote: every one must be found.
    root : str

    Returns
    -------
    dict or None
        None if the object holds anything but plain containers, arrays and
        literals, if it is larger than a pass is worth (more than
        :data:`CHILDREN_PER_SECTION` children, items of its containers, per
        array section, plus :data:`CHILDREN_BASE`: a container is measured
        before its children are looked at, so that a pass over a large
        object stops at once), if a path would be longer than the stream's
        walk spells out (:data:`cpersist.stream.MAX_PATH`), or if an
        array section was not found.
    """
    kind = type(obj)
    if kind is np.ndarray or id(obj) in placed:
        paths = {}
        section = placed.get(id(obj))
        if section is not None:
            paths[section] = root
        return paths if len(paths) == n_sections else None
    if kind is not dict and kind is not list and kind is not tuple:
        return None
    budget = CHILDREN_PER_SECTION * n_sections + CHILDREN_BASE
    paths = {}
    queue = deque([(obj, root)])
    seen = {id(obj)}
    leaves = _LEAVES
    while queue:
        node, path = queue.popleft()
        budget -= len(node)
        if budget < 0:
            return None
        if type(node) is dict:
            for key, child in node.items():
                if type(child) in leaves and type(key) in _KEYS:
                    continue  # a literal: labelled only if it may hold an array
                label = _key_label(key)
                if label is None or not _visit(child, path + label, placed, paths, seen,
                                               queue):
                    return None
        else:
            i = -1
            for child in node:
                i += 1
                if type(child) in leaves:
                    continue
                if not _visit(child, f"{path}[{i}]", placed, paths, seen, queue):
                    return None
    return paths if len(paths) == n_sections else None


#: Children of plain containers a pass looks at, per array section of the dump
#: and in all (added): beyond, readers walk the pickle stream.
CHILDREN_PER_SECTION = 64
CHILDREN_BASE = 1024


def _key_label(key):
    """The label the stream's walk gives a dict key, or None if this pass
    does not model how the stream writes it."""
    kind = type(key)
    if kind is str:
        return f"[{key!r}]" if len(key) <= MAX_KEPT_BYTES else "[?]"
    if kind in _LITERAL_KEYS:
        return f"[{key!r}]"
    if key is None:
        return "[?]"
    return None


def _visit(child, path, placed, paths, seen, queue):
    """Record or queue ``child`` of a container, found at ``path``; False
    if it is something this pass does not model."""
    kind = type(child)
    if kind is np.ndarray:
        if id(child) not in placed:
            return False  # pickled some other way (object items)
        section = placed[id(child)]
    elif kind is dict or kind is list or kind is tuple:
        if id(child) not in seen:
            seen.add(id(child))
            if len(path) > MAX_PATH:
                return False  # the walk would give its arrays no path ("?")
            queue.append((child, path))
        return True
    elif isinstance(child, (np.generic, np.dtype)):
        return True  # numpy scalars and dtypes hold no array
    elif id(child) in placed:
        # Another kind of array stored as an ndarray is (a dask array).
        section = placed[id(child)]
    else:
        return False
    if section is not None and section not in paths:
        if len(path) > MAX_PATH:
            return False
        paths[section] = path
    return True
