"""``dumps`` and ``loads``: a cpersist dump as a ``bytes`` object, and the raw
arrays of one loaded as views of the buffer that holds it."""

import inspect
import io
import pickle
import threading

from ._args import (check_chunk_size, check_compress, check_limits, check_n_threads,
                    check_protocol, check_trusted)
from ._runtime.threads import default_n_threads
from .container.targets import BytesTarget
from .container import MAX_CHUNK_SIZE, VERBATIM, ContainerWriter, checksum
from .container.compact import OVERHEAD as COMPACT_OVERHEAD
from .container.compact import (END_MAGIC, compact_dump, compact_stream, small_bytes_stream,
                                stream_checksum)
from .container.sources import MemorySource
from .exceptions import CorruptFileError
from .pickling.array_pickler import ArrayPickler
from .pickling.dump import RESET_MEMO_ABOVE, write_dump
from .pickling.quick import BYTE_CLASSES as QUICK_BYTE_CLASSES
from .pickling.quick import NO_FLOOD_DUMP as QUICK_NO_FLOOD_DUMP
from .pickling.quick import (NOT_QUICK, QUICK_UP_TO, compact_quick_load, keep_framed_checks,
                             quick_load)
from .pickling.quick import framed_checks as quick_framed_checks
from .pickling.read import load_source
from .pickling.unpickler import STREAM_ERRORS, caused_by_stream
from .pickling.write import PICKLE_CHUNK_SIZE, array_store, finish_dump

#: How the buffer is named in messages.
NAME = "<bytes>"
_unpickle = pickle.loads
#: Sizes of compact dumps :data:`quick_framed_checks` may hold the checks of.
_FRAMED_SIZES = len(quick_framed_checks)
_HIGHEST = check_protocol(None)
_join = b"".join
#: Stands for "no further positional argument" in :func:`dumps` and :func:`loads`.
_KEYWORDS_ONLY = object()
_DEFAULT_CHUNK = check_chunk_size(None)
#: A kept pickler that wrote a longer stream is dropped: the C pickler sizes
#: the buffer it starts every later stream in by the longest it wrote.
KEEP_PICKLER_BELOW = 1 << 16
assert KEEP_PICKLER_BELOW <= MAX_CHUNK_SIZE


