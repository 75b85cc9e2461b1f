"""Paths and file objects: telling them apart, naming them, and what cpersist
may do with a file object (its descriptor, whether it appends, seeks or
writes; writing all of a buffer to it)."""

import io
import os
import stat
import sys

from .gathering import GatheringFile
from .layout import MINOR_AT


def is_path(obj):
    return isinstance(obj, (str, os.PathLike))


def display_name(obj):
    """A readable name for a path or file object, for messages."""
    if is_path(obj):
        return os.fsdecode(os.fspath(obj))
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) else repr(obj)


def check_writable_file(file):
    """Raise :class:`~cpersist.UnwritableTargetError` for a file object
    that cannot take bytes: text mode, or open for reading only."""
    from ..exceptions import UnwritableTargetError

    what = display_name(file)
    if isinstance(file, io.TextIOBase):
        raise UnwritableTargetError(
            f"{what}: a file object open in text mode; cpersist writes bytes: open it "
            f"with 'wb' (or pass the path)")
    try:
        writable = file.writable()
    except (AttributeError, OSError, ValueError):
        return  # an object with write() only (a socket file, a custom stream)
    if writable is False:
        raise UnwritableTargetError(
            f"{what}: a file object open for reading only; open it with 'wb' (or pass the path)")


def appends(file, fd=None):
    """Whether every write to ``file`` lands at the end of its file, wherever
    its position is: opened in append mode, or (``fd`` being its
    descriptor) on a descriptor with :data:`os.O_APPEND`."""
    mode = getattr(file, "mode", None)
    if isinstance(mode, str) and "a" in mode:
        return True
    if fd is None:
        return False
    try:
        import fcntl
    except ImportError:  # Windows: the mode says it
        return False
    try:
        return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_APPEND)
    except OSError:
        return False


def reservable_fd(file):
    """The descriptor whose blocks a writer of ``file`` may reserve ahead of
    its writes (:func:`os.posix_fallocate`), or None.

    That of :func:`local_fd`, except in append mode: reserving grows the
    file, and an appending write goes to its end, after the reserved
    blocks rather than into them.
    """
    fd = local_fd(file)
    if fd is None or appends(file, fd):
        return None
    return fd


def reserve_blocks(fd, offset, length):
    """Allocate the blocks of ``length`` bytes from ``offset`` of the file
    open at ``fd`` (``fallocate``), growing it to cover them if it is
    shorter; return whether the file system did. Bytes already written are
    kept.

    Nothing is written: where the file system cannot allocate ahead (some
    network file systems) this returns False, where
    :func:`os.posix_fallocate` would have the C library write a byte into
    every block instead.
    """
    call = _fallocate or _load_fallocate()
    try:
        return call(fd, offset, length)
    except OSError:
        return False


def _load_fallocate():
    global _fallocate
    try:
        import ctypes

        function = ctypes.CDLL(None, use_errno=True).fallocate
        function.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64)

        def call(fd, offset, length):
            return function(fd, 0, offset, length) == 0
    except (OSError, AttributeError, ImportError, TypeError):  # no Linux fallocate
        if hasattr(os, "posix_fallocate"):
            def call(fd, offset, length):
                os.posix_fallocate(fd, offset, length)
                return True
        else:
            def call(fd, offset, length):
                return False
    _fallocate = call
    return call


_fallocate = None


def is_seekable(file):
    try:
        return file.seekable()
    except (AttributeError, OSError, ValueError):
        return False


def is_writable(file):
    try:
        return file.writable()
    except (AttributeError, OSError, ValueError):
        return False


#: File objects whose positions are those of their descriptor, so that a
#: memory map, a ``pread`` or a block reservation on the descriptor concerns
#: the bytes they read and write. Others may transform them:
#: ``gzip.GzipFile.fileno()`` is the compressed file's.
PLAIN_FILE_TYPES = (io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.FileIO,
                    GatheringFile)


def local_fd(file):
    """The descriptor of the local regular file ``file`` reads and writes
    directly, or None.

    This alone decides whether cpersist may use a file object's descriptor:
    map it, ``pread`` it, reserve its blocks with ``posix_fallocate``. Only
    Python's own binary file objects and the one a dump to a path writes
    through (of :data:`PLAIN_FILE_TYPES`, not subclasses) on a regular file
    qualify, also behind the wrapper
    :func:`tempfile.NamedTemporaryFile` returns, which hands every call to
    one. Any other object (a compressing file, a pipe, a socket) is only
    read and written through its methods.
    """
    found = local_file(file)
    return None if found is None else found[0]


def local_file(file):
    """``(descriptor, size)`` of the file :func:`local_fd` accepts, else None."""
    # Looked up, not imported: a tempfile wrapper exists only once tempfile
    # has been imported.
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None and type(file) is tempfile._TemporaryFileWrapper:
        file = file.file
    if type(file) not in PLAIN_FILE_TYPES:
        return None
    try:
        fd = file.fileno()
        st = os.fstat(fd)
    except (OSError, ValueError):
        return None
    return (fd, st.st_size) if stat.S_ISREG(st.st_mode) else None


def named_os_error(exc, name):
    """``exc`` again, naming ``name`` if it names no file (a full disk's
    ``ENOSPC`` from ``write`` names none)."""
    if name is None or exc.filename is not None or exc.errno is None or not exc.strerror:
        return exc
    return OSError(exc.errno, exc.strerror, name)


def write_all(file, data, name):
    """Write all of ``data`` to ``file``; an :class:`OSError` names ``name``."""
    view = memoryview(data)
    try:
        while view.nbytes:
            n = file.write(view)
            # Raw (unbuffered) streams may write less than asked; buffered
            # ones return None or the full length.
            view = view[view.nbytes if n is None else n:]
    except OSError as exc:
        raise named_os_error(exc, name) from None


#: File objects known to write where they seek back to (others, a gzip
#: file for one, may say they seek and refuse to go back).
_SEEKING_BACK = (io.BufferedWriter, io.BufferedRandom, io.FileIO, io.BytesIO, GatheringFile)


def header_place(file):
    """Where the dump about to be written to ``file`` starts, if a writer
    may go back there to restate its header's version once the dump is
    written (:func:`restate_minor`), else None: a plain file or a BytesIO,
    seekable, not in append mode nor on a descriptor with ``O_APPEND``."""
    if type(file) not in _SEEKING_BACK or not is_seekable(file):
        return None
    try:
        fd = file.fileno()
    except (AttributeError, OSError, ValueError):
        fd = None
    try:
        return None if appends(file, fd) else file.tell()
    except (AttributeError, OSError, ValueError):
        return None


def restate_minor(file, place, minor, name=None):
    """Rewrite the minor version in the header of the dump at ``place`` in
    ``file`` (:func:`header_place`), leaving the file's position where it
    was."""
    try:
        end = file.tell()
        file.seek(place + MINOR_AT)
        file.write(minor.to_bytes(2, "little"))
        file.seek(end)
    except OSError as exc:
        raise named_os_error(exc, name) from None
