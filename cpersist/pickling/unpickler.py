"""The unpickler of :func:`cpersist.load`: fetches stored arrays, can refuse globals.

:class:`ArrayUnpickler` resolves the format's names (:mod:`cpersist.format.names`)
itself: ``stored_array(n)`` becomes the n-th stored array. In restricted mode it
decides on every other global by its name alone, against an allowlist
(:data:`SAFE_GLOBALS` plus what ``trusted`` adds), before importing anything.
"""

import _compat_pickle
import pickle
import sys
import types

from .._runtime.gc import collector_paused
from ..exceptions import CorruptFileError, CpersistError, UntrustedObjectError
from ..format import names
from ..format.limits import DEFAULT as DEFAULT_LIMITS
from .quick import NOT_QUICK, QUICK_UP_TO, quick_load
from .rebuild import BY_NAME, rebuild_jax_numpy

_STORED_ARRAY = names.split(names.STORED_ARRAY)
_REBUILD_JAX = names.split(names.REBUILD_JAX)

_safe = None


def safe_globals():
    """Globals a restricted load resolves (:data:`.allowlist.ALLOWED`): data
    types and their constructors, each called through a builder that checks
    its arguments; none of them can run code, import modules or touch files.

    Also ``SAFE_GLOBALS``. Built on first use: the table and its builders
    cost a trusted load's first call nothing.
    """
    global _safe
    if _safe is None:
        from .allowlist import ALLOWED

        _safe = frozenset(ALLOWED)
    return _safe


def __getattr__(name):
    if name == "SAFE_GLOBALS":
        return safe_globals()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

#: What the C unpickler raises for a malformed stream, or one calling a
#: builtin with bad arguments, beside UnpicklingError and EOFError (which
#: callers report as damage).
STREAM_ERRORS = (UnicodeDecodeError, OverflowError, ValueError, TypeError, MemoryError,
                  KeyError, IndexError, RecursionError, AttributeError, RuntimeError,
                  SyntaxError)
#: Modules whose code a forged stream may call in a trusted load: an error
#: raised there is the stream's, not the object's.
_LIBRARIES = ("numpy", "ast", "fractions", "decimal", "_pydecimal", "datetime", "collections",
              "copyreg", "uuid", "cpersist.")


def caused_by_stream(exc):
    """Whether ``exc``, raised by a trusted load, comes from the stream: raised
    by the unpickler itself, or by library code the stream called, not by an
    object's own code nor by looking up a global (which raises as pickle does)."""
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    while tb is not None:
        frame = tb.tb_frame
        module = frame.f_globals.get("__name__", "")
        if frame.f_code.co_name == "find_class" or not module.startswith(_LIBRARIES):
            return False
        tb = tb.tb_next
    return True


