"""The one resolver of what ``load``, ``open``, ``inspect``, ``verify`` and
``convert`` read: a path, a file object, a stream, a URL or a byte source
becomes the :class:`~cpersist.container.sources.ByteSource` the container
reader reads through. Remote or local is told here, once; a local file
object is told apart (plain file, other seekable, stream) by
:func:`cpersist.container.sources.source_for`. Whether its arrays can be
mapped the byte source says (``can_map``, and why not: ``not_mapped``),
to the load that asks.
"""

import os
import stat

from ..container.files import display_name, is_path
from ..container.sources import ByteSource, LocalFileSource, source_for
from .fsspec.urls import is_filesystem, is_remote, is_url, protocols_of, resolve


def open_source(source, mmap_mode=None, *, storage_options=None, what="source", opened=None):
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
        What the caller will map: a path opens ``'r+b'`` for ``'r+'``.
    storage_options : dict, optional
        Passed to fsspec with a URL.
    what : str
        The argument's name, for the TypeError.
    opened : (file, os.stat_result), optional
        ``source``, a local path, as :func:`.small_files.open_local` opened
        it (for ``mmap_mode``): that file is read, and closed with the
        source (also when this call fails).

    Raises
    ------
    TypeError
        If ``source`` is neither a path nor a binary file object.
    """
    if opened is not None:
        return _opened_source(source, *opened)
    if isinstance(source, ByteSource):
        return Borrowed(source)
    if is_remote(source):
        fs, path, name = resolve(source, storage_options)
        if fs is not None:
            url = source if is_url(source) else None
            return _remote_source(fs, path, name=name, url=url,
                                  storage_options=storage_options if url else None)
        source = path  # a file:// URL
    owned = is_path(source)
    if owned:
        # Unbuffered: the source reads the descriptor with pread, never
        # through the file object, whose buffer (and isatty check) would
        # cost a small load more than its own reads.
        file = open(source, "r+b" if mmap_mode == "r+" else "rb", buffering=0)
    else:
        file = source
        file_system = getattr(file, "fs", None)
        if (file_system is not None and getattr(file, "mode", None) == "rb"
                and isinstance(getattr(file, "path", None), str) and is_filesystem(file_system)
                and "file" not in protocols_of(file_system) and file.tell() == 0):
            # Read by ranges: its own reads would cost a request per read-ahead block.
            return _remote_source(file_system, file.path, file=file)
        if not hasattr(file, "read"):
            raise TypeError(f"{what} must be a path or a binary file object, "
                            f"got {type(source).__name__}")
    try:
        # The one place that tells a plain local file, any other seekable
        # file object and a stream apart.
        return source_for(file, display_name(source), owned)
    except BaseException:
        if owned:
            file.close()
        raise


def _opened_source(source, file, status):
    """The byte source of the local path ``source`` opened as ``file``, whose
    ``os.fstat`` is ``status``: a regular file is read with ``pread`` on the
    descriptor already open and of the size already known."""
    try:
        if stat.S_ISREG(status.st_mode) and hasattr(os, "preadv"):  # Windows has no pread
            return LocalFileSource(file, display_name(source), file.fileno(), True,
                                   file_size=status.st_size)
        return source_for(file, display_name(source), True)
    except BaseException:
        file.close()
        raise


def _remote_source(fs, path, **how):
    from .fsspec.read import FsspecSource  # imports concurrent.futures: only for remote objects

    return FsspecSource(fs, path, **how)


class Borrowed:
    """A byte source passed in by the caller: used, not closed."""

    def __init__(self, source):
        self.source = source

    def __enter__(self):
        return self.source

    def __exit__(self, *exc_info):
        pass
