"""A small local file read in one call: the quick path of ``load``, which
needs no byte source, no file object kept open and, for a compact dump (an
object without arrays, :mod:`cpersist.container.compact`), no container
reader.

A module apart from :mod:`.open`: :mod:`cpersist.api` imports it on import,
and a dump needs none of the byte sources :mod:`.open` imports.
"""

import os
import stat

from ..container.compact import OVERHEAD

#: Files up to this size at a local path are read whole, in one call, by
#: ``load``: a compact dump's largest stream (64 KiB), and any dump as
#: small, whose sections are then copied out of memory. Opening the file
#: again and reading its header, index and sections one by one would cost
#: more than a small file's bytes do.
SMALL_FILE = (64 << 10) + OVERHEAD


def small_file(path):
    """The bytes of the regular file at the local path ``path``, read in one
    call, if it holds at most :data:`SMALL_FILE` bytes; else None (also when
    it cannot be read: the general reader says why)."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None
    # A regular file only: opening a FIFO here would take its writer's data.
    if not stat.S_ISREG(info.st_mode) or info.st_size > SMALL_FILE:
        return None
    try:
        fd = os.open(path, _READ_FLAGS)
    except (OSError, ValueError):
        return None
    try:
        return os.read(fd, SMALL_FILE + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


_READ_FLAGS = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
