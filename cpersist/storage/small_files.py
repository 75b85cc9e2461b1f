"""A local path opened once for a load, and a small local file read in one
call: the quick path of loading a compact dump (an object without arrays,
:mod:`cpersist.container.compact`), which needs no byte source, no
container reader and no file object kept open.

A module apart from :mod:`.open`: :mod:`cpersist.api` imports it on import,
and a dump needs none of the byte sources :mod:`.open` imports.
"""

import os
import stat

from ..container.compact import OVERHEAD, compact_stream

#: Largest pickle stream :func:`compact_file_stream` reads: larger compact
#: dumps (only :func:`cpersist.dumps` makes them) go through the reader.
READ_WHOLE_UP_TO = 64 << 10

#: None where the system has no pread (Windows).
_pread = getattr(os, "pread", None)


def open_local(path, writable=False):
    """``(file, status)``: the local path ``path`` opened unbuffered for
    reading (``'r+b'`` if ``writable``), and its ``os.fstat``.

    One open and one status for the whole load: the quick path of a
    compact dump and the byte source of any other file
    (:func:`.open.open_source`'s ``opened``) share them, where each taking
    its own cost a small load a tenth of its time.

    Raises
    ------
    OSError
        As :func:`open` does (no such file, a directory, no permission).
    """
    file = open(path, "r+b" if writable else "rb", buffering=0)
    try:
        return file, os.fstat(file.fileno())
    except BaseException:
        file.close()
        raise


def compact_file_stream(file, status):
    """The pickle stream of the compact dump in ``file`` (a plain file
    object whose ``os.fstat`` is ``status``), or None when the file is
    anything else (left to the container reader, which says what is wrong
    with a damaged one), read in one call. The file's position is left as
    it was."""
    largest = READ_WHOLE_UP_TO + OVERHEAD
    # A regular file only: a FIFO's data is left to the general way.
    if not stat.S_ISREG(status.st_mode) or not OVERHEAD < status.st_size <= largest:
        return None
    try:
        if _pread is not None:
            data = _pread(file.fileno(), largest + 1, 0)
        else:  # Windows: read, then back to the start, where the byte source starts
            data = file.read(largest + 1)
            file.seek(0)
    except OSError:
        return None
    return compact_stream(data)
