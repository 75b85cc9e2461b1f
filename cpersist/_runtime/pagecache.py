"""Giving back the page cache of a file about to be replaced, before its
successor is written, where that loses nothing.

Writing a new file takes a page-cache page per 4 KiB. Pages the kernel
freed a moment ago are cheap to take again; on a virtual machine that gives
freed memory back to its host, older free memory is not: each page then
faults on the host, and a file written into such pages costs the writing
thread several times the system time of one written into pages just
freed. A file written in place
(``open(path, "wb")``, as ``np.save`` does) frees its old pages first and
takes them back; a file replaced atomically (a temporary file renamed onto
it) cannot free the old file before the rename.

It can free the old file's page cache, though, where every page of it is
on disk already (clean): the file stays whole on disk, and a reader reads
it from there. :func:`drop_clean_cache` does that, asking the kernel first
(``cachestat``, Linux 6.5 and later) whether any page is dirty or being
written: a dirty page would start a write of the old file that its
replacement makes useless, so then nothing is given back. Nor is it where
this process has the file open or mapped (a dump of arrays loaded lazily
or mapped from the file it replaces reads them as it writes).
"""

import os
import platform
import stat
import sys

#: Files whose cached bytes are fewer than this keep them: freeing them
#: first saves less than asking the kernel costs.
DROP_MIN = 32 << 20

#: ``cachestat``'s number: the same in the table every architecture shares
#: for new system calls, but for the few that keep their own.
_CACHESTAT = 451
_SHARED_TABLE = ("x86_64", "amd64", "aarch64", "arm64", "ppc64le", "ppc64", "s390x",
                 "riscv64", "i386", "i686", "loongarch64")
_OLD_FILE = (os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0)
             | getattr(os, "O_NONBLOCK", 0))

_usable = sys.platform.startswith("linux") and hasattr(os, "posix_fadvise")
_call = None


def _load():
    """``(syscall, range, stat, byref)`` for ``cachestat``, or None."""
    global _call, _usable
    if platform.machine().lower() not in _SHARED_TABLE:
        _usable = False
        return None
    try:
        import ctypes

        syscall = ctypes.CDLL(None, use_errno=True).syscall
    except (OSError, AttributeError, ImportError):
        _usable = False
        return None
    syscall.restype = ctypes.c_long

    class Range(ctypes.Structure):
        _fields_ = [("off", ctypes.c_uint64), ("len", ctypes.c_uint64)]

    class CacheStat(ctypes.Structure):
        _fields_ = [(name, ctypes.c_uint64) for name in (
            "nr_cache", "nr_dirty", "nr_writeback", "nr_evicted", "nr_recently_evicted")]

    _call = syscall, Range, CacheStat, ctypes.byref, ctypes.get_errno
    return _call


def cache_state(fd):
    """``(cached, dirty, being written)`` pages of the whole file open at
    ``fd``, or None where the kernel cannot say (no ``cachestat``, or not
    allowed for this file)."""
    global _usable
    if not _usable:
        return None
    call = _call or _load()
    if call is None:
        return None
    syscall, Range, CacheStat, byref, get_errno = call
    whole, state = Range(0, 0), CacheStat()
    if syscall(_CACHESTAT, fd, byref(whole), byref(state), 0) != 0:
        if get_errno() == 38:  # ENOSYS: a kernel older than 6.5
            _usable = False
        return None
    return state.nr_cache, state.nr_dirty, state.nr_writeback


def drop_clean_cache(path, size):
    """Free the page cache of the regular file at ``path`` (``size`` bytes
    by an ``os.stat`` just made) if all of it is on disk and it holds at
    least :data:`DROP_MIN` bytes; return whether it did.

    A symbolic link is left alone (a rename replaces the link, not the file
    it names), and so is anything but a regular file, and a file this
    process has open or mapped elsewhere. Pages another process has mapped
    stay (the kernel keeps them). The file's bytes are not touched: only
    whether they are in memory.
    """
    if not _usable or size < DROP_MIN:
        return False
    try:
        fd = os.open(path, _OLD_FILE)
    except OSError:  # gone, a link, or not ours to read: nothing to free
        return False
    try:
        found = os.fstat(fd)
        if not stat.S_ISREG(found.st_mode):
            return False
        state = cache_state(fd)
        if state is None:
            return False
        cached, dirty, writing = state
        if (dirty or writing or cached * os.sysconf("SC_PAGE_SIZE") < DROP_MIN
                or _used_here(found, fd)):
            return False
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _used_here(found, own):
    """Whether this process maps the file ``found`` (an ``os.stat`` result)
    or has it open on a descriptor other than ``own``; True when it cannot
    tell."""
    device = f"{os.major(found.st_dev):02x}:{os.minor(found.st_dev):02x}"
    inode = str(found.st_ino)
    try:
        with open("/proc/self/maps", "rb") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) > 4 and fields[4] == inode.encode() and \
                        fields[3] == device.encode():
                    return True
        with os.scandir("/proc/self/fd") as entries:
            for entry in entries:
                if entry.name == str(own):
                    continue
                try:
                    other = os.stat(entry.path)
                except OSError:  # closed meanwhile, or not a file
                    continue
                if other.st_ino == found.st_ino and other.st_dev == found.st_dev:
                    return True
    except OSError:
        return True
    return False
