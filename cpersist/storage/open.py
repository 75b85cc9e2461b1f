"""The one resolver of what ``load``, ``open``, ``inspect``, ``verify`` and
``convert`` read: a path, a file object, a stream, a URL or a byte source
becomes the :class:`~cpersist.container.sources.ByteSource` the container
reader reads through. Remote or local is told here, once; a local file
object is told apart (plain file, other seekable, stream) by
:func:`cpersist.container.sources.source_for`.
"""

import warnings

from ..container.files import display_name, is_path, is_writable
from ..container.sources import ByteSource, LocalFileSource, SpooledSource, source_for
from .fsspec.urls import is_filesystem, is_remote, is_url, protocols_of, resolve


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
    if is_remote(source):
        fs, path, name = resolve(source, storage_options)
        if fs is not None:
            url = source if is_url(source) else None
            return _remote_source(fs, path, mmap_mode, stacklevel, name=name, url=url,
                                  storage_options=storage_options if url else None)
        source = path  # a file:// URL
    owned = is_path(source)
    if owned:
        file = open(source, "r+b" if mmap_mode == "r+" else "rb")
    else:
        file = source
        file_system = getattr(file, "fs", None)
        if (file_system is not None and getattr(file, "mode", None) == "rb"
                and isinstance(getattr(file, "path", None), str) and is_filesystem(file_system)
                and "file" not in protocols_of(file_system) and file.tell() == 0):
            # Read by ranges: its own reads would cost a request per read-ahead block.
            return _remote_source(file_system, file.path, mmap_mode, stacklevel, file=file)
        if not hasattr(file, "read"):
            raise TypeError(f"{what} must be a path or a binary file object, "
                            f"got {type(source).__name__}")
    name = display_name(source)
    try:
        # The one place that tells a plain local file, any other seekable
        # file object and a stream apart.
        opened = source_for(file, name, owned)
    except BaseException:
        if owned:
            file.close()
        raise
    if not mmap_mode:
        return opened
    if isinstance(opened, SpooledSource):  # a LocalFileSource of its temporary file
        _warn_not_mapped(name, "it is not seekable (a pipe?)" if owned
                         else "the stream is not seekable", stacklevel)
    elif isinstance(opened, LocalFileSource):
        if mmap_mode == "r+" and not owned and not is_writable(file):
            raise ValueError(
                f"mmap_mode='r+' maps {name} for writing, but the file object is "
                f"open read-only; open it with 'r+b', or use mmap_mode='r' or 'c'"
            )
    elif not owned:  # a path opens as a plain file, but on Windows
        _warn_not_mapped(name, f"a {type(source).__name__} is not a plain file object "
                               f"(only those made by open() are mapped)", stacklevel)
    return opened


def _remote_source(fs, path, mmap_mode, stacklevel, **how):
    from .fsspec.read import FsspecSource  # imports concurrent.futures: only for remote objects

    opened = FsspecSource(fs, path, **how)
    if mmap_mode:
        _warn_not_mapped(opened.name, "it is in remote storage", stacklevel + 1)
    return opened


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