def dumps(obj, compress=0, _keywords_only=_KEYWORDS_ONLY, protocol=None, chunk_size=None,
          n_threads=None):
    """Return ``obj`` as the bytes of a cpersist dump.

    The bytes are a complete cpersist dump: :func:`loads` reads them back,
    and so does :func:`load` once they are saved or from an
    :class:`io.BytesIO`. An object without arrays is written as a compact
    dump, with no JSON index (see the format specification).

    Parameters
    ----------
    obj : object
        Anything picklable; its numpy arrays are stored as in :func:`dump`.
    compress : bool, int, str or tuple, default 0
        As for :func:`dump`. Raw (``0``) dumps load as views of the bytes.
    protocol : int, optional
        Pickle protocol, 2 to 5; default :data:`pickle.HIGHEST_PROTOCOL`.
    chunk_size : int, optional
        Bytes of array data per compressed chunk (default 4 MiB).
    n_threads : int, optional
        Threads for compression and checksums; default: all available CPUs.

    Returns
    -------
    bytes

    Raises
    ------
    ValueError
        For a bad ``compress``, ``protocol``, ``chunk_size`` or ``n_threads``.
    pickle.PicklingError, TypeError, AttributeError
        If ``obj`` holds something that cannot be pickled.

    Examples
    --------
    >>> import numpy as np, cpersist
    >>> data = cpersist.dumps({"x": np.arange(3)})
    >>> cpersist.loads(data)["x"]
    array([0, 1, 2])
    """
    if (type(compress) is not int or compress or protocol is not None or chunk_size is not None
            or n_threads is not None or _keywords_only is not _KEYWORDS_ONLY):
        if _keywords_only is not _KEYWORDS_ONLY:
            raise TypeError("dumps() takes 2 positional arguments (obj, compress); pass "
                            "protocol, chunk_size and n_threads by keyword")
        codec = check_compress(compress)
        protocol = check_protocol(protocol)
        chunk_size = check_chunk_size(chunk_size)
        if n_threads is not None:
            check_n_threads(n_threads)
        if codec is not None:
            out = BytesTarget(NAME)
            write_dump(obj, out, codec, protocol, chunk_size, n_threads)
            return out.getvalue()
    else:
        # The defaults, known good: a small object's dumps costs little
        # more than checking its arguments would.
        protocol, chunk_size = _HIGHEST, _DEFAULT_CHUNK
    # Raw: the arrays found are kept aside and written once pickling is
    # over, so that an object without arrays never sets up a writer.
    try:
        kept = _kept.picklers[protocol]
    except (AttributeError, KeyError):
        kept = _kept_pickler(protocol)
    if kept.busy:  # a dumps inside a dumps
        kept = _kept_pickler(protocol)
    kept.busy = True
    try:
        kept.dump(obj)
    except BaseException:
        # Not reused: a pickler stopped midway may hold state of its own.
        _kept.picklers.pop(protocol, None)
        kept.clear_memo()
        raise
    pieces = kept.pieces
    # Joined at once: a piece may be a bytearray of the object itself. (A
    # single bytes piece is returned as it is, not copied.)
    pickled = _join(pieces)
    pieces.clear()
    n = len(pickled)
    # forget_objects(kept.pickler, n), written out: a call costs a small
    # object's dumps more than the test.
    if n > RESET_MEMO_ABOVE:
        kept.pickler.memo = {}
    else:
        kept.clear_memo()
    arrays = kept.arrays
    if not arrays and n <= KEEP_PICKLER_BELOW:  # the usual case, first
        kept.busy = False
        return compact_dump(pickled)
    if arrays:
        kept.pickler.forget()
        arrays = arrays[:]
        kept.arrays.clear()
    kept.busy = False
    if n > KEEP_PICKLER_BELOW:
        _kept.picklers.pop(protocol, None)  # see KEEP_PICKLER_BELOW
    if not arrays and n <= MAX_CHUNK_SIZE:
        return compact_dump(pickled)
    out = io.BytesIO()
    writer = ContainerWriter(out, (n_threads or default_n_threads()) if arrays else 1, NAME)
    store = array_store(writer, None, chunk_size)
    for arr in arrays:
        store(arr)
    finish_dump(writer, _raw_chunks(memoryview(pickled)), None, protocol)
    return out.getvalue()


class _KeptPickler:
    """A pickler kept by a thread between ``dumps`` calls (making one costs
    several times what pickling a small object does), writing into a list:
    the C pickler calls ``write`` once per frame, here ``list.append``.
    A plain object holding the pickler's methods: attributes of a subclass
    of the C pickler are slower to reach, at every call."""

    __slots__ = ("pieces", "arrays", "pickler", "dump", "clear_memo", "busy")

    def __init__(self, protocol):
        self.pieces = []
        self.arrays = []
        # No buffer blocks: every array is a section of its own (loads views
        # it in the bytes), none is kept in the stream.
        self.pickler = ArrayPickler(_Sink(self.pieces.append), protocol, self._defer)
        self.dump = self.pickler.dump
        self.clear_memo = self.pickler.clear_memo
        self.busy = False

    def _defer(self, arr, favour_speed=False):  # raw: nothing to favour
        self.arrays.append(arr)
        return len(self.arrays) - 1


class _Sink:
    __slots__ = ("write",)

    def __init__(self, write):
        self.write = write


_kept = threading.local()


def _kept_pickler(protocol):
    """This thread's kept pickler for ``protocol``, made if there is none;
    a new one, not kept, while that one is in use."""
    picklers = getattr(_kept, "picklers", None)
    if picklers is None:
        picklers = _kept.picklers = {}
    kept = picklers.get(protocol)
    if kept is None:
        kept = picklers[protocol] = _KeptPickler(protocol)
    return _KeptPickler(protocol) if kept.busy else kept


