"""Pickler and Unpickler subclasses that route numpy arrays to the container.

:class:`ArrayPickler` subclasses the C ``pickle.Pickler`` and catches arrays in
``reducer_override``, which the C pickler calls only for objects it cannot
save natively: dicts, lists, strings and numbers never reach Python code, so
object-heavy data pickles at the C pickler's speed. An array's bytes go to a
container section and the pickle stream only records a call
``cpersist.pickler.stored_array(n)``. :class:`ArrayUnpickler` resolves that
name, in ``find_class``, to a function returning the n-th stored array, and in
restricted mode refuses every other global outside an allowlist.
"""

import pickle

import numpy as np

from .arrays import is_plain_data
from .exceptions import CorruptFileError, UntrustedObjectError

_MODULE = __name__


def stored_array(index):
    """Placeholder resolved by :class:`ArrayUnpickler`; never called by it.

    A cpersist pickle stream calls this to fetch the array kept in section
    ``index``; outside :func:`cpersist.load` there is no file to fetch it from.
    """
    raise pickle.UnpicklingError(
        "this pickle stream comes from a cpersist file: open it with cpersist.load()"
    )


def rebuild_view(base, cls, state):
    """Rebuild an ndarray subclass (e.g. ``np.matrix``) as a view of ``base``."""
    if not (isinstance(cls, type) and issubclass(cls, np.ndarray)):
        raise pickle.UnpicklingError(f"{cls!r} is not an ndarray subclass")
    arr = base.view(cls)
    if state:
        arr.__dict__.update(state)
    return arr


def rebuild_masked(cls, data, mask, fill_value, hard_mask):
    """Rebuild a masked array from its stored data and mask."""
    if not (isinstance(cls, type) and issubclass(cls, np.ma.MaskedArray)):
        raise pickle.UnpicklingError(f"{cls!r} is not a MaskedArray subclass")
    arr = np.ma.MaskedArray(data, mask=mask, copy=False, hard_mask=hard_mask).view(cls)
    if mask is not np.ma.nomask:
        arr._mask = mask  # keep the stored mask object (and its memmap) as is
    if fill_value is not None:
        arr.fill_value = fill_value
    return arr


_plain_reduce = (np.ndarray.__reduce__, np.ndarray.__reduce_ex__)


class ArrayPickler(pickle.Pickler):
    """C pickler that stores each plain-data numpy array through ``store``.

    Parameters
    ----------
    file : binary file object
        Receives the pickle stream (without the arrays' bytes).
    protocol : int
    store : callable
        ``store(arr) -> int``: writes a plain ``np.ndarray`` (C-, F- or
        non-contiguous) and returns the number of its section.
    """

    def __init__(self, file, protocol, store):
        super().__init__(file, protocol)
        self._store = store

    def reducer_override(self, obj):
        cls = type(obj)
        if cls is np.ndarray or cls is np.memmap:
            if not is_plain_data(obj):
                return NotImplemented  # items are Python objects: pickle them
            base = obj if cls is np.ndarray else obj.view(np.ndarray)
            return stored_array, (self._store(base),)
        if not isinstance(obj, np.ndarray) or not is_plain_data(obj):
            return NotImplemented
        if isinstance(obj, np.ma.MaskedArray):
            mask = obj._mask
            return rebuild_masked, (
                cls,
                obj.view(np.ndarray),
                mask if mask is np.ma.nomask else mask.view(np.ndarray),
                obj._fill_value,
                bool(obj._hardmask),
            )
        if (cls.__reduce__, cls.__reduce_ex__) == _plain_reduce:
            # A subclass that pickles like ndarray (np.matrix, np.recarray,
            # most user subclasses): keep the data as a section and the
            # instance attributes in the pickle.
            return rebuild_view, (obj.view(np.ndarray), cls, dict(getattr(obj, "__dict__", {})))
        return NotImplemented  # a subclass with its own pickling: respect it


