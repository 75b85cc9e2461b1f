"""Opening dump targets and load sources: paths, file objects and streams."""

import errno
import io
import os
import stat
import sys

from .temporaries import new_temporary, remove_dead_temporaries


def is_path(obj):
    return isinstance(obj, (str, os.PathLike))


def display_name(obj):
    """A readable name for a path or file object, for messages."""
    if is_path(obj):
        return os.fsdecode(os.fspath(obj))
    name = getattr(obj, "name", None)
    return name if isinstance(name, str) else repr(obj)


def _existing_mode(name):
    """Permission bits of the file at ``name``, None when there is none.

    Raises
    ------
    IsADirectoryError
        If ``name`` is a directory or ends with a separator: checked before
        anything is written.
    """
    try:
        mode = os.stat(name).st_mode
    except OSError:  # none there, or not one we may look at: a new file's mode
        mode = None
    if mode is not None and stat.S_ISDIR(mode):
        raise IsADirectoryError(
            errno.EISDIR, f"is a directory; give the path of a file to write, such as "
            f"{os.path.join(name, 'data.cp')!r}", name)
    if name.endswith(("/", os.sep)):
        raise IsADirectoryError(
            errno.EISDIR, "names a directory (it ends with a separator); give the path of a "
            "file to write", name)
    return None if mode is None else stat.S_IMODE(mode)


#: Write buffer of files cpersist creates. A file holds a section (with its
#: alignment padding) per array: with the default 8 KiB buffer, a file of
#: many small arrays costs about two write calls per array. Writes larger
#: than the buffer bypass it.
WRITE_BUFFER = 1 << 20


