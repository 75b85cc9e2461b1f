"""Opening the source that ``load``, ``open``, ``inspect``, ``verify`` and
``convert`` read: a path, a file object, a stream, a URL or a byte source
becomes the :class:`~.abc.ByteSource` the container reader reads through.
"""

import warnings

from ..._runtime.files import display_name, is_writable
from ..._runtime.remote import check_storage_options, locate
from . import source_for
from .abc import ByteSource
from .local import LocalFileSource
from .spooled import SpooledSource


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
        return _Borrowed(source)
    check_storage_options(storage_options, source)
    where = locate(source, storage_options)
    kind = where.kind
    if kind == "remote" or kind == "fsspec file":
        from .fsspec import FsspecSource  # imports concurrent.futures: only for remote objects

        if kind == "remote":
            opened = FsspecSource(where.fs, where.path, where.name,
                                  storage_options if where.url else None, url=where.url)
        else:
            opened = FsspecSource(where.fs, where.path, file=where.file)
        if mmap_mode:
            _warn_not_mapped(opened.name, "it is in remote storage", stacklevel)
        return opened
    if kind == "path":
        name = display_name(where.path)
        file = open(where.path, "r+b" if mmap_mode == "r+" else "rb")
        try:
            opened = source_for(file, name, owned=True)
        except BaseException:
            file.close()
            raise
        if mmap_mode and isinstance(opened, SpooledSource):
            _warn_not_mapped(name, "it is not seekable (a pipe?)", stacklevel)
        return opened
    if not hasattr(source, "read"):
        raise TypeError(
            f"{what} must be a path or a binary file object, got {type(source).__name__}"
        )
    name = display_name(source)
    opened = source_for(source, name)
    if mmap_mode:
        if isinstance(opened, SpooledSource):
            _warn_not_mapped(name, "the stream is not seekable", stacklevel)
        elif not isinstance(opened, LocalFileSource):
            _warn_not_mapped(name, f"a {type(source).__name__} is not a plain file object "
                                   f"(only those made by open() are mapped)", stacklevel)
        elif mmap_mode == "r+" and not is_writable(source):
            raise ValueError(
                f"mmap_mode='r+' maps {name} for writing, but the file object is "
                f"open read-only; open it with 'r+b', or use mmap_mode='r' or 'c'"
            )
    return opened


class _Borrowed:
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
