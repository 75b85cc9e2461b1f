"""Objects with nothing to store as sections: a result cached by
``joblib.Memory``, a message, a small model's settings.

``dump`` writes them as compact dumps (:mod:`.container.compact`: the
pickle stream behind a fixed header, no JSON index) unless compressing the
stream saves more than an index costs, or the stream holds arrays; ``load``
of a path holding one reads it in one call and unpickles it, without
setting up the container reader.
An object is tried this way only while its pickle stream stays under
:data:`SMALL_STREAM` bytes and no array needs a section of its own: the
first that does (or the stream's growing past the limit) stops pickling,
and the object is written the general way.
"""

import io
import os
import pickle
import stat
import threading

from ..container import VERBATIM, ContainerWriter
from ..container.compact import OVERHEAD, compact_dump, compact_stream
from ..container.encode import encode_chunk
from ..exceptions import CorruptFileError
from .pickler import ArrayPickler

#: Largest pickle stream written as a compact dump: past it, the general
#: writer's index costs little beside the stream.
SMALL_STREAM = 64 << 10
#: About what the JSON index and section records of a one-section dump add
#: to a compact dump's fixed bytes: a compressed stream is written the
#: general way only when compressing saves more than this.
INDEX_BYTES = 320


class _NotSmall(Exception):
    """Pickling met an array for a section, or passed :data:`SMALL_STREAM`."""


class _BoundedBuffer(io.BytesIO):
    def __init__(self, limit):
        super().__init__()
        self._limit = limit

    def write(self, data):
        if self.tell() + memoryview(data).nbytes > self._limit:
            raise _NotSmall
        return super().write(data)


def _refuse(arr, favour_speed=False):
    raise _NotSmall


def pickle_within(obj, protocol, limit, inline_below, fortran_as_c=False):
    """``(BytesIO or None, pickler)``: ``obj`` pickled with every array
    inside the stream, or None where the stream would pass ``limit`` bytes
    or holds an array of ``inline_below`` bytes or more (which would need a
    section of its own)."""
    stream = _BoundedBuffer(limit)
    pickler = ArrayPickler(stream, protocol, _refuse, inline_below, fortran_as_c)
    try:
        pickler.dump(obj)
    except _NotSmall:
        return None, pickler
    return stream, pickler


#: After a longer stream, a kept pickler's memo table is replaced by a new
#: one rather than cleared (here and in :func:`cpersist.dumps`): a table
#: keeps the size the largest object needed, and clearing walks all of it,
#: at every later call (after a dict of 100 keys, as long as pickling a small
#: object takes).
RESET_MEMO_ABOVE = 256
#: A kept pickler that wrote a longer stream is dropped: the C pickler sizes
#: the buffer it starts every later stream in by the longest it wrote.
KEEP_PICKLER_BELOW = 1 << 16


def forget_objects(pickler, stream_length):
    """Empty ``pickler``'s memo after a stream of ``stream_length`` bytes."""
    if stream_length > RESET_MEMO_ABOVE:
        pickler.memo = {}
    else:
        pickler.clear_memo()


class _KeptPickler:
    """A thread's pickler for small objects and its buffer, kept between
    dumps: making them costs more than pickling a small object does."""

    __slots__ = ("buffer", "pickler", "busy")

    def __init__(self, protocol, inline_below):
        self.buffer = _BoundedBuffer(SMALL_STREAM)
        self.pickler = ArrayPickler(self.buffer, protocol, _refuse, inline_below)
        self.busy = False

    def reset(self, stream_length):
        self.buffer.seek(0)
        self.buffer.truncate()
        pickler = self.pickler
        forget_objects(pickler, stream_length)
        pickler.forget()
        pickler.inlined = 0
        pickler.saw_fortran = False
        self.busy = False


_kept = threading.local()


def _kept_pickler(key):
    """This thread's kept pickler for ``key`` (protocol, inline_below),
    made if there is none; a new one, not kept, while that one is in use
    (an object whose pickling dumps another)."""
    picklers = getattr(_kept, "picklers", None)
    if picklers is None:
        picklers = _kept.picklers = {}
    kept = picklers.get(key)
    if kept is None:
        kept = picklers[key] = _KeptPickler(*key)
    elif kept.busy:
        return _KeptPickler(*key)
    return kept


def pickle_small(obj, protocol, inline_below):
    """``(pickle stream, arrays inlined)`` of ``obj`` if it is small and
    holds no array of ``inline_below`` bytes or more (which would need a
    section), else None."""
    key = protocol, inline_below
    kept = _kept_pickler(key)
    kept.busy = True
    try:
        kept.pickler.dump(obj)
    except BaseException as exc:
        # Not reused: a pickler stopped midway may hold state of its own.
        _drop(key, kept)
        if isinstance(exc, _NotSmall):
            return None
        raise
    stream = kept.buffer.getvalue()
    small = stream, kept.pickler.inlined
    if len(stream) > KEEP_PICKLER_BELOW:
        _drop(key, kept)
    else:
        kept.reset(len(stream))
    return small


def _drop(key, kept):
    """Stop keeping ``kept``, if it is the one kept for ``key``."""
    if _kept.picklers.get(key) is kept:
        del _kept.picklers[key]


def small_dump(obj, name, codec, protocol, inline_below, finish):
    """The bytes of the whole dump of ``obj`` if it is small (see the
    module), else None. ``finish(writer, encoded chunks, codec, protocol)``
    writes a root section and the index, as for any dump."""
    small = pickle_small(obj, protocol, inline_below)
    if small is None:
        return None
    pickled, inlined = small
    if codec is not None:
        stored, digest, flag = encode_chunk(codec, pickled)
        # Arrays kept in a compressed stream are the general way too: the
        # file says it is compressed, so a load asking to map them says
        # they cannot be.
        if inlined or (flag != VERBATIM and len(stored) + INDEX_BYTES < len(pickled)):
            out = io.BytesIO()
            finish(ContainerWriter(out, 1, name), [(stored, len(pickled), digest, flag)],
                   codec, protocol)
            return out.getvalue()
    return compact_dump(pickled)


#: Largest file :func:`load_compact_file` reads.
_LARGEST = SMALL_STREAM + OVERHEAD
#: What :func:`load_compact_file` returns for a file that is not one.
NOT_COMPACT = object()


def load_compact_file(path, unpickle=pickle.loads):
    """The object of the compact dump at the local path ``path``, or
    :data:`NOT_COMPACT` when the file is anything else (left to the general
    reader, which says what is wrong with a damaged one)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return NOT_COMPACT  # the general reader raises the error
    # A regular file only: opening a FIFO here would take its writer's data.
    if not stat.S_ISREG(info.st_mode) or not OVERHEAD < info.st_size <= _LARGEST:
        return NOT_COMPACT
    try:
        with open(path, "rb", buffering=0) as file:
            data = file.read(_LARGEST + 1)
    except OSError:
        return NOT_COMPACT
    stream = compact_stream(data)
    if stream is None:
        return NOT_COMPACT
    try:
        return unpickle(stream)
    except (pickle.UnpicklingError, EOFError) as exc:
        raise CorruptFileError(f"{os.fsdecode(path)}: damaged pickle stream ({exc})") from None

