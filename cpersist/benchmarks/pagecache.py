"""The files a method wrote: their size on disk, their removal, and their
state in the page cache (evicted before a cold read, read once before a warm
one, the share still resident afterwards)."""

import mmap
import os

#: Bytes of a memory page.
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def files_of(path):
    """``[path]`` for a file, every file under ``path`` for a directory."""
    if os.path.isdir(path):
        return sorted(os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs)
    return [path]


def disk_size(path):
    """Bytes of the file, or of every file under the directory, at ``path``."""
    return sum(os.path.getsize(f) for f in files_of(path))


def remove_output(path):
    """Delete what a method wrote at ``path`` (file or directory), if anything."""
    import shutil
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.unlink(path)


def evict_from_cache(path):
    """Flush ``path`` to disk and drop it from the page cache.

    Returns
    -------
    bool
        False when ``posix_fadvise`` is not available (then reads are warm
        whatever was asked, and the row says so).
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)  # dirty pages cannot be dropped
        if not hasattr(os, "posix_fadvise"):
            return False
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    finally:
        os.close(fd)


def warm_cache(path):
    """Read ``path`` once so it sits in the page cache."""
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 22):
            pass


def resident_fraction(path):
    """Fraction of ``path``'s pages in the page cache (``mincore``), or None."""
    try:
        import ctypes
        size = os.path.getsize(path)
        if size == 0:
            return 0.0
        libc = ctypes.CDLL(None, use_errno=True)
        with open(path, "rb") as f:
            # ACCESS_COPY gives a writable (private) view, which ctypes needs
            # for an address; nothing is read or written through it.
            mm = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        try:
            buf = ctypes.c_char.from_buffer(mm)
            n = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * n)()
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(buf)), ctypes.c_size_t(size), vec)
            del buf
            if rc != 0:
                return None
            return sum(v & 1 for v in vec) / n
        finally:
            mm.close()
    except Exception:
        return None