def _raw_chunks(pickled):
    """The pickle stream as the raw chunks of the root section."""
    return [(chunk, len(chunk), checksum(chunk), VERBATIM)
            for chunk in (pickled[i:i + PICKLE_CHUNK_SIZE]
                          for i in range(0, len(pickled), PICKLE_CHUNK_SIZE))]


#: Largest compact dump whose stream a restricted loads may take the quick path.
_QUICK_DUMP = COMPACT_OVERHEAD + QUICK_UP_TO


def loads(data, _keywords_only=_KEYWORDS_ONLY, trusted=True, verify=True, n_threads=None,
          copy=False, limits=None, jax_as_numpy=False):
    """Load an object from the bytes of one cpersist dump.

    Parameters
    ----------
    data : bytes-like
        ``bytes``, ``bytearray``, ``memoryview``, a contiguous numpy
        ``uint8`` array, an :class:`mmap.mmap`: anything exporting one
        contiguous buffer, holding exactly one dump.
    trusted : bool or iterable, default True
        As for :func:`load`: ``False`` or an allowlist restricts the
        globals the pickle stream may name.
    verify : bool, default True
        Check the checksums of everything read, the arrays viewed in place
        included.
    n_threads : int, optional
        Threads for decompression; default: all available CPUs.
    copy : bool, default False
        ``False``: raw arrays are views of ``data``'s buffer, no copy is
        made; they keep the buffer alive, are read-only when it is, and see
        any change made to it. ``True``: every array owns its memory.
        Compressed arrays always own theirs.
    limits : cpersist.Limits or dict, optional
        What a restricted load may cost, as for :func:`load`.
    jax_as_numpy : bool, default False
        Give JAX arrays back as numpy arrays, as for :func:`load`.

    Returns
    -------
    object

    Raises
    ------
    CorruptFileError
        If ``data`` is not one whole cpersist dump (bytes after it
        included), or is truncated or damaged.
    UnsupportedVersionError
        If a newer, incompatible version of the format wrote it.
    UntrustedObjectError
        In a restricted load, for a global outside the allowlist.
    TypeError
        If ``data`` is not a contiguous bytes-like object.

    Examples
    --------
    >>> import numpy as np, cpersist
    >>> data = cpersist.dumps({"x": np.arange(3.0)})
    >>> x = cpersist.loads(data)["x"]
    >>> x.flags.writeable, x.base is not None    # a read-only view of data
    (False, True)
    >>> cpersist.loads(data, copy=True)["x"].flags.owndata
    True
    """
    # A compact dump (an object without arrays): its pickle stream is
    # checked and unpickled here, without a reader; its checksums are
    # checked whatever ``verify`` says (they are how it is recognised, at the
    # cost of one pass over a stream unpickling reads anyway). Anything
    # else, or damage, goes the long way, which says what is wrong.
    # A small one in ``bytes``: compact_stream(data), specialised for speed
    # (tests/test_kept_pickler.py checks that they agree).
    if (type(data) is bytes and n_threads is None and not jax_as_numpy
            and _keywords_only is _KEYWORDS_ONLY):
        if trusted is True:
            # A stream in one frame of protocol 5, as dumps writes it: its
            # dump's bytes compared with those of a dump of its size, as the
            # restricted load's quick path does (quicker than
            # small_bytes_stream, which does the same for any stream).
            stream = None
            if (size := len(data)) < _FRAMED_SIZES:
                head, after, split, before_checksum = quick_framed_checks[size]
                if head <= data < after:
                    framed, tail, checksum, end_magic = split(data)
                    if (tail == before_checksum and end_magic == END_MAGIC
                            and checksum == stream_checksum(framed)):
                        stream = framed
                elif split is None:
                    keep_framed_checks(size)
            if stream is None:
                stream = small_bytes_stream(data)
            if stream is not None:
                try:
                    return _unpickle(stream)
                except _STREAM_FAILURES as exc:
                    _raise_damaged(exc)
        elif trusted is False:
            # A restricted load of a small compact dump: its stream may take
            # the quick path (cpersist.pickling.quick), else the general way.
            if limits is None:
                # compact_quick_load(data), its commonest case written out (a
                # call costs a tenth of what a small object's load may): a
                # short stream in one frame of protocol 5, every byte of it of
                # a plain class. Anything else, or a failure, is left to it.
                if (size := len(data)) < QUICK_NO_FLOOD_DUMP:
                    head, after, split, before_checksum = quick_framed_checks[size]
                    if head <= data < after:
                        stream, tail, checksum, end_magic = split(data)
                        if (tail == before_checksum and end_magic == END_MAGIC
                                and checksum == stream_checksum(stream)
                                and stream.translate(QUICK_BYTE_CLASSES).isascii()):
                            try:
                                return _unpickle(stream)
                            except Exception:  # noqa: BLE001 - left to compact_quick_load
                                pass
                obj = compact_quick_load(data)
                if obj is not NOT_QUICK:
                    return obj
            elif len(data) <= _QUICK_DUMP:
                stream = small_bytes_stream(data)
                if stream is not None:
                    obj = quick_load(stream, check_limits(limits))
                    if obj is not NOT_QUICK:
                        return obj
    elif _keywords_only is not _KEYWORDS_ONLY:
        raise TypeError("loads() takes 1 positional argument (data); pass trusted, verify, "
                        "n_threads, copy, limits and jax_as_numpy by keyword")
    if n_threads is not None:
        check_n_threads(n_threads)
    if trusted is True and not jax_as_numpy:
        if type(data) is not bytes:
            data = _byte_view(data)
        stream = compact_stream(data)  # a large stream is viewed, not copied
        if stream is not None:
            try:
                return _unpickle(stream)
            except _STREAM_FAILURES as exc:
                _raise_damaged(exc)
    source = MemorySource(_byte_view(data), NAME)
    restricted, allowed, prefixes = check_trusted(trusted)
    return load_source(source, mmap_mode=None, restricted=restricted, allowed=allowed,
                 prefixes=prefixes, verify=verify, n_threads=n_threads or default_n_threads(),
                 whole=True, views=not copy, limits=check_limits(limits),
                 jax_as_numpy=jax_as_numpy, own=copy)


