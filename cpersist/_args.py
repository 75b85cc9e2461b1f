"""Checking the arguments of the public functions, and opening the source
that ``load``, ``inspect``, ``verify`` and ``convert`` read."""

import pickle
import warnings

from ._runtime.files import check_writable_file, display_name, is_path, is_writable
from .container import DEFAULT_CHUNK_SIZE, MAX_CHUNK_SIZE
from .container.sources import ByteSource, LocalFileSource, SpooledSource, source_for
from .container.sources.remote import WRITE_TIMEOUT, fsspec_file_source, is_remote, is_url, open_remote

MMAP_MODES = (None, "r", "r+", "c")


def check_protocol(protocol):
    if protocol is None:
        return pickle.HIGHEST_PROTOCOL
    if isinstance(protocol, bool) or not isinstance(protocol, int) or not (
        2 <= protocol <= pickle.HIGHEST_PROTOCOL
    ):
        raise ValueError(
            f"protocol must be None or an int from 2 to {pickle.HIGHEST_PROTOCOL}, "
            f"got {protocol!r}"
        )
    return protocol


def check_chunk_size(chunk_size):
    if chunk_size is None:
        return DEFAULT_CHUNK_SIZE
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or not (
        1 <= chunk_size <= MAX_CHUNK_SIZE
    ):
        raise ValueError(
            f"chunk_size must be None or an int from 1 to {MAX_CHUNK_SIZE}, got {chunk_size!r}"
        )
    return chunk_size


def check_mmap_mode(mmap_mode):
    if mmap_mode not in MMAP_MODES:
        raise ValueError(
            f"mmap_mode must be one of None, 'r', 'r+', 'c'; got {mmap_mode!r}"
        )
    return mmap_mode


def check_target(target, what="target"):
    """Raise TypeError unless ``target`` is a path or has ``write``."""
    if not is_path(target) and not hasattr(target, "write") and not is_remote(target):
        raise TypeError(
            f"{what} must be a path or a binary file object, got {type(target).__name__}"
        )
    if not is_path(target) and not is_remote(target):
        check_writable_file(target)


def check_storage_options(storage_options, target):
    """Raise unless ``storage_options`` is None, or a dict given with a URL."""
    if storage_options is None:
        return
    if not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict, got {type(storage_options).__name__}")
    if storage_options and not is_url(target):
        raise ValueError(f"storage_options apply to URLs only, not to {display_name(target)}")


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
    if is_remote(source):
        opened = open_remote(source, storage_options)
        if isinstance(opened, ByteSource):
            if mmap_mode:
                _warn_not_mapped(opened.name, "it is in remote storage", stacklevel)
            return opened
        source = opened  # the path of a file:// URL
    else:
        opened = fsspec_file_source(source)
        if opened is not None:
            if mmap_mode:
                _warn_not_mapped(opened.name, "it is in remote storage", stacklevel)
            return opened
    name = display_name(source)
    if is_path(source):
        file = open(source, "r+b" if mmap_mode == "r+" else "rb")
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


def check_timeout(timeout):
    """``timeout`` as seconds (a positive number; None: the default of
    :data:`cpersist.container.sources.remote.WRITE_TIMEOUT`)."""
    if timeout is None:
        return WRITE_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)
