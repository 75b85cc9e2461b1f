"""Writing a file whole or not at all: through a temporary file beside it,
renamed onto it once complete."""

import errno
import os
import stat

from .._runtime.pagecache import drop_clean_cache
from .._runtime.temporaries import new_temporary, remove_dead_temporaries
from .._runtime.threads import run_later
from .direct_io import DirectFile, direct_writes_possible
from .files import reserve_blocks
from .gathering import GatheringFile, write_parts


def write_atomically(path, write, fsync):
    """Call ``write(file)`` on an :class:`AtomicFile` at ``path``'s file
    (``write`` may also be the bytes to write)."""
    with AtomicFile(path, fsync) as target:
        if callable(write):
            write(target.file())
        else:
            target.write_whole(write)


class AtomicFile:
    """A file that appears at ``path`` whole or not at all: written as a
    temporary file, renamed onto ``path`` when the ``with`` block ends
    without an exception, removed when it raises.

    The temporary file lives in the target's directory (so ``os.replace`` is
    an atomic rename) and is named ``.<target name>.<host>-<n>.cpersist-tmp``
    (see :func:`.temporaries.temporary_name`); it stays locked until renamed
    or removed, and temporary files that dumps to ``path`` left when they
    died are removed first (:func:`.temporaries.remove_dead_temporaries`).
    On an exception an existing target is left untouched; an
    :class:`OSError` that names no file (a full disk: ``ENOSPC``) is raised
    again naming ``path``, once (closing the temporary file would report
    the same error a second time). With ``fsync`` the data and then the
    directory entry are flushed to disk before the block ends, so the new
    file survives a power loss; without, the temporary file's blocks are
    all allocated before the rename, so that the rename returns at once (on
    ext4, a rename onto a file otherwise starts writing the whole new file
    to disk and waits for the writes to be queued). With ``free_old``, the page cache of the
    file being replaced is freed first where all of it is on disk
    (:func:`cpersist._runtime.pagecache.drop_clean_cache`): the new file's pages are then
    cheap to get; for a writer that does not read the old file meanwhile
    (a dump, not a compaction of the file itself). With ``direct``, :meth:`file` writes around
    the page cache where the file system allows it
    (:class:`.direct_io.DirectFile`): for a large file written beside other
    work, which the writing thread's copy into the page cache would slow;
    the memory ``kept`` finds is written straight from it (see
    :class:`.direct_io.DirectFile`).

    Either :meth:`file` (a buffered file object, made on first call) or
    :meth:`write_whole` (a dump made in memory, written with
    :func:`os.write`: a buffered file object's buffer costs a small file
    more than its data) writes the bytes.
    """

    __slots__ = ("name", "names", "_fsync", "_direct", "_mode", "_directory", "_fd", "_tmp",
                 "_held", "_file", "_kept")

    def __init__(self, path, fsync=False, direct=False, free_old=False, kept=None):
        name = self.name = os.fsdecode(path)
        self._kept = kept
        self.names = [name]
        self._fsync = fsync
        self._direct = direct
        self._mode, old_size = _existing(name)
        directory, base = os.path.split(name)  # directory "": the current one
        self._directory = directory
        remove_dead_temporaries(directory, base)
        try:
            # A new file gets 0o666 less the umask from the kernel, as open()
            # gives it; a replaced one keeps its permission bits, set before
            # the rename (the data is never readable by more than either allows).
            self._fd, self._tmp = new_temporary(
                directory, base, 0o666 if self._mode is None else 0o600)
        except OSError:
            _check_parent(name)
            raise
        if free_old and self._mode is not None:
            # Its pages freed now are cheap to take again for the new file;
            # those freed by the rename would not be (see _runtime.pagecache).
            drop_clean_cache(name, old_size)
        self._file = None
        # The temporary file's lock lasts while a descriptor of its open file
        # description is open: this one outlives the write's, up to the rename.
        self._held = os.dup(self._fd)

    def __enter__(self):
        return self

    def file(self):
        """The temporary file as a :class:`.gathering.GatheringFile` (with
        ``direct``, a :class:`.direct_io.DirectFile` where possible)."""
        if self._file is None:
            # The kept memory is its owner's once the file is closed (this
            # object may outlive it: the DirectFile lets go of it then).
            kept, self._kept = self._kept, None
            if self._direct and direct_writes_possible():
                self._file = DirectFile(self._fd, kept)
            else:
                self._file = GatheringFile(self._fd)
        return self._file

    def write_whole(self, data):
        """Write ``data``, the whole file, with :func:`os.write`."""
        written = os.write(self._fd, data)
        if written < len(data):  # the rest as any short write is completed
            write_parts(self._fd, [memoryview(data)[written:]])

    def __exit__(self, kind, exc, traceback):
        try:
            if kind is None:
                try:
                    self._close()
                    replaced = _hold(self.name) if self._mode is not None else None
                    try:
                        os.replace(self._tmp, self.name)
                    finally:
                        if replaced is not None:  # deleted there while the dump returns
                            run_later(os.close, replaced)
                except BaseException as error:
                    exc = error
            if exc is not None:
                self._discard()
                if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
                    raise OSError(exc.errno, exc.strerror, self.name) from None
                if kind is None:
                    raise exc
                return False
        finally:
            os.close(self._held)
        if self._fsync:
            dir_fd = os.open(self._directory or os.curdir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return False

    def _close(self):
        """Flush what is written, set the mode and close the temporary file."""
        if self._file is not None:
            self._file.flush()
        if self._mode is not None:
            os.fchmod(self._fd, self._mode)
            if not self._fsync:
                # Renamed onto a file, a file holding blocks not yet
                # allocated has ext4 start writing all of it back within the
                # rename (its auto_da_alloc): allocated now, it is renamed at once.
                reserve_blocks(self._fd, 0, os.fstat(self._fd).st_size)
        if self._fsync:
            os.fsync(self._fd)
        fd, self._fd = self._fd, None
        try:
            if self._file is not None:
                self._file.close()
        finally:
            os.close(fd)

    def _discard(self):
        """Close and remove the temporary file."""
        if self._fd is not None:
            try:
                if self._file is not None:
                    self._file.close()  # fails again if what is buffered cannot be written
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None
        try:
            os.unlink(self._tmp)
        except OSError:
            pass


def _hold(name):
    """A descriptor that keeps the file at ``name`` (which a rename is about
    to replace) from being deleted before it is closed, or None (not on
    Linux, or nothing there now).

    Deleting a file frees its pages and blocks: a rename onto a 10 KB file
    took 105 microseconds, 30 with the file held open (np.save writes such
    a file whole in about 120); onto a large file, far longer.
    """
    if _HOLD_FLAGS is None:
        return None
    try:
        return os.open(name, _HOLD_FLAGS)
    except OSError:
        return None


#: A path descriptor: no permission needed, nothing opened behind it (a
#: FIFO, a device), never a link's target.
_HOLD_FLAGS = (os.O_PATH | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
               if hasattr(os, "O_PATH") else None)


def _existing(name):
    """Permission bits and size of the file at ``name``, ``(None, 0)`` when
    there is none.

    Raises
    ------
    IsADirectoryError
        If ``name`` is a directory or ends with a separator: checked before
        anything is written.
    """
    try:
        found = os.stat(name)
        mode, size = found.st_mode, found.st_size
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
    return (None, 0) if mode is None else (stat.S_IMODE(mode), size)


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