#: Globals a restricted load resolves: data types and their constructors,
#: none of which can run code, import modules or touch files.
SAFE_GLOBALS = frozenset(
    [("builtins", n) for n in (
        "bool", "bytearray", "bytes", "complex", "dict", "float", "frozenset", "int",
        "list", "range", "set", "slice", "str", "tuple",
    )]
    + [("collections", n) for n in ("OrderedDict", "defaultdict", "deque", "Counter")]
    + [("datetime", n) for n in ("date", "datetime", "time", "timedelta", "timezone")]
    + [("decimal", "Decimal"), ("fractions", "Fraction"), ("uuid", "UUID"),
       ("copyreg", "_reconstructor")]
    + [(m, n) for m in ("numpy", "numpy.core.multiarray", "numpy._core.multiarray")
       for n in ("ndarray", "dtype", "_reconstruct", "scalar")]
    + [(m, "_frombuffer") for m in ("numpy.core.numeric", "numpy._core.numeric")]
    + [("numpy.ma.core", n) for n in ("MaskedArray", "_mareconstruct", "MaskedConstant")]
    + [("numpy", "matrix"), ("numpy.matrixlib.defmatrix", "matrix"),
       ("numpy", "recarray"), ("numpy", "record"), ("numpy.rec", "recarray"),
       ("numpy.rec", "record"), ("numpy", "memmap")]
    + [(_MODULE, "rebuild_view"), (_MODULE, "rebuild_masked")]
    + [("numpy.dtypes", n) for n in dir(np.dtypes) if n.endswith("DType")]
    + [("numpy", t.__name__) for t in np.sctypeDict.values()]
)


def normalize_trusted(trusted):
    """Turn ``load``'s ``trusted`` argument into (restricted, globals, prefixes).

    ``True``: everything is trusted (plain pickle behaviour). ``False``: only
    :data:`SAFE_GLOBALS`. An iterable: :data:`SAFE_GLOBALS` plus its items,
    each a ``(module, name)`` pair or a module name whose whole package is
    trusted (``"sklearn"`` trusts ``sklearn`` and ``sklearn.*``).
    """
    if trusted is True:
        return False, SAFE_GLOBALS, ()
    if trusted is False:
        return True, SAFE_GLOBALS, ()
    if isinstance(trusted, str) or _is_global_pair(trusted):
        items = [trusted]
    else:
        try:
            items = list(trusted)
        except TypeError:
            raise ValueError(
                f"trusted must be True, False or an iterable of module names and "
                f"(module, name) pairs; got {trusted!r}"
            ) from None
    allowed = set(SAFE_GLOBALS)
    prefixes = []
    for item in items:
        if isinstance(item, str) and item:
            prefixes.append(item)
        elif _is_global_pair(item):
            allowed.add(item)
        else:
            raise ValueError(
                f"trusted must be True, False or an iterable of module names and "
                f"(module, name) pairs; got item {item!r}"
            )
    return True, frozenset(allowed), tuple(prefixes)


def _is_global_pair(item):
    return isinstance(item, tuple) and len(item) == 2 and all(isinstance(x, str) for x in item)


class ArrayUnpickler(pickle.Unpickler):
    """C unpickler that fetches stored arrays and can refuse globals.

    Parameters
    ----------
    file : binary file object
        The pickle stream.
    load_array : callable
        ``load_array(index) -> ndarray`` for ``stored_array(index)`` calls.
    restricted : bool
        Refuse globals outside ``allowed`` / ``prefixes``.
    allowed : frozenset of (module, name)
    prefixes : tuple of str
    source : str
        Name of the file, for error messages.
    """

    def __init__(self, file, load_array, restricted=False, allowed=SAFE_GLOBALS,
                 prefixes=(), source=None):
        super().__init__(file)
        self._load_array = load_array
        self._restricted = restricted
        self._allowed = allowed
        self._prefixes = prefixes
        self._source = source

    def find_class(self, module, name):
        if module == _MODULE and name == "stored_array":
            return self._load_array
        if self._restricted and not self._is_allowed(module, name):
            raise UntrustedObjectError(module, name, self._source)
        return super().find_class(module, name)

    def _is_allowed(self, module, name):
        if (module, name) in self._allowed:
            return True
        return any(module == p or module.startswith(p + ".") for p in self._prefixes)

    def persistent_load(self, pid):
        raise CorruptFileError(
            f"{self._source}: unexpected persistent id {pid!r} in the pickle stream"
        )
