"""Dump targets on this machine: a file object, written from its position
(what a failed dump wrote taken back: :class:`FileTarget`), and a buffer in
memory (:class:`BytesTarget`); a path's is :class:`.atomic.AtomicFile`.
:func:`cpersist.storage.targets.open_dump_target` picks one (or a remote one).

A target gives the dump writer a binary file object to stream into
(:meth:`file`) or takes a whole dump made in memory (:meth:`write_whole`),
and, as a context manager, completes the file or removes what was written.
"""

import io
import os

from .files import appends, display_name, is_seekable, local_file, write_all


class FileTarget:
    """A file object, written from where its next ``write`` puts bytes
    (see :func:`start_file_dump`); a dump that fails is taken back where
    the file object can say where its end is."""

    def __init__(self, file, name=None):
        self._file = file
        self.name = display_name(file) if name is None else name
        own = getattr(file, "name", None)
        self.names = [own] if isinstance(own, str) else []
        self._take_back = start_file_dump(file)

    def file(self):
        """The binary file object to write the dump into."""
        return self._file

    def write_whole(self, data):
        """Write ``data``, a whole dump made in memory."""
        write_all(self._file, data, self.name)

    def __enter__(self):
        return self

    def __exit__(self, kind, exc, traceback):
        if kind is not None and self._take_back is not None:
            self._take_back()
        return False


class BytesTarget:
    """A dump made as ``bytes`` (:func:`cpersist.dumps`): :meth:`getvalue`."""

    names = []

    def __init__(self, name):
        self.name = name
        self._out = self._whole = None

    def file(self):
        if self._out is None:
            self._out = io.BytesIO()
        return self._out

    def write_whole(self, data):
        self._whole = data

    def getvalue(self):
        """The dump (a BytesIO hands over its own buffer: no copy)."""
        return self._whole if self._out is None else self._out.getvalue()


def start_file_dump(file):
    """Check that a dump can be written at ``file``'s position, before a
    byte is; return a function that removes what a dump that failed wrote
    there, or None where nothing written can be taken back.

    A dump goes where the next ``write`` puts its bytes: the end of the
    file in append mode (``'ab'``, ``'a+b'``, a descriptor opened with
    :data:`os.O_APPEND`), else the position. Bytes after the position (a
    file opened ``'r+b'``, or sought back) are someone's data: they are
    never overwritten. A file object that cannot say where its end is (a
    pipe, a socket, a compressing file) is written where it is, and what a
    failed dump wrote to it stays there.

    Raises
    ------
    UnwritableTargetError
        If ``file`` is positioned before its end, not in append mode.
    """
    local = local_file(file)
    fd = None if local is None else local[0]
    try:
        if fd is not None:
            if appends(file, fd):
                file.flush()  # the caller's own bytes go first
                position = end = os.fstat(fd).st_size
            else:
                position = file.tell()
                end = local[1]
        elif is_seekable(file):
            position = file.tell()
            end = file.seek(0, io.SEEK_END)
            if appends(file):
                position = end
            else:
                file.seek(position)
        else:
            return None
    except (AttributeError, OSError, ValueError):
        return None  # no end to find (gzip.GzipFile writing): written where it is
    if type(position) is not int or type(end) is not int:
        return None
    if position < end:
        from ..exceptions import UnwritableTargetError

        raise UnwritableTargetError(
            f"{display_name(file)}: the file object is at byte {position} of {end}: a dump "
            f"there would overwrite the {end - position} bytes after it. Seek to the end "
            f"(file.seek(0, 2)) to add the dump after them, truncate the file there "
            f"(file.truncate()) to replace them, or open it with 'ab' or 'wb'")

    def take_back():
        try:
            file.seek(position)  # after what is still buffered is written
            file.truncate()
        except (OSError, ValueError):
            # The buffer cannot be written (a full disk). A closed file's
            # descriptor may be another file's by now.
            if fd is not None and not file.closed:
                try:
                    os.ftruncate(fd, position)
                except OSError:
                    pass

    return take_back


