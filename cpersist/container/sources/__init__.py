"""Byte sources: what the container reader reads a file's bytes through.

One module per kind of source, all implementing
:class:`~.abc.ByteSource`: :mod:`.local` (a local regular file, ``pread``
and ``mmap`` on its descriptor), :mod:`.fileobj` (any seekable file object,
through its methods), :mod:`.memory` (a bytes-like object) and
:mod:`.spooled` (a non-seekable stream copied to a temporary file);
:mod:`.ranges` and :mod:`.streaming` plan and stream the range requests of
sources in remote storage (:mod:`cpersist.storage.fsspec.read`).
:mod:`cpersist.storage.open` turns what the user passes to ``load`` into
one of them.
"""

import os

from ..files import is_seekable, local_file
from .abc import ByteSource, ShortReadError
from .fileobj import FileObjectSource
from .local import LocalFileSource
from .memory import MemorySource
from .spooled import SpooledSource

__all__ = ["ByteSource", "ShortReadError", "FileObjectSource", "LocalFileSource",
           "MemorySource", "SpooledSource", "source_for"]


def source_for(file, name, owned=False):
    """The byte source reading ``file`` from its position to its end.

    A plain local file (:func:`cpersist.container.files.local_fd`) is read with
    ``pread`` and can be mapped; any other seekable file object is read
    through its methods; a non-seekable one is spooled first. A bytes-like
    object is read in place.
    """
    if isinstance(file, (bytes, bytearray, memoryview)):
        return MemorySource(file, name)
    if not is_seekable(file):
        return SpooledSource(file, name, owned)
    found = local_file(file)
    if found is not None and hasattr(os, "preadv"):  # Windows has no pread
        fd, file_size = found
        return LocalFileSource(file, name, fd, owned, file_size=file_size)
    return FileObjectSource(file, name, owned)
