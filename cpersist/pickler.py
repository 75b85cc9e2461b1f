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

import _compat_pickle
import copyreg
import io
import pickle
import pickletools
import types

import numpy as np

from .arrays import from_inline, is_plain_data, to_inline
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


def inline_array(data, dtype, shape, order):
    """Rebuild a small array stored inside the pickle stream."""
    try:
        return from_inline(data, dtype, shape, order)
    except (TypeError, ValueError) as exc:
        raise pickle.UnpicklingError(f"bad inline array: {exc}") from None


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
_masked_reduce = (np.ma.MaskedArray.__reduce__, np.ma.MaskedArray.__reduce_ex__)


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
    inline_below : int
        Arrays of fewer bytes are kept inside the pickle stream instead: a
        section costs a fixed amount of work and index space, and in a
        compressed file many small arrays compress better together.
    """

    def __init__(self, file, protocol, store, inline_below=0):
        super().__init__(file, protocol)
        self._protocol = protocol
        self._store = store
        self._inline_below = inline_below

    def _reduce_plain(self, arr):
        if arr.nbytes < self._inline_below:
            data, order = to_inline(arr, self._protocol)
            return inline_array, (data, arr.dtype, arr.shape, order)
        return stored_array, (self._store(arr),)

    def reducer_override(self, obj):
        cls = type(obj)
        if cls is np.ndarray or cls is np.memmap:
            if not is_plain_data(obj):
                return NotImplemented  # items are Python objects: pickle them
            return self._reduce_plain(obj if cls is np.ndarray else obj.view(np.ndarray))
        if not isinstance(obj, np.ndarray) or not is_plain_data(obj):
            return NotImplemented
        if isinstance(obj, np.ma.MaskedArray):
            if (cls.__reduce__, cls.__reduce_ex__) != _masked_reduce:
                # A subclass with its own pickling, e.g. the np.ma.masked
                # singleton (MaskedConstant), which must load as itself.
                return NotImplemented
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
    # numpy >= 2 sets MaskedArray.__module__ to "numpy.ma", so pickle names it so.
    + [("numpy.ma", "MaskedArray")]
    + [("numpy", "matrix"), ("numpy.matrixlib.defmatrix", "matrix"),
       ("numpy", "recarray"), ("numpy", "record"), ("numpy.rec", "recarray"),
       ("numpy.rec", "record")]
    # Not numpy.memmap: called through REDUCE it creates or truncates any file
    # (memmaps are stored as plain arrays, so no cpersist file needs it).
    + [(_MODULE, "rebuild_view"), (_MODULE, "rebuild_masked"), (_MODULE, "inline_array")]
    + [("numpy.dtypes", n) for n in dir(np.dtypes) if n.endswith("DType")]
    + [("numpy", t.__name__) for t in np.sctypeDict.values()]
)


def _latin1_encode(obj, encoding="utf-8", errors="strict"):
    """What restricted loads call for ``_codecs.encode``.

    Protocols 0-2 pickle ``bytes`` as ``_codecs.encode(text, "latin1")``; the
    real ``encode`` accepts any codec name, and codec lookups import modules.
    """
    if type(obj) is not str or encoding not in ("latin1", "latin-1") or errors != "strict":
        raise pickle.UnpicklingError(
            f"_codecs.encode({type(obj).__name__}, {encoding!r}) refused: restricted "
            f"loads only rebuild latin1-encoded bytes"
        )
    return obj.encode("latin-1")


#: Globals a restricted load resolves to a narrower safe function.
SAFE_SUBSTITUTES = {("_codecs", "encode"): _latin1_encode}

#: ``type.__flags__`` bit of types whose attributes cannot be set.
_IMMUTABLE_TYPE = 1 << 8
_EXT_OPCODES = frozenset(("EXT1", "EXT2", "EXT4"))


def compat_name(module, name):
    """Python 2 names mapped to Python 3 ones, as the unpickler does for
    protocols 0-2 (``__builtin__.set`` is ``builtins.set``)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


def _is_dunder(part):
    return len(part) > 4 and part.startswith("__") and part.endswith("__")


def _snapshot(obj):
    """The settable state of a class or function a pickle could alter."""
    if isinstance(obj, type):
        if obj.__flags__ & _IMMUTABLE_TYPE:
            return None
        return dict(vars(obj))
    if isinstance(obj, types.FunctionType):
        return {"__dict__": dict(vars(obj)), "__defaults__": obj.__defaults__,
                "__kwdefaults__": obj.__kwdefaults__, "__code__": obj.__code__}
    return None


