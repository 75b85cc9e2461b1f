"""The file a :class:`cpersist.LazyArray` reads: kept open while its handle
is, reopened from a reference once the handle is closed or in another process.

A reference is a small picklable object with a ``key`` (equal for references
to the same bytes) and an ``open()`` method returning a fresh
:class:`~cpersist.container.sources.ByteSource`. :class:`PathReference` reopens a
local file; a byte source that can be reopened elsewhere (a remote object)
provides its own from a ``reference()`` method.
"""

import builtins
import collections
import os
import threading
import weakref

from .._runtime.fork import renew_after_fork
from ..container import ContainerReader
from ..container.sources import LocalFileSource, SpooledSource, source_for
from ..storage.fsspec.reopen import reference_of


class PathReference:
    """A local file by absolute path, and where the cpersist data starts in it.

    Parameters
    ----------
    path : str
    base : int, default 0
    whole : bool, default False
        The dump is the whole file (it was opened by path): reopening it
        reads its index from the end instead of walking its records.
    """

    __slots__ = ("path", "base", "whole")

    def __init__(self, path, base=0, whole=False):
        self.path = path
        self.base = base
        self.whole = whole

    @property
    def key(self):
        return ("path", self.path, self.base, self.whole)

    @property
    def name(self):
        return self.path

    def open(self):
        file = builtins.open(self.path, "rb")
        try:
            file.seek(self.base)
            return source_for(file, self.path, owned=True)
        except BaseException:
            file.close()
            raise

    def opened(self, source):
        """What identifies the file ``source`` reads as it is now (None if
        unknown): its device, inode, size and modification time."""
        fd = getattr(source, "fd", None)
        return None if fd is None else _identity(os.fstat(fd))

    def still_names(self, source, opened=None):
        """Whether the path still names the file ``source`` reads, unchanged
        since it was ``opened`` (it may have been replaced since, e.g. by a
        new ``dump``, or rewritten in place)."""
        fd = getattr(source, "fd", None)
        if fd is None:
            return True
        try:
            now = _identity(os.stat(self.path))
            return now == (opened or _identity(os.fstat(fd)))
        except OSError:
            return False

    def __reduce__(self):
        return PathReference, (self.path, self.base, self.whole)

    def __repr__(self):
        return f"PathReference({self.path!r}, {self.base})"


def _identity(stat):
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


def reference_for(source, whole=False):
    """A reference that reopens ``source`` elsewhere, or None if it cannot be;
    ``whole``: the dump is all of the file (opened by path)."""
    reference = reference_of(source)
    if reference is not None:
        return reference
    if (isinstance(source, LocalFileSource) and not isinstance(source, SpooledSource)
            and source.path is not None):
        return PathReference(os.path.abspath(source.path), source.base,
                             whole and source.base == 0)
    return None


class OpenFile:
    """A cpersist file's reader, shared by the lazy arrays read from it.

    Parameters
    ----------
    reader : ContainerReader or None
        None to open it from ``reference`` on first use.
    reference : reference or None
        How to reopen the file once :meth:`close` has closed it.
    owns_source : bool
        :meth:`close` closes the reader's byte source. A source the caller
        gave (a file object, a byte source) is left open, and lazy arrays
        keep reading it.
    name : str, optional
    """

    def __init__(self, reader, reference, owns_source, name=None):
        self._reader = reader
        self.reference = reference
        self._owns = owns_source
        self.name = name or (reader.name if reader is not None else reference.name)
        self._lock = threading.Lock()
        self._fingerprints = (reader, {})
        self._opened = self._identity(reader)

    def _identity(self, reader):
        opened = getattr(self.reference, "opened", None)
        return None if reader is None or opened is None else opened(reader.source)

    def reader(self):
        """The open reader, reopened from the reference if it was closed."""
        reader = self._reader
        if reader is not None:
            return reader
        with self._lock:
            if self._reader is None:
                if self.reference is None:
                    raise ValueError(
                        f"{self.name} is closed and cannot be reopened (it was read from "
                        f"a stream); read its arrays before closing it, or open a path")
                source = self.reference.open()
                try:
                    self._reader = ContainerReader(
                        source, whole=getattr(self.reference, "whole", False),
                        records_later=True)
                except BaseException:
                    source.close()
                    raise
                self._opened = self._identity(self._reader)
                self._owns = True
                # Nothing else closes a file reopened for lazy arrays: it is
                # closed with the last of them.
                weakref.finalize(self, source.close)
            return self._reader

    def fingerprint(self, reader, section, compute):
        """``compute(section)``, computed once per section of ``reader``:
        every lazy array unpickled in a process checks its section against
        the file, and a dask worker unpickles many."""
        owner, known = self._fingerprints
        if owner is not reader:
            known = {}
            self._fingerprints = (reader, known)
        value = known.get(section.index)
        if value is None:
            value = known[section.index] = compute(section)
        return value

    def is_current(self):
        """False if the reference now names another file than the one open."""
        reader = self._reader
        check = getattr(self.reference, "still_names", None)
        if reader is None or check is None:
            return True
        if self._opened is not None:
            return check(reader.source, self._opened)
        return check(reader.source)

    def close(self):
        with self._lock:
            reader = self._reader
            if reader is not None and self._owns:
                self._reader = None
                reader.source.close()


#: Files reopened in this process from references (lazy arrays unpickled
#: here), shared while some array uses them: a dask worker unpickles arrays
#: for many tasks, and each would otherwise reopen the file and read its
#: index again.
_SHARED = weakref.WeakValueDictionary()
#: The most recently used of them, kept open after their arrays are gone,
#: since the next array unpickled (the next computation's) is often of the
#: same file. Few, so that few descriptors stay open.
_RECENT = collections.OrderedDict()
RECENT_FILES = 8
_SHARED_LOCK = threading.Lock()


renew_after_fork(globals(), _SHARED_LOCK=threading.Lock)


def shared_file(reference):
    """The :class:`OpenFile` of ``reference`` in this process, reopened if the
    reference now names another file than the one open (a replaced file)."""
    key = reference.key
    with _SHARED_LOCK:
        file = _SHARED.get(key)
        if file is None or not file.is_current():
            file = _SHARED[key] = OpenFile(None, reference, True)
        _RECENT[key] = file
        _RECENT.move_to_end(key)
        while len(_RECENT) > RECENT_FILES:
            _RECENT.popitem(last=False)
        return file
