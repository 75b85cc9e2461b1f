"""Where an object that cannot be pickled sits inside the object to dump.

Run only after a dump failed: the object is walked from the top, each part
pickled to a sink that keeps nothing (numpy arrays of plain dtypes are
replaced by None: they always pickle, and copying them would cost their
size; so are dask arrays, which a dump computes rather than pickles), and the walk goes down into the first part that fails, until no part
of it fails on its own. Paths are written as :func:`cpersist.inspect` writes
them: ``obj['callbacks'][2]``, ``obj.model.loss_``.
"""

import pickle

#: Failures of the pickle module that mean "this object cannot be pickled".
PICKLING_ERRORS = (pickle.PicklingError, TypeError, AttributeError)
#: How deep the walk goes before it names what it reached.
MAX_DEPTH = 200


class _Discard:
    def write(self, data):
        return len(data)


def _fails(obj, protocol):
    """The exception pickling ``obj`` raises, or None."""
    import numpy as np

    from .dask_arrays import dask_array_type

    dask_array = dask_array_type()

    class Probe(pickle.Pickler):
        def reducer_override(self, value):
            if type(value) is np.ndarray and not value.dtype.hasobject:
                return type(None), ()
            # A dask array is stored as its values, not its task graph: an
            # error computing it is the error, whether its graph pickles or not.
            if (dask_array is not None and isinstance(value, dask_array)
                    and not value.dtype.hasobject):
                return type(None), ()
            return NotImplemented

    try:
        Probe(_Discard(), protocol).dump(obj)
    except PICKLING_ERRORS as exc:
        return exc
    except Exception:  # a __reduce__ raising something else: not what we look for
        return None
    return None


def _parts(obj):
    """``(label, part)`` of the parts of ``obj`` pickling visits."""
    if isinstance(obj, dict):
        return [(f"[{key!r}]", value) for key, value in obj.items()] + \
               [(f".keys() item {key!r}", key) for key in obj]
    if isinstance(obj, (list, tuple)):
        return [(f"[{i}]", value) for i, value in enumerate(obj)]
    if isinstance(obj, (set, frozenset)):
        return [(f" item {value!r}", value) for value in obj]
    state = getattr(obj, "__dict__", None)
    if isinstance(state, dict):
        return [(f".{name}", value) for name, value in state.items()]
    return []


def _what(obj):
    kind = type(obj)
    kind_name = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    name = getattr(obj, "__qualname__", None)
    if callable(obj) and isinstance(name, str):
        return f"{kind_name} {name!r}"
    return kind_name


def locate(obj, protocol, root="obj"):
    """``(path, part, exception)`` of the innermost part of ``obj`` that
    cannot be pickled on its own, or None when ``obj`` pickles."""
    exc = _fails(obj, protocol)
    if exc is None:
        return None
    path, node = root, obj
    seen = {id(obj)}
    for _ in range(MAX_DEPTH):
        for label, part in _parts(node):
            if id(part) in seen:
                continue
            failure = _fails(part, protocol)
            if failure is not None:
                seen.add(id(part))
                path, node, exc = path + label, part, failure
                break
        else:
            break
    return path, node, exc


def unpicklable_error(obj, protocol, original):
    """A :class:`~cpersist.UnpicklableError` naming where in ``obj`` the
    part that cannot be pickled sits, or None when none is found."""
    from ..exceptions import UnpicklableError

    found = locate(obj, protocol)
    if found is None:
        return None
    path, part, exc = found
    return UnpicklableError(f"cannot pickle {path} (a {_what(part)}): {exc or original}", path)
