"""Advisory locks on files (:func:`fcntl.flock`), which serialise cpersist's
writers of one file and let a reader wait for a writer's change to be whole.

A lock is taken through a descriptor of its own (a new open file
description of the same file), never through the caller's: ``flock`` locks
belong to an open file description, and locking or unlocking the caller's
own would convert or release a lock the caller holds on it. Where the
system or the file system has no such locks (Windows, some network file
systems), nothing is locked and the caller is told so.
"""

import os
import time
from contextlib import contextmanager

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

_OPEN = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
#: Seconds between two tries of a lock that is waited for with a timeout.
_POLL = 0.002


def lock_descriptor(fd, path=None):
    """A new descriptor, open for reading, of the file open at ``fd``, or
    None if none can be had. Opened through ``/proc/self/fd`` (Linux) or
    else ``path``, and used only if it is the same file (device and
    inode): a path may meanwhile name another file."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    for name in (f"/proc/self/fd/{fd}", path):
        if name is None:
            continue
        try:
            own = os.open(name, _OPEN)
        except OSError:
            continue
        try:
            same = os.fstat(own)
            if (same.st_dev, same.st_ino) == (st.st_dev, st.st_ino):
                return own
        except OSError:
            pass
        os.close(own)
    return None


def lock_for_writing(fd, timeout, name, thing, change):
    """Take ``fd``'s exclusive lock, waiting at most ``timeout`` seconds, or
    raise :class:`~cpersist.FileLockedError` saying which file (``name``),
    what it is (``thing``: "the record log") and what a writer without the
    lock could interleave (``change``: "appending")."""
    if not try_lock(fd, timeout=timeout):
        from ..exceptions import FileLockedError

        waited = "" if timeout is None else f" for {timeout} s"
        raise FileLockedError(
            f"{name}: could not lock {thing}{waited}: another writer holds it, or the file "
            f"system has no locks ({change} without one could interleave two writers)")


def try_lock(fd, shared=False, timeout=None):
    """Lock ``fd`` (exclusive, or ``shared``) waiting at most ``timeout``
    seconds (None: as long as it takes). Whether it is locked: False also
    where the file system has no locks."""
    if fcntl is None:
        return False
    kind = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
    if timeout is None:
        try:
            fcntl.flock(fd, kind)
            return True
        except OSError:  # ENOLCK, EOPNOTSUPP: no locks on this file system
            return False
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(fd, kind | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(_POLL)
        except OSError:
            return False


@contextmanager
def locked(fd, path=None, *, shared=False, timeout=None):
    """Hold a lock on the file open at ``fd`` (exclusive, or ``shared``)
    for the ``with`` block, through a descriptor of its own (see
    :func:`lock_descriptor`). Yields whether it is held: False where the
    file cannot be locked, or when ``timeout`` seconds passed first."""
    if fcntl is None:
        yield False
        return
    own = lock_descriptor(fd, path)
    if own is None:
        yield False
        return
    try:
        yield try_lock(own, shared, timeout)
    finally:
        os.close(own)  # releases the lock
