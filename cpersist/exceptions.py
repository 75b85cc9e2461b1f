"""Exception classes raised by cpersist.

Every error cpersist raises on purpose derives from :class:`CpersistError`, so
``except cpersist.CpersistError`` catches all of them.
"""

import pickle


class CpersistError(Exception):
    """Base class of every error raised by cpersist."""


class CorruptFileError(CpersistError, ValueError):
    """The input is not a cpersist file, or it is truncated or damaged.

    The message names the file and what is wrong with it.
    """


class UnsupportedVersionError(CorruptFileError):
    """The file was written by a newer, incompatible major format version."""


class RemoteStorageError(CpersistError, OSError):
    """A request to remote storage failed: it timed out, the connection
    broke, the server refused it or the transfer was cut short.

    The message names the URL. A missing object raises
    :class:`FileNotFoundError` and a denied request :class:`PermissionError`
    instead, both naming the URL.
    """


class UntrustedObjectError(CpersistError):
    """A restricted load met a global that is not in its allowlist.

    Raised before the global is imported or called.
    """

    def __init__(self, module, name, source=None, reason=None, remedy=None):
        self.module = module
        self.name = name
        where = f" in {source}" if source else ""
        if reason is None:
            reason = "it is not in the allowlist of the restricted load"
        if remedy is None:
            remedy = (f"pass trusted=[({module!r}, {name!r})] (or a module prefix) if you "
                      f"trust this file, after checking it with cpersist.inspect()")
        super().__init__(f"refused to load global {module}.{name}{where}: {reason}; {remedy}")


class UntrustedPickleError(CpersistError):
    """:func:`cpersist.convert` was given a joblib file or a pickle without
    being told to trust it: converting one means loading it, which runs the
    code it names. Raised before anything is read beyond the file's kind or
    written."""


class FileChangedError(CpersistError):
    """A file a :class:`~cpersist.LazyArray` reads no longer holds its array.

    The file was replaced or rewritten after the array was opened (or
    pickled); the message names the file and the array. Open the file again.
    """


class LimitExceededError(CpersistError):
    """Reading a pickle stream would cost more than a limit allows.

    Raised by a restricted load (``trusted=False`` or an allowlist) and by
    the tools that read a file without loading it (:func:`cpersist.inspect`,
    :func:`cpersist.verify`, :attr:`cpersist.FileHandle.arrays`) before the
    memory or time is spent. The message names the limit and how to raise
    it: pass ``limits=cpersist.Limits(...)`` for a file you trust more.

    Attributes
    ----------
    limit : str
        The name of the :class:`cpersist.Limits` field exceeded.
    """

    def __init__(self, limit, value, allowed, source=None, what="needs {}"):
        self.limit = limit
        where = f"{source}: " if source else ""
        super().__init__(
            f"{where}the pickle stream {what.format(f'{value:,}')}, more than "
            f"limits.{limit}={allowed:,} allows; if you trust this file, pass "
            f"limits=cpersist.Limits({limit}=...) with a larger value"
        )


class CodecLibraryError(CpersistError, ImportError):
    """The compression library a codec needs is missing, or is a version
    cpersist cannot use; the message names the library and its version."""


class DtypeLibraryError(CpersistError, ImportError):
    """The file holds arrays of a dtype from a library that is missing, or
    whose version lacks that dtype (the types of ml_dtypes: bfloat16, the
    float8 family...); the message names the type and the ``pip install``
    command that provides it. :func:`cpersist.inspect` names the type
    without the library."""


class UnwritableTargetError(CpersistError, TypeError):
    """:func:`cpersist.dump` was given a file object that cannot take its
    bytes: one open in text mode, one open for reading only, or one
    positioned before its end (``"r+b"``, or sought back), where the dump
    would overwrite bytes already there. Raised before anything is
    written; open the file with ``"wb"``, or ``"ab"`` to add the dump after
    what it holds. Also raised by :func:`cpersist.append` for a target it
    cannot append to in place (a URL, a file object, a file that is not a
    record log); the message says what to do instead."""


class FileLockedError(CpersistError, TimeoutError):
    """Another writer held the record log's lock for longer than the
    ``timeout`` given to :func:`cpersist.append` or
    ``cpersist.open(path, "a")`` (or the file system has no locks, so
    writers could not be kept apart). Nothing was written."""


class UnpicklableError(CpersistError, pickle.PicklingError, TypeError):
    """Something inside the object to dump cannot be pickled (a lambda, a
    local function, an open file, a lock...). The message names where it
    sits in the object, as :func:`cpersist.inspect` names arrays
    (``obj['callbacks'][2]``), and the pickle module's own reason. Also a
    :class:`TypeError`, which the pickle module raises for most such
    objects.

    Attributes
    ----------
    path : str
        Where the object sits, from ``obj``.
    """

    def __init__(self, message, path):
        super().__init__(message)
        self.path = path


class DaskArrayError(CpersistError, ValueError):
    """A dask array inside the object to dump cannot be stored as the
    numpy array it computes to: its shape is not known yet (chunk sizes
    unknown after a boolean mask, say: call ``x.compute_chunk_sizes()``
    first), or a block computed to another dtype or shape than the dask
    array says (a ``map_blocks`` function given a wrong ``dtype=`` or
    ``chunks=``). Nothing is left at the dump's path."""


class RowBatchesError(CpersistError, ValueError):
    """A :class:`cpersist.RowBatches` inside the object to dump does not
    hold what it says: a batch of another dtype or row shape, more or fewer
    rows than its shape's first axis, or batches already read by an earlier
    dump. Nothing is left at the dump's path."""


class ArrayNotFoundError(CpersistError, KeyError):
    """:attr:`cpersist.FileHandle.arrays` has no array at the key given.

    Also a :class:`KeyError`, as a dict's missing key is. The message says
    whether the array exists but is kept inside the pickle stream (a small
    array of a compressed file: :meth:`~cpersist.FileHandle.load` gives it),
    and otherwise the form of the keys and the nearest ones.

    Attributes
    ----------
    key : object
        The key given.
    in_stream : str or None
        The path of the array the key names when the file keeps it inside
        its pickle stream, else None.
    """

    def __init__(self, message, key, in_stream=None):
        super().__init__(message)
        self.key = key
        self.in_stream = in_stream

    def __str__(self):
        # A KeyError shows its argument's repr; this message is prose.
        return str(self.args[0])
