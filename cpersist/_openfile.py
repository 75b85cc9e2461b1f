"""The file a :class:`cpersist.LazyArray` reads: kept open while its handle
is, reopened from a reference once the handle is closed or in another process.

A reference is a small picklable object with a ``key`` (equal for references
to the same bytes) and an ``open()`` method returning a fresh
:class:`~cpersist.container.ByteSource`. :class:`PathReference` reopens a
local file; a byte source that can be reopened elsewhere (a remote object)
provides its own from a ``reference()`` method.
"""

import builtins
import os
import threading
import weakref

from .container import ContainerReader
from .container.sources import LocalFileSource, SpooledSource, source_for


class PathReference:
    """A local file by absolute path, and where the cpersist data starts in it.

    Parameters
    ----------
    path : str
    base : int, default 0
    """

    __slots__ = ("path", "base")

    def __init__(self, path, base=0):
        self.path = path
        self.base = base

    @property
    def key(self):
        return ("path", self.path, self.base)

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

    def still_names(self, source):
        """Whether the path still names the file ``source`` reads (it may
        have been replaced since, e.g. by a new ``dump``)."""
        fd = getattr(source, "fd", None)
        if fd is None:
            return True
        try:
            now, opened = os.stat(self.path), os.fstat(fd)
        except OSError:
            return False
        return (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (
            opened.st_dev, opened.st_ino, opened.st_size, opened.st_mtime_ns)

    def __reduce__(self):
        return PathReference, (self.path, self.base)

    def __repr__(self):
        return f"PathReference({self.path!r}, {self.base})"


def reference_for(source):
    """A reference that reopens ``source`` elsewhere, or None if it cannot be."""
    reference = getattr(source, "reference", None)
    if callable(reference):
        return reference()
    if (isinstance(source, LocalFileSource) and not isinstance(source, SpooledSource)
            and source.path is not None):
        return PathReference(os.path.abspath(source.path), source.base)
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
                    self._reader = ContainerReader(source)
                except BaseException:
                    source.close()
                    raise
                self._owns = True
                # Nothing else closes a file reopened for lazy arrays: it is
                # closed with the last of them.
                weakref.finalize(self, source.close)
            return self._reader

    def is_current(self):
        """False if the reference now names another file than the one open."""
        reader = self._reader
        check = getattr(self.reference, "still_names", None)
        return reader is None or check is None or check(reader.source)

    def close(self):
        with self._lock:
            reader = self._reader
            if reader is not None and self._owns:
                self._reader = None
                reader.source.close()


#: Files reopened in this process from references (lazy arrays unpickled
#: here), shared while some array uses them: a dask worker unpickles one
#: array per task, and each would otherwise reopen the file.
_SHARED = weakref.WeakValueDictionary()
_SHARED_LOCK = threading.Lock()


def shared_file(reference):
    """The :class:`OpenFile` of ``reference`` in this process."""
    with _SHARED_LOCK:
        file = _SHARED.get(reference.key)
        if file is None or not file.is_current():
            file = _SHARED[reference.key] = OpenFile(None, reference, True)
        return file
