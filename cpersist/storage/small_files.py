"""A small local file read in one call: the quick path of loading a compact
dump (an object without arrays, :mod:`cpersist.container.compact`), which
needs no byte source, no container reader and no file object kept open.

A module apart from :mod:`.open`: :mod:`cpersist.api` imports it on import,
and a dump needs none of the byte sources :mod:`.open` imports.
"""

import os
import stat

from ..container.compact import OVERHEAD, compact_stream

#: Largest pickle stream :func:`compact_file_stream` reads: larger compact
#: dumps (only :func:`cpersist.dumps` makes them) go through the reader.
READ_WHOLE_UP_TO = 64 << 10


def compact_file_stream(path):
    """The pickle stream of the compact dump at the local path ``path``, or
    None when the file is anything else (left to the container reader,
    which says what is wrong with a damaged one), read in one call."""
    largest = READ_WHOLE_UP_TO + OVERHEAD
    try:
        info = os.stat(path)
    except (OSError, ValueError):
        return None  # the general reader raises the error
    # A regular file only: opening a FIFO here would take its writer's data.
    if not stat.S_ISREG(info.st_mode) or not OVERHEAD < info.st_size <= largest:
        return None
    try:
        with open(path, "rb", buffering=0) as file:
            data = file.read(largest + 1)
    except OSError:
        return None
    return compact_stream(data)
