"""Where a load reads from: any path, URL, ``(file system, path)`` pair,
:class:`fsspec.core.OpenFile`, fsspec file or file object, told apart in
one pass (:func:`locate`), for :func:`cpersist.storage.open.open_source`
to build the byte source from.
"""

import os

from .._runtime.files import display_name, is_seekable, is_writable, local_fd
from .fsspec.urls import is_filesystem, is_remote, is_url, protocols_of, resolve

#: The kinds of :class:`Location`.
REMOTE, FSSPEC_FILE, STREAM, LOCAL_FILE, FILE_OBJECT, OTHER = (
    "remote", "fsspec file", "stream", "local file", "file object", "other")


class Location:
    """What :func:`locate` finds a source to be.

    Attributes
    ----------
    kind : str
        :data:`REMOTE` (an object in remote storage: ``fs``, ``path``,
        ``name``, and ``url`` when a URL named it), :data:`FSSPEC_FILE` (an
        fsspec file open for reading at its start: ``fs``, ``path``,
        ``file``), :data:`STREAM` (a file object that cannot seek: a pipe),
        :data:`LOCAL_FILE` (a plain local file: ``fd``), :data:`FILE_OBJECT`
        (any other that seeks) or :data:`OTHER` (no file object at all).
    file : file object
        For the last four; a path is opened (``owned``: to be closed by
        whoever reads it).
    name : str
        For messages.
    writable : bool
        Whether the file object may be written (asked for with ``mmap_mode='r+'``).
    """

    __slots__ = ("kind", "fs", "path", "name", "url", "file", "fd", "owned", "writable")

    def __init__(self, kind, name, *, fs=None, path=None, url=None, file=None, fd=None,
                 owned=False, writable=True):
        self.kind = kind
        self.name = name
        self.fs = fs
        self.path = path
        self.url = url
        self.file = file
        self.fd = fd
        self.owned = owned
        self.writable = writable


def locate(obj, storage_options=None, mmap_mode=None):
    """The :class:`Location` of ``obj``; a local path (a ``file://`` URL's
    included) is opened, ``'r+b'`` for ``mmap_mode='r+'`` (so that the map
    is made from the very descriptor whose index is read).

    Raises
    ------
    ImportError
        For a URL when fsspec (or the package of its protocol) is missing.
    OSError
        If a path cannot be opened.
    """
    if is_remote(obj):
        fs, path, name = resolve(obj, storage_options)
        if fs is not None:
            return Location(REMOTE, name, fs=fs, path=path, url=obj if is_url(obj) else None)
        obj = path  # a file:// URL
    if isinstance(obj, (str, os.PathLike)):
        file = open(obj, "r+b" if mmap_mode == "r+" else "rb")
        try:
            return _file_location(file, display_name(obj), True, mmap_mode)
        except BaseException:
            file.close()
            raise
    file_system = getattr(obj, "fs", None)
    if (file_system is not None and getattr(obj, "mode", None) == "rb"
            and isinstance(getattr(obj, "path", None), str) and is_filesystem(file_system)
            and "file" not in protocols_of(file_system) and obj.tell() == 0):
        # Read by ranges: its own reads would cost a request per read-ahead block.
        return Location(FSSPEC_FILE, None, fs=file_system, path=obj.path, file=obj)
    if not hasattr(obj, "read"):
        return Location(OTHER, display_name(obj))
    return _file_location(obj, display_name(obj), False, mmap_mode)


def _file_location(file, name, owned, mmap_mode):
    if not is_seekable(file):
        return Location(STREAM, name, file=file, owned=owned)
    fd = local_fd(file)
    if fd is None or not hasattr(os, "preadv"):  # Windows has no pread
        return Location(FILE_OBJECT, name, file=file, owned=owned)
    return Location(LOCAL_FILE, name, file=file, fd=fd, owned=owned,
                    writable=mmap_mode != "r+" or owned or is_writable(file))
