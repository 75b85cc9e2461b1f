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

from ..stream import MAX_KEPT_BYTES

#: Values that hold no array, as the pickle stream writes them.
_LEAVES = frozenset((str, bytes, bytearray, int, float, complex, bool, type(None)))
#: Keys the stream writes as the literals the walker labels (bytes keys are
#: left out: protocol 2 writes them as a call).
_LITERAL_KEYS = frozenset((int, float, bool))


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
        literals, if it is larger than a pass is worth (more than 64
        containers per array section), or if an array section was not found.
    """
    budget = 64 * n_sections + 1024
    paths = {}
    queue = deque([(obj, root)])
    seen = {id(obj)}
    kind = type(obj)
    if kind is np.ndarray or id(obj) in placed:
        section = placed.get(id(obj))
        if section is not None:
            paths[section] = root
        return paths if len(paths) == n_sections else None
    if kind is not dict and kind is not list and kind is not tuple:
        return None
    while queue:
        budget -= 1
        if budget < 0:
            return None
        node, path = queue.popleft()
        if type(node) is dict:
            children = []
            for key, child in node.items():
                kind = type(key)
                if kind is str:
                    label = f"[{key!r}]" if len(key) <= MAX_KEPT_BYTES else "[?]"
                elif kind in _LITERAL_KEYS:
                    label = f"[{key!r}]"
                elif key is None:
                    label = "[?]"
                else:
                    return None
                children.append((label, child))
        else:
            children = [(f"[{i}]", child) for i, child in enumerate(node)]
        for label, child in children:
            kind = type(child)
            if kind in _LEAVES:
                continue
            if kind is np.ndarray:
                if id(child) not in placed:
                    return None  # pickled some other way (object items)
                section = placed[id(child)]
                if section is not None and section not in paths:
                    paths[section] = path + label
            elif kind is dict or kind is list or kind is tuple:
                if id(child) not in seen:
                    seen.add(id(child))
                    queue.append((child, path + label))
            elif isinstance(child, (np.generic, np.dtype)):
                continue  # numpy scalars and dtypes hold no array
            elif id(child) in placed:
                # Another kind of array stored as an ndarray is (a dask array).
                section = placed[id(child)]
                if section is not None and section not in paths:
                    paths[section] = path + label
            else:
                return None
    return paths if len(paths) == n_sections else None