def _keywords_only_after(function, n_positional):
    """Give ``function`` the signature it has in effect: its parameters
    after the first ``n_positional`` and ``_keywords_only`` are keyword-only.

    ``dumps`` and ``loads`` are declared with positional parameters, and
    refuse an argument given to ``_keywords_only``, for speed: CPython calls
    a function with keyword-only parameters by its general path, whose cost
    a tiny object's dump or load notices."""
    signature = inspect.signature(function)
    parameters = list(signature.parameters.values())
    assert parameters[n_positional].name == "_keywords_only"
    function.__signature__ = signature.replace(parameters=[
        *parameters[:n_positional],
        *(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in parameters[n_positional + 1:])])


_keywords_only_after(dumps, 2)
_keywords_only_after(loads, 1)


_STREAM_FAILURES = (pickle.UnpicklingError, EOFError, *STREAM_ERRORS)


def _raise_damaged(exc):
    """Raise what ``exc``, raised unpickling a compact dump's stream, means:
    a CorruptFileError, or ``exc`` itself where the object raised it."""
    if isinstance(exc, (pickle.UnpicklingError, EOFError)):
        raise CorruptFileError(f"{NAME}: damaged pickle stream ({exc})") from None
    if not caused_by_stream(exc):
        raise exc  # the object's own error, or a missing global
    raise CorruptFileError(f"{NAME}: damaged pickle stream "
                           f"({type(exc).__name__}: {str(exc)[:200]})") from exc


def _byte_view(data):
    """``data`` as a memoryview of bytes, or a TypeError saying why not."""
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(
            f"data must be a bytes-like object (bytes, bytearray, memoryview, "
            f"a numpy uint8 array, an mmap), got {type(data).__name__}"
        ) from None
    if not view.c_contiguous:
        raise TypeError("data must be a contiguous buffer; this memoryview is not")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view
