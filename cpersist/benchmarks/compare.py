"""Check that what a method read back equals what was written: strict on
dtype, shape and every value (NaN at the same places), lenient on memory
order, ``np.memmap`` vs ``np.ndarray`` and read-only flags."""

import math

import numpy as np


def _first(differences):
    """The first of ``differences`` (made one by one, as asked for) that is not None."""
    return next((d for d in differences if d), None)


def _array_diff(a, b, where):
    if not isinstance(b, np.ndarray):
        return f"{where}: expected ndarray, got {type(b).__name__}"
    # Byte order is representation, not value: PyTables, joblib and nibabel
    # hand back big-endian data in native order, which is correct.
    if a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
        return f"{where}: dtype {b.dtype} != {a.dtype}"
    if a.shape != b.shape:
        return f"{where}: shape {b.shape} != {a.shape}"
    if a.dtype.hasobject:
        return _first(first_difference(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(
            zip(a.ravel(order="K").tolist(), b.ravel(order="K").tolist())))
    if a.dtype.fields is not None:
        # Structured records: field by field (padding bytes between fields
        # are uninitialised memory and legitimately differ after a copy).
        return _first(_array_diff(a[name], b[name], f"{where}[{name!r}]")
                      for name in a.dtype.names)
    if a.dtype.kind == "V":
        if np.ascontiguousarray(a).tobytes() != np.ascontiguousarray(b).tobytes():
            return f"{where}: raw void values differ"
        return None
    equal_nan = a.dtype.kind in "fc"
    if not np.array_equal(a, b, equal_nan=equal_nan):
        if equal_nan:
            nan_a, nan_b = np.isnan(a), np.isnan(b)
            if not np.array_equal(nan_a, nan_b):
                return f"{where}: NaN positions differ ({int(nan_a.sum())} vs {int(nan_b.sum())} NaN)"
        return f"{where}: {int(np.count_nonzero(a != b))} of {a.size} values differ"
    return None


def first_difference(expected, actual, where="obj"):
    """None when ``actual`` equals ``expected`` (an object graph compared
    recursively), else the first difference, named by its path from ``where``."""
    a, b = expected, actual
    if isinstance(a, np.ndarray):
        return _array_diff(a, b, where)
    if isinstance(a, np.generic):
        if type(a) is not type(b):
            return f"{where}: type {type(b).__name__} != {type(a).__name__}"
        return _array_diff(np.asarray(a), np.asarray(b), where)
    if type(a) is not type(b):
        return f"{where}: type {type(b).__name__} != {type(a).__name__}"
    if isinstance(a, float):
        return None if a == b or (math.isnan(a) and math.isnan(b)) else f"{where}: {b!r} != {a!r}"
    if isinstance(a, (str, bytes, int, bool, complex, type(None))):
        return None if a == b else f"{where}: values differ"
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return f"{where}: length {len(b)} != {len(a)}"
        # Fast path: lists of plain values (e.g. a text corpus) compare in C.
        try:
            if a == b:
                return None
        except (ValueError, TypeError):  # arrays inside: ambiguous truth value
            pass
        return _first(first_difference(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b)))
    if isinstance(a, dict):
        if set(a) != set(b):
            return f"{where}: keys differ"
        return _first(first_difference(a[k], b[k], f"{where}[{k!r}]") for k in a)
    if isinstance(a, (set, frozenset)):
        return None if a == b else f"{where}: sets differ"
    module = type(a).__module__
    if module.startswith("pandas"):
        return _pandas_diff(a, b, where)
    if module.startswith("scipy.sparse") and hasattr(a, "tocoo"):
        return _sparse_diff(a, b, where)
    # Arbitrary objects (e.g. a fitted scikit-learn model and its Cython
    # trees): compare their pickled state, which is what a serializer keeps.
    try:
        sa, sb = a.__getstate__(), b.__getstate__()
    except Exception:
        sa, sb = getattr(a, "__dict__", None), getattr(b, "__dict__", None)
    if sa is None and sb is None:
        try:
            sa, sb = a.__reduce_ex__(5)[1:3], b.__reduce_ex__(5)[1:3]
        except Exception:
            return None if a == b else f"{where}: values differ"
    return first_difference(sa, sb, f"{where}.__state__")


def _pandas_diff(a, b, where):
    """DataFrames, Series and Index objects: values, dtypes (categories too) and labels, exactly."""
    import pandas.testing as pdt
    check = {"DataFrame": pdt.assert_frame_equal, "Series": pdt.assert_series_equal}.get(
        type(a).__name__, pdt.assert_index_equal)
    if type(b) is not type(a):
        return f"{where}: type {type(b).__name__} != {type(a).__name__}"
    try:
        check(a, _unmapped(b), check_exact=True)
    except AssertionError as e:
        return f"{where}: {' '.join(str(e).split())[:200]}"
    return None


def _unmapped(obj):
    """A copy of a pandas object whose arrays are plain ndarrays (pandas'
    checks call ``np.memmap`` another class); categorical codes rebuilt."""
    import pandas as pd
    out = obj.copy(deep=True)
    if isinstance(out, pd.DataFrame):
        for i, dtype in enumerate(out.dtypes):
            if isinstance(dtype, pd.CategoricalDtype):
                codes = np.array(out.iloc[:, i].cat.codes)
                out.isetitem(i, pd.Categorical.from_codes(codes, dtype=dtype))
    elif isinstance(out, pd.Series) and isinstance(out.dtype, pd.CategoricalDtype):
        out = pd.Series(pd.Categorical.from_codes(np.array(out.cat.codes), dtype=out.dtype),
                        index=out.index, name=out.name)
    return out


def _sparse_diff(a, b, where):
    """scipy sparse matrices and arrays: format, shape, dtype and every stored value."""
    if a.format != b.format or a.shape != b.shape:
        return f"{where}: {b.format} {b.shape} != {a.format} {a.shape}"
    return _first(_array_diff(np.asarray(getattr(a, name)), np.asarray(getattr(b, name)),
                              f"{where}.{name}")
                  for name in ("data", "indices", "indptr", "row", "col", "offsets")
                  if hasattr(a, name))


def touch(obj):
    """Read every byte of every memory-mapped array inside ``obj`` and return
    how many: opening a memmap costs almost nothing, the data is read on first
    access. Counting non-zero bytes forces every page in, in a fast SIMD loop
    that adds little CPU time of its own."""
    n, stack, seen = 0, [obj], set()
    while stack:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, np.ndarray):
            if _is_mapped(o) and not o.dtype.hasobject:
                # ravel(order="K") is a view for C- or F-contiguous arrays.
                flat = o.ravel(order="K")
                np.count_nonzero(flat.view(np.uint8) if flat.flags.c_contiguous and flat.ndim == 1 else flat)
                n += o.nbytes
            elif o.dtype.hasobject:
                stack.extend(o.ravel().tolist())
        elif isinstance(o, dict):
            stack.extend(o.values())
        elif isinstance(o, (list, tuple)):
            stack.extend(o)
        elif hasattr(o, "__dict__"):
            stack.append(vars(o))
    return n


def _is_mapped(a):
    import mmap
    base = a
    while base is not None:
        if isinstance(base, (np.memmap, mmap.mmap)):
            return True
        # ndarray.base, or memoryview.obj for arrays made with np.frombuffer.
        base = getattr(base, "base", None) if not isinstance(base, memoryview) else base.obj
    return False
