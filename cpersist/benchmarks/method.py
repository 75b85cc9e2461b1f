"""The storage-method interface of the benchmark (:class:`Method`),
implemented by :mod:`.methods`, :mod:`.peers_classic` and :mod:`.peers`.
Methods are plain picklable objects sent to the measurement processes."""

import numpy as np

#: The key of a lone array in a format that stores a dict of arrays.
SINGLE_KEY = "__array__"


def is_plain_array(obj):
    return isinstance(obj, np.ndarray) and not obj.dtype.hasobject


def is_dict_of_arrays(obj):
    """A non-empty dict of non-empty str keys to plain arrays."""
    return (isinstance(obj, dict) and len(obj) > 0 and all(isinstance(k, str) and k for k in obj)
            and all(is_plain_array(v) for v in obj.values()))


def missing(module, package=None):
    """None when ``module`` imports, else the reason a method is ``n/a``."""
    import importlib
    try:
        importlib.import_module(module)
    except ImportError:
        return f"{package or module} not installed"
    return None


def as_dict(obj):
    """``obj``, an array or a dict of arrays, as a dict of arrays (a lone
    array under :data:`SINGLE_KEY`)."""
    return {SINGLE_KEY: obj} if isinstance(obj, np.ndarray) else obj


def from_dict(arrays):
    """What :func:`as_dict` was given: the lone array back, or the dict."""
    return arrays[SINGLE_KEY] if list(arrays) == [SINGLE_KEY] else arrays


#: Numeric kinds every array format stores as such (no str, object,
#: datetime or void).
NUMERIC = "biufc"


def array_reason(obj, lib, kinds=NUMERIC, allow_dict=True, allow_records=False):
    """None when ``obj`` is an array (or dict of arrays) ``lib`` stores, else why not."""
    def ok(dt):
        return allow_records if dt.fields is not None else dt.kind in kinds

    if isinstance(obj, np.ndarray):
        return None if ok(obj.dtype) else f"{lib} cannot hold dtype {obj.dtype}"
    if allow_dict and is_dict_of_arrays(obj):
        bad = [(k, v.dtype) for k, v in obj.items() if not ok(v.dtype)]
        if bad:
            return f"{lib} cannot hold dtype {bad[0][1]} (key {bad[0][0]!r})"
        return None
    what = "arrays or dicts of arrays" if allow_dict else "one array"
    return f"{lib} stores {what}, not {type(obj).__name__}"


class Method:
    """Base class of a storage method; each sets the attributes below (as
    keywords of its class statement, or in ``__init__`` where they vary)."""

    #: Unique id, used by ``--methods`` and in the CSV ``method`` column.
    name = "?"
    #: Library (``cpersist``, ``tables``, ``joblib`` ...), for colours.
    family = "?"
    #: Compressor name, ``"none"`` when raw.
    codec = "none"
    #: File name suffix (some libraries insist on theirs).
    suffix = ".bin"
    #: True when the read memory-maps and the benchmark must touch every
    #: byte to pay the real cost.
    mmap = False
    #: Levels the method can run at, or the one it runs at whatever the grid.
    supported = (0,)
    fixed_level = None
    #: Anything a reader of the CSV must know (goes to the ``notes`` column).
    note = ""
    #: The modules it imports: each a name, or ``(name, what the reason
    #: calls it)``; :meth:`available` says which is missing.
    needs = ()
    #: cpersist's ``n_threads`` (None: all CPUs).
    threads = None

    def __init_subclass__(cls, **attributes):
        """A method's attributes may be given as keywords of its class statement."""
        super().__init_subclass__()
        for key, value in attributes.items():
            assert hasattr(Method, key), f"{key} is no attribute of a Method"
            setattr(cls, key, value)

    def levels(self, grid):
        """Levels to run for the generic ``grid``.

        Methods with a single fixed level run at it whatever the grid; the
        others run at the grid levels they support."""
        if self.fixed_level is not None:
            return [self.fixed_level]
        return [lv for lv in grid if lv in self.supported]

    def available(self):
        """None when every library of :attr:`needs` imports, else why not."""
        for need in self.needs:
            why = missing(*((need,) if isinstance(need, str) else need))
            if why:
                return why
        return None

    def why_not(self, obj):
        """None when ``obj`` can be stored, else the reason."""
        return None

    def write(self, obj, path, level):  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, path):  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"