def write_atomically(path, write, fsync):
    """Call ``write(file)`` on a temporary file, then rename it onto ``path``.

    ``write`` may also be the bytes to write (a small dump, made in
    memory): they are written with :func:`os.write`, without a buffered
    file object, whose buffer costs a small file more than its data.
    The temporary file lives in the target's directory (so ``os.replace`` is
    an atomic rename) and is named ``.<target name>.<host>-<n>.cpersist-tmp``
    (see :func:`.temporaries.temporary_name`); it stays locked until renamed or removed,
    and temporary files that dumps to ``path`` left when they died are
    removed first (:func:`.temporaries.remove_dead_temporaries`).
    On any exception it is removed and an existing target is left untouched;
    an :class:`OSError` that names no file (a full disk: ``ENOSPC``) is
    raised again naming ``path``, once (closing the temporary file would
    report the same error a second time). With ``fsync`` the data and then
    the directory entry are flushed to disk before returning, so the new
    file survives a power loss.
    """
    name = os.fsdecode(path)
    mode = _existing_mode(name)
    directory, base = os.path.split(name)  # directory "": the current one
    remove_dead_temporaries(directory, base)
    try:
        # A new file gets 0o666 less the umask from the kernel, as open()
        # gives it; a replaced one keeps its permission bits, set before
        # the rename (the data is never readable by more than either allows).
        fd, tmp = new_temporary(directory, base, 0o666 if mode is None else 0o600)
    except OSError:
        _check_parent(name)
        raise
    # The temporary file's lock lasts while a descriptor of its open file
    # description is open: this one outlives the write's, up to the rename.
    held = os.dup(fd)
    try:
        if callable(write):
            _write_file(fd, write, mode, fsync)
        else:
            _write_bytes(fd, write, mode, fsync)
        os.replace(tmp, name)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, name) from None
        raise
    finally:
        os.close(held)
    if fsync:
        dir_fd = os.open(directory or os.curdir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _write_file(fd, write, mode, fsync):
    """``write(file)`` on a buffered file over ``fd``, then ``mode`` set
    (None: left) and the file closed."""
    try:
        file = open(fd, "wb", buffering=WRITE_BUFFER)
    except BaseException:
        os.close(fd)
        raise
    try:
        write(file)
        file.flush()
        _finish_temporary(fd, mode, fsync)
    except BaseException:
        try:
            file.close()  # fails again if what is buffered cannot be written
        except OSError:
            pass
        raise
    file.close()


def _write_bytes(fd, data, mode, fsync):
    """``data`` written to ``fd``, then ``mode`` set and ``fd`` closed."""
    try:
        written = os.write(fd, data)
        if written < len(data):
            view = memoryview(data)[written:]
            while view:
                view = view[os.write(fd, view):]
        _finish_temporary(fd, mode, fsync)
    finally:
        os.close(fd)


def _finish_temporary(fd, mode, fsync):
    if mode is not None:
        os.fchmod(fd, mode)
    if fsync:
        os.fsync(fd)


def _check_parent(name):
    """Raise the error that says why no file can be created at the path
    ``name``: its parent directory is missing or is not a directory. Called
    when creating the temporary file failed, to name the path as the user
    gave it (not the temporary file's).

    Raises
    ------
    FileNotFoundError, NotADirectoryError
    """
    parent = os.path.dirname(os.path.abspath(name))
    if not os.path.exists(parent):
        raise FileNotFoundError(
            errno.ENOENT, f"no directory {os.path.dirname(name) or parent!r} to write into; "
            f"create it first (os.makedirs)", name)
    if not os.path.isdir(parent):
        raise NotADirectoryError(
            errno.ENOTDIR, f"{os.path.dirname(name)!r} is not a directory", name)


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


def start_file_dump(file):
    """Check that a dump can be written at ``file``'s position, before a
    byte is; return a function that removes what a dump that failed wrote
    there, or None where nothing written can be taken back.

    A dump goes where the next ``write`` puts its bytes: the end of the
    file in append mode (``'ab'``, ``'a+b'``, a descriptor opened with
    :data:`os.O_APPEND`), else the position. Bytes after the position (a
    file opened ``'r+b'``, or sought back) are someone's data: they are
    never overwritten. A file object that cannot say where its end is (a
    pipe, a socket, a compressing file) is written where it is, and what a
    failed dump wrote to it stays there.

    Raises
    ------
    UnwritableTargetError
        If ``file`` is positioned before its end, not in append mode.
    """
    local = _local_file(file)
    fd = None if local is None else local[0]
    try:
        if fd is not None:
            if appends(file, fd):
                file.flush()  # the caller's own bytes go first
                position = end = os.fstat(fd).st_size
            else:
                position = file.tell()
                end = local[1]
        elif is_seekable(file):
            position = file.tell()
            end = file.seek(0, io.SEEK_END)
            if appends(file):
                position = end
            else:
                file.seek(position)
        else:
            return None
    except (AttributeError, OSError, ValueError):
        return None  # no end to find (gzip.GzipFile writing): written where it is
    if type(position) is not int or type(end) is not int:
        return None
    if position < end:
        from ..exceptions import UnwritableTargetError

        raise UnwritableTargetError(
            f"{display_name(file)}: the file object is at byte {position} of {end}: a dump "
            f"there would overwrite the {end - position} bytes after it. Seek to the end "
            f"(file.seek(0, 2)) to add the dump after them, truncate the file there "
            f"(file.truncate()) to replace them, or open it with 'ab' or 'wb'")

    def take_back():
        try:
            file.seek(position)  # after what is still buffered is written
            file.truncate()
        except (OSError, ValueError):
            # The buffer cannot be written (a full disk). A closed file's
            # descriptor may be another file's by now.
            if fd is not None and not file.closed:
                try:
                    os.ftruncate(fd, position)
                except OSError:
                    pass

    return take_back


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
PLAIN_FILE_TYPES = (io.BufferedReader, io.BufferedWriter, io.BufferedRandom, io.FileIO)


def local_fd(file):
    """The descriptor of the local regular file ``file`` reads and writes
    directly, or None.

    This alone decides whether cpersist may use a file object's descriptor:
    map it, ``pread`` it, reserve its blocks with ``posix_fallocate``. Only
    Python's own binary file objects (of :data:`PLAIN_FILE_TYPES`, not
    subclasses) on a regular file qualify, also behind the wrapper
    :func:`tempfile.NamedTemporaryFile` returns, which hands every call to
    one. Any other object (a compressing file, a pipe, a socket) is only
    read and written through its methods.
    """
    found = _local_file(file)
    return None if found is None else found[0]


def _local_file(file):
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
