"""Remote objects reopened: a :class:`RemoteReference` reopens the same
version of an object in another process (a dask worker). Telling a URL from
a path and resolving it is :mod:`.urls`; opening any
source, :mod:`cpersist.storage.open`.
"""

import sys

from .urls import resolve
from ...exceptions import FileChangedError, RemoteStorageError


def open_remote(url, storage_options=None):
    """The byte source of the remote object ``url`` names.

    Raises
    ------
    FileNotFoundError
        If there is no such object (naming it).
    """
    from .read import FsspecSource  # imports concurrent.futures: only for remote objects

    fs, path, name = resolve(url, storage_options)
    return FsspecSource(fs, path, name, storage_options, url=url)


def reopen(url, storage_options, identity):
    """The byte source of the object a source's ``reopen_spec()`` describes,
    in another process (a dask worker, say).

    Raises
    ------
    FileChangedError
        If the object at ``url`` is not that version any more: it was
        replaced, as a local file rewritten under a lazy array would be.
    """
    source = open_remote(url, storage_options)
    try:
        # check_identity compares what the source already looked up (no
        # request), so the error it raises can only mean another version.
        source.check_identity(identity)
    except BaseException:
        source.close()
        raise
    return source


class RemoteReference:
    """A remote object by URL, storage options and version (see
    :mod:`cpersist.lazy.openfile`); opening it refuses a replaced object."""

    __slots__ = ("url", "storage_options", "identity")

    def __init__(self, url, storage_options, identity):
        self.url = url
        self.storage_options = storage_options
        self.identity = identity

    @property
    def key(self):
        return ("url", self.url, repr(sorted(self.storage_options.items())),
                self.identity["etag"], self.identity["size"])

    @property
    def name(self):
        return self.url

    def open(self):
        return reopen(self.url, self.storage_options, self.identity)

    def still_names(self, source):
        """Whether the URL still names the version ``source`` reads (one
        request: the object may have been replaced since)."""
        from .read import FsspecSource

        try:
            source.check_identity(FsspecSource(source.fs, source.path, self.url).identity)
        except (OSError, RemoteStorageError, FileChangedError):
            return False
        return True

    def __reduce__(self):
        return RemoteReference, (self.url, self.storage_options, self.identity)

    def __repr__(self):
        return f"RemoteReference({self.url!r})"


def reference_of(source):
    """The :class:`RemoteReference` of an :class:`~.fsspec.FsspecSource`
    opened from a URL, else None."""
    fsspec = sys.modules.get(f"{__package__}.read")  # no remote source before it is imported
    if fsspec is not None and isinstance(source, fsspec.FsspecSource) and source.url is not None:
        return RemoteReference(*source.reopen_spec())
    return None