def _restore(obj, saved):
    """Undo changes to ``obj`` since ``saved``; return the changed names."""
    if isinstance(obj, type):
        now = dict(vars(obj))
        changed = sorted(k for k in set(now) | set(saved) if now.get(k, _MISSING)
                         is not saved.get(k, _MISSING))
        for key in changed:
            if key in saved:
                setattr(obj, key, saved[key])
            else:
                delattr(obj, key)
        return changed
    changed = []
    now = vars(obj)
    # Identity only: == on stored values (numpy arrays) may not give a bool.
    if len(now) != len(saved["__dict__"]) or any(
        now.get(k, _MISSING) is not v for k, v in saved["__dict__"].items()
    ):
        changed.append("__dict__")
        vars(obj).clear()
        vars(obj).update(saved["__dict__"])
    for key in ("__defaults__", "__kwdefaults__", "__code__"):
        if getattr(obj, key) is not saved[key]:
            changed.append(key)
            setattr(obj, key, saved[key])
    return changed


_MISSING = object()


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
        self._file = file
        self._load_array = load_array
        self._restricted = restricted
        self._allowed = allowed
        self._prefixes = prefixes
        self._source = source
        self._watched = {}

    def find_class(self, module, name):
        if module == _MODULE and name == "stored_array":
            return self._load_array
        if not self._restricted:
            return super().find_class(module, name)
        # Restricted: decide on the name alone, before importing anything.
        module, name = compat_name(module, name)
        if (module, name) in SAFE_SUBSTITUTES:
            return SAFE_SUBSTITUTES[module, name]
        exact = (module, name) in self._allowed
        if not exact and not (
            self._prefix_trusted(module)
            and not any(_is_dunder(part) for part in name.split("."))
        ):
            raise UntrustedObjectError(module, name, self._source)
        obj = super().find_class(module, name)
        if not exact:
            # A trusted package also exposes what it imports (``os``,
            # ``eval``...): only accept objects it defines.
            owner = getattr(obj, "__module__", None)
            if isinstance(obj, types.ModuleType) or not (
                isinstance(owner, str) and self._prefix_trusted(owner)
            ):
                raise UntrustedObjectError(
                    module, name, self._source,
                    reason=f"it resolves to {type(obj).__name__} defined in {owner!r}, "
                           f"outside the trusted modules",
                )
        if id(obj) not in self._watched:
            saved = _snapshot(obj)
            if saved is not None:
                self._watched[id(obj)] = (obj, f"{module}.{name}", saved)
        return obj

    def _prefix_trusted(self, module):
        return any(module == p or module.startswith(p + ".") for p in self._prefixes)

    def load(self):
        """Unpickle; in restricted mode also guard extension codes and globals."""
        if not self._restricted:
            return super().load()
        self._check_extensions()
        self._watched = {}
        try:
            result = super().load()
        except ValueError as exc:
            self._restore_watched()
            if "extension code" in str(exc):
                raise CorruptFileError(f"{self._source}: damaged pickle stream ({exc})") from None
            raise
        except BaseException:
            self._restore_watched()
            raise
        changed = self._restore_watched()
        if changed:
            where, names = changed[0]
            module, _, name = where.rpartition(".")
            raise UntrustedObjectError(
                module, name, self._source,
                reason=f"the pickle stream tried to set {', '.join(names)} on it "
                       f"(undone)",
            )
        return result

    def _restore_watched(self):
        changed = []
        for obj, where, saved in self._watched.values():
            names = _restore(obj, saved)
            if names:
                changed.append((where, names))
        self._watched = {}
        return changed

    def _check_extensions(self):
        """Refuse copyreg extension codes when some are registered.

        The C unpickler resolves an extension code from a process-wide cache
        without calling ``find_class`` once any load resolved it, so a
        restricted load cannot let them through. With no code registered
        they fail anyway ("unregistered extension code").
        """
        if not (copyreg._inverted_registry or copyreg._extension_cache):
            return
        try:
            pos = self._file.tell()
            data = self._file.read()
            self._file.seek(pos)
        except (AttributeError, OSError, ValueError):
            raise UntrustedObjectError(
                "copyreg", "extension codes", self._source,
                reason="extension codes are registered in this process and the "
                       "stream cannot be scanned for them",
            ) from None
        try:
            for opcode, arg, _ in pickletools.genops(io.BytesIO(data)):
                if opcode.name in _EXT_OPCODES:
                    module, name = copyreg._inverted_registry.get(arg, ("copyreg", f"ext{arg}"))
                    raise UntrustedObjectError(
                        module, name, self._source,
                        reason=f"it is named by copyreg extension code {arg}, which "
                               f"restricted loads refuse",
                    )
        except ValueError:
            pass  # a malformed stream: the unpickler reports it

    def persistent_load(self, pid):
        raise CorruptFileError(
            f"{self._source}: unexpected persistent id {pid!r} in the pickle stream"
        )
