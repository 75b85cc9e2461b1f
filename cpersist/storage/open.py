"""Opening the source that ``load``, ``open``, ``inspect``, ``verify`` and
``convert`` read: a path, a file object, a stream, a URL or a byte source
becomes the :class:`~.abc.ByteSource` the container reader reads through.
"""

import warnings

from .locations import FILE_OBJECT, FSSPEC_FILE, LOCAL_FILE, REMOTE, STREAM, locate
from ..container.sources.abc import ByteSource
from ..container.sources.fileobj import FileObjectSource
from ..container.sources.local import LocalFileSource
from ..container.sources.spooled import SpooledSource


def open_source(source, mmap_mode=None, *, storage_options=None, what="source", stacklevel=2):
    """The byte source to read ``source`` through; close it when done.

    Parameters
    ----------
    source : str, os.PathLike, binary file object or ByteSource
        A path is opened here (``'r+b'`` for ``mmap_mode='r+'``, so that the
        map is made from the very descriptor whose index is read); a file
        object is read from its position to its end; a non-seekable one
        (pipe, socket, FIFO) is spooled to a temporary file. A URL
        (``s3://...``), a ``(file system, path)`` pair, an
        :class:`fsspec.core.OpenFile` or an fsspec file open for reading is
        read by range requests (a ``file://`` URL as a path). A byte source
        is used as it is (and not closed).
    mmap_mode : {None, 'r', 'r+', 'c'}
        What the caller will map: a ``UserWarning`` says so when the source
        cannot be mapped.
    storage_options : dict, optional
        Passed to fsspec with a URL.
    what : str
        The argument's name, for the TypeError.
    stacklevel : int
        Of the warning, counted from the caller.

    Raises
    ------
    TypeError
        If ``source`` is neither a path nor a binary file object.
    ValueError
        For ``mmap_mode='r+'`` on a file object open read-only.
    """
    if isinstance(source, ByteSource):
        return Borrowed(source)
    where = locate(source, storage_options, mmap_mode)
    kind = where.kind
    if kind == REMOTE or kind == FSSPEC_FILE:
        from .fsspec.read import FsspecSource  # imports concurrent.futures: only for remote objects

        if kind == REMOTE:
            opened = FsspecSource(where.fs, where.path, where.name,
                                  storage_options if where.url else None, url=where.url)
        else:
            opened = FsspecSource(where.fs, where.path, file=where.file)
        if mmap_mode:
            _warn_not_mapped(opened.name, "it is in remote storage", stacklevel)
        return opened
    if where.owned:
        try:
            return _file_source(source, where, mmap_mode, what, stacklevel)
        except BaseException:
            where.file.close()
            raise
    return _file_source(source, where, mmap_mode, what, stacklevel)


def _file_source(source, where, mmap_mode, what, stacklevel):
    """The byte source of a local file object (``where.owned``: opened
    from a path, by :func:`~cpersist.storage.locations.locate`)."""
    kind, name, file = where.kind, where.name, where.file
    if kind == STREAM:
        opened = SpooledSource(file, name)
        if where.owned:
            file.close()
        if mmap_mode:
            _warn_not_mapped(name, "it is not seekable (a pipe?)" if where.owned
                             else "the stream is not seekable", stacklevel + 1)
        return opened
    if kind == LOCAL_FILE:
        if not where.writable:
            raise ValueError(
                f"mmap_mode='r+' maps {name} for writing, but the file object is "
                f"open read-only; open it with 'r+b', or use mmap_mode='r' or 'c'"
            )
        return LocalFileSource(file, name, where.fd, where.owned)
    if kind == FILE_OBJECT:
        opened = FileObjectSource(file, name)
        if where.owned:  # a path opens as a plain file: only on Windows
            opened.close = file.close
        elif mmap_mode:
            _warn_not_mapped(name, f"a {type(source).__name__} is not a plain file object "
                                   f"(only those made by open() are mapped)", stacklevel + 1)
        return opened
    raise TypeError(f"{what} must be a path or a binary file object, got {type(source).__name__}")


class Borrowed:
    """A byte source passed in by the caller: used, not closed."""

    def __init__(self, source):
        self.source = source

    def __enter__(self):
        return self.source

    def __exit__(self, *exc_info):
        pass


def _warn_not_mapped(name, why, stacklevel):
    # +1 for this function, +1 for open_source.
    warnings.warn(f"cpersist: cannot memory-map arrays from {name}: {why}; "
                  f"loading them into memory", UserWarning, stacklevel=stacklevel + 2)