def normalize_trusted(trusted):
    """Turn ``load``'s ``trusted`` argument into (restricted, globals, prefixes).

    ``True``: everything is trusted (plain pickle behaviour). ``False``: only
    :data:`SAFE_GLOBALS`. An iterable: :data:`SAFE_GLOBALS` plus its items,
    each a ``(module, name)`` pair or a module name whose whole package is
    trusted (``"sklearn"`` trusts ``sklearn`` and ``sklearn.*``).
    """
    if trusted is True:
        return False, None, ()
    if trusted is False:
        return True, safe_globals(), ()
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
    allowed = set(safe_globals())
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
    allowed : frozenset of (module, name), optional
        Default :func:`safe_globals`.
    prefixes : tuple of str
    source : str
        Name of the file, for error messages.
    limits : cpersist.Limits, optional
        What a restricted load may cost (default: :class:`~cpersist.Limits`).
    jax_as_numpy : bool
        Rebuild JAX arrays as numpy arrays (jax left unimported).
    buffers : list of memoryview, optional
        The out-of-band buffers of the dump's blocks, in order
        (:func:`.buffer_blocks.read_buffers`), which the stream's
        ``NEXT_BUFFER`` takes one after another; the stream must take them all.
    """

    def __init__(self, file, load_array, restricted=False, allowed=None,
                 prefixes=(), source=None, limits=None, jax_as_numpy=False, dry=False,
                 buffers=None):
        self._buffers = buffers
        self._given = None
        if buffers is not None and not restricted:
            from .buffer_blocks import StreamBuffers

            self._given = StreamBuffers(buffers, source)
        super().__init__(file, buffers=None if self._given is None else self._given.given)
        self._jax_as_numpy = jax_as_numpy
        self._dry = dry
        self._file = file
        self._limits = DEFAULT_LIMITS if limits is None else limits
        self._stream_protocol = 0  # the restricted load's PROTO
        self._load_array = load_array
        self._restricted = restricted
        self._allowed = safe_globals() if restricted and allowed is None else allowed
        self._prefixes = prefixes
        self._source = source
        self._watched = {}

    def find_class(self, module, name):
        if (module, name) == _STORED_ARRAY:
            return self._load_array
        if (module, name) == _REBUILD_JAX and self._jax_as_numpy:
            return rebuild_jax_numpy
        if not self._restricted:
            return BY_NAME.get((module, name)) or super().find_class(module, name)
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
        obj = BY_NAME.get((module, name)) or self._resolve(module, name)
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

    def resolve(self, module, name):
        """``(object, builder)`` of a global a restricted load names: the
        builder of its row in :data:`.allowlist.ALLOWED`, or
        :data:`~.allowlist.TRUSTED` for one the caller trusts."""
        from .allowlist import ALLOWED, TRUSTED
        from .format_builders import build_stored

        obj = self.find_class(module, name)
        if obj is self._load_array:
            return obj, build_stored
        return obj, ALLOWED.get(compat_name(module, name), TRUSTED)

    def _resolve(self, module, name):
        """The object ``module.name`` names, as the C unpickler finds it
        (a dotted name from protocol 4 on)."""
        sys.audit("pickle.find_class", module, name)
        __import__(module)
        obj = sys.modules[module]
        for part in name.split(".") if self._stream_protocol >= 4 else (name,):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise AttributeError(f"Can't get attribute {name!r} on {obj!r}") from None
        return obj

    def _prefix_trusted(self, module):
        return any(module == p or module.startswith(p + ".") for p in self._prefixes)

    def load(self):
        """Unpickle; in restricted mode with :mod:`cpersist.pickling.restricted`'s checks.

        A restricted load runs the stream on a machine that decides on each
        opcode (the C unpickler serves extension codes from a process-wide
        cache, mutates what ``BUILD`` names and trusts numpy's pickled
        states). What it changed of a class or function it resolved is
        undone and reported all the same.
        """
        if not self._restricted:
            try:
                obj = super().load()
                if self._given is not None:
                    self._given.check_used()
                return obj
            except CpersistError:
                raise
            except STREAM_ERRORS as exc:
                if not caused_by_stream(exc):
                    raise  # the object's own error, or a missing global
                raise CorruptFileError(
                    f"{self._source}: damaged pickle stream ({type(exc).__name__}: "
                    f"{str(exc)[:200]})") from exc
        from . import restricted as _restricted
        try:
            # The stream's own buffer where it can be (it is never written
            # to, nor viewed by what the load makes): a copy would be fresh
            # memory, faulted in at every load.
            whole = getattr(self._file, "whole", None)
            data = whole() if whole is not None else bytes(self._file.read())
        except (AttributeError, OSError, ValueError) as exc:
            raise CorruptFileError(f"{self._source}: cannot read the pickle stream "
                                   f"({exc})") from None
        limits = self._limits
        # A small stream naming no global (and taking no buffer)
        if len(data) <= QUICK_UP_TO and self._buffers is None:
            result = quick_load(bytes(data), limits)
            if result is not NOT_QUICK:
                return result
        self._watched = {}
        try:
            # Only a dump with buffer blocks has buffers to pass.
            given = {} if self._buffers is None else {"buffers": self._buffers}
            result = _restricted.run(data, self.resolve, self.persistent_load, limits,
                                     self._source, on_protocol=self._set_protocol, dry=self._dry,
                                     **given)
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

    def _set_protocol(self, protocol):
        self._stream_protocol = protocol

    def _restore_watched(self):
        changed = []
        for obj, where, saved in self._watched.values():
            names = _restore(obj, saved)
            if names:
                changed.append((where, names))
        self._watched = {}
        return changed

    def persistent_load(self, pid):
        # Named by its type only: the repr of what a stream gives (lists
        # holding each other thousands of times) can take without end.
        from .brief import brief

        raise CorruptFileError(
            f"{self._source}: unexpected persistent id ({brief(pid)}) in the pickle stream"
        )


def unpickle(unpickler, pickled, name):
    """``unpickler.load()``, the collector paused (a stream makes many objects
    and frees none), then ``pickled`` closed; a stream that is no pickle
    stream is reported as damaged, naming the file ``name``."""
    try:
        with collector_paused():
            return unpickler.load()
    except CpersistError:
        raise
    except (pickle.UnpicklingError, EOFError) as exc:
        raise CorruptFileError(f"{name}: damaged pickle stream ({exc})") from None
    finally:
        pickled.close()  # nothing unpickled views it: arrays' bytes were copied out
