"""Sizing, describing and caching a dataset's object for the measurement
processes, so every method reads byte-identical input from the output
directory's scratch space (``_work/datasets``).
"""

import pickle
import sys

import numpy as np


def _special_nbytes(obj):
    """Size of a pandas DataFrame or a scipy sparse matrix, or None for others."""
    mod = type(obj).__module__
    if mod.startswith("pandas") and hasattr(obj, "memory_usage"):
        usage = obj.memory_usage(deep=True, index=True)
        return int(usage.sum()) if hasattr(usage, "sum") else int(usage)
    if mod.startswith("scipy.sparse") and hasattr(obj, "nnz"):
        parts = [getattr(obj, a, None) for a in ("data", "indices", "indptr", "row", "col", "offsets")]
        return sum(p.nbytes for p in parts if isinstance(p, np.ndarray))
    return None


def deep_nbytes(obj):
    """In-memory size of an object graph: arrays count their data bytes
    (``nbytes``; views of a shared base once per view, which is what gets
    serialised), everything else ``sys.getsizeof`` of each distinct object
    reached through containers, ``__dict__`` and ``__getstate__``."""
    seen = set()
    keep = []  # states made by __getstate__ must outlive the walk, or ids get reused
    total = 0
    stack = [obj]
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        keep.append(o)
        special = _special_nbytes(o)
        if special is not None:
            total += special
            continue
        if isinstance(o, np.ndarray):
            total += o.nbytes
            if o.dtype.hasobject:
                stack.extend(o.ravel().tolist())
            continue
        total += sys.getsizeof(o)
        if isinstance(o, (str, bytes, bytearray, int, float, complex, bool, type(None))):
            continue
        if isinstance(o, dict):
            stack.extend(o.keys())
            stack.extend(o.values())
        elif isinstance(o, (list, tuple, set, frozenset)):
            stack.extend(o)
        else:
            try:
                state = o.__getstate__()
            except Exception:
                state = getattr(o, "__dict__", None)
            if state is not None and state is not o:
                stack.append(state)
    return total


def describe(obj):
    """Short human description: ``float32 (91, 109, 91, 27) C`` or a type name."""
    if isinstance(obj, np.ndarray):
        order = "F" if (obj.flags.f_contiguous and not obj.flags.c_contiguous) else "C"
        return f"{obj.dtype} {tuple(obj.shape)} {order}"
    if isinstance(obj, dict):
        return f"dict of {len(obj)}"
    if isinstance(obj, (list, tuple)):
        return f"{type(obj).__name__} of {len(obj)}"
    if type(obj).__module__.startswith(("pandas", "scipy.sparse")) and hasattr(obj, "shape"):
        return f"{type(obj).__name__} {tuple(obj.shape)}"
    return type(obj).__name__


def save_cached(dataset, obj, path):
    """Pickle ``obj``, the data of ``dataset``, to ``path`` for the measuring
    processes; return what the result rows say of it (``source``,
    ``description``, ``size_bytes``, ``path``)."""
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=5)
    return {
        "source": dataset.source,
        "description": f"{dataset.description} [{describe(obj)}]",
        "size_bytes": deep_nbytes(obj),
        "path": path,
    }


def load_cached(path):
    """Load a dataset cached (pickled, protocol 5) by the runner's plan step."""
    with open(path, "rb") as f:
        return pickle.load(f)
