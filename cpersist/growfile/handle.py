"""``cpersist.open(path, "a")`` of a growing object file: a
:class:`~cpersist.FileHandle` that also appends rows to its arrays, replaces
them, assigns to parts of them and changes the object's non-array part,
each change one commit."""

import os

from ..container import ContainerReader
from ..container.frames import GROWING, OBJECT_MINOR
from ..container.layout import HEADER, MAGIC
from ..filehandle import FileHandle
from ..lazy.array import LazyArray
from ..lazy.openfile import OpenFile, reference_for
from ..storage.open import open_source
from .writer import GrowingWriter


def is_growing_object(path):
    """Whether the local file at ``path`` is a growing object file (its
    header says so; the rest is checked when it is opened)."""
    try:
        with open(path, "rb") as file:
            head = file.read(HEADER.size)
    except OSError:
        return False
    if len(head) < HEADER.size or head[:len(MAGIC)] != MAGIC:
        return False
    _, major, minor, flags = HEADER.unpack(head)
    return major == 2 and minor == OBJECT_MINOR and bool(flags & GROWING)


class GrowingFile(FileHandle):
    """A growing object file open for changing: made by
    ``cpersist.open(path, "a")``, it holds the writers' lock until closed.

    It reads as a :class:`~cpersist.FileHandle` (:attr:`arrays`,
    :meth:`load`) the file's last commit, its own changes included. Lazy
    arrays taken before a change read the state they were taken from until
    the handle reads the new one (:attr:`arrays`, :meth:`load`): then an
    array the change left as it was reads on, and a changed one raises
    :class:`~cpersist.FileChangedError` (take it again from
    :attr:`arrays`).
    """

    def __init__(self, path, writer, trusted, verify, n_threads, limits):
        self._path = path
        self._writer = writer
        self._stale = False  # a change was committed since the state was read
        self._numbers = {}  # key -> section number: changes keep the numbers
        super().__init__(self._state(), trusted, verify, n_threads)
        self._limits = limits

    def __repr__(self):
        state = "closed" if self._closed else "open for changing"
        return f"<cpersist.GrowingFile {self.name!r} ({state})>"

    def _state(self):
        """The file's last commit, opened for reading."""
        source = open_source(self._path, what="source")
        try:
            reader = ContainerReader(source, whole=True)
        except BaseException:
            source.close()
            raise
        return OpenFile(reader, reference_for(source, whole=True), True)

    def _moved_on(self):
        """Note a commit: the state is read again when next read (not at
        every append, which would cost a read of the index each)."""
        self._stale = True

    def _reader(self):
        if self._stale and not self._closed:
            self._stale = False
            old, self._file = self._file, self._state()
            self._lazy, self._arrays = {}, None
            old.close()
        return super()._reader()

    @property
    def arrays(self):
        """As :attr:`FileHandle.arrays`, of the last commit."""
        self._reader()
        return super().arrays

    def close(self):
        """Release the lock and close the file."""
        writer, self._writer = getattr(self, "_writer", None), None
        if writer is not None:
            writer.close()
        super().close()

    def _section_of(self, key):
        if self._writer is None or self._closed:
            raise ValueError(f"{self.name}: the growing file is closed")
        number = self._numbers.get(key)
        if number is not None:
            return number
        found = self.arrays[key]
        if not isinstance(found, LazyArray):
            raise TypeError(f"{self.name}: {key} is a torch tensor viewing a stored storage, "
                            f"which other tensors may view too: only an array stored as a "
                            f"section of its own grows or is replaced")
        number = self._numbers[key] = found._index
        return number

    def append(self, key, rows):
        """Append ``rows`` to the array at ``key``: along its first axis if
        it is stored in C order, its last if in F order.

        The rows are stored after what the file holds, as chunks of their
        own compressed as the array is (or raw), then committed: nothing
        stored is rewritten, and a process killed at any moment leaves the
        file as it was before or after. The cost does not grow with the
        file.

        Parameters
        ----------
        key : str
            The array's path, as in :attr:`arrays` (``"obj['x']"``).
        rows : array_like
            Of the array's shape but along that axis, and of its dtype (or
            one that casts to it safely).

        Raises
        ------
        ValueError
            For rows of another shape; TypeError for another dtype.
        ArrayNotFoundError
            For a key that is not an array of the file.
        """
        self._writer.append_rows(self._section_of(key), rows)
        self._moved_on()

    def replace(self, key, array):
        """Store ``array`` (any shape, dtype and order) in place of the
        array at ``key``, compressed as that one was (or raw). One commit;
        the old array's bytes stay in the file, superseded, until
        :func:`cpersist.compact` reclaims them."""
        self._writer.replace(self._section_of(key), array)
        self._moved_on()

    def assign(self, key, index, value):
        """Set ``array[index] = value`` in the array at ``key``, as numpy
        would, rewriting only the stored chunks that hold the elements
        ``index`` selects.

        Those chunks are read, patched, compressed as the array is (or
        raw) and written after what the file holds, then committed: the
        other chunks stay where they are, and a process killed at any
        moment leaves the file as it was before or after.

        Parameters
        ----------
        key : str
            The array's path, as in :attr:`arrays` (``"obj['x']"``).
        index : int, slice, Ellipsis, None or tuple of them
            A basic numpy index, as in ``array[index]``.
        value : array_like
            Broadcast to the shape ``array[index]`` has; of the array's
            dtype or one of the same kind (float64 to float32), converted.

        Raises
        ------
        IndexError
            For an index out of the array's bounds; TypeError for an index
            that is not basic or a value of another kind; ValueError for a
            value that does not broadcast.
        ArrayNotFoundError
            For a key that is not an array of the file.
        """
        self._writer.assign(self._section_of(key), index, value)
        self._moved_on()

    def replace_object(self, obj):
        """Store ``obj`` as the file's object, its arrays left where they
        are stored: the non-array part (settings, names, metadata) changes,
        no array is rewritten.

        Take the object with :meth:`load` ``(lazy=True)``, change it and
        give it back: each :class:`~cpersist.LazyArray` of the file in it is
        stored as a reference to its stored array. One commit.

        Parameters
        ----------
        obj : object
            Holding every array the file holds, as the lazy arrays of its
            last commit (anywhere in the object); other numpy arrays only
            as small as a dump keeps in its pickle stream.

        Raises
        ------
        ValueError
            For an object that leaves out an array the file holds (dump it
            again instead), or holds a lazy array of another file or state.
        TypeError
            For an object holding a larger array the file does not hold
            (:meth:`replace` stores arrays).
        """
        self._reader()  # the last commit's state, whose lazy arrays obj holds
        current, name = self._file, self.name

        def reference(x):
            if not isinstance(x, LazyArray):
                return None
            if x._file is not current:
                raise ValueError(f"{name}: the new object holds a lazy array of another file, "
                                 f"or of a state before a change: take the object again with "
                                 f"load(lazy=True)")
            return x._index

        self._writer.replace_object(obj, reference)
        self._moved_on()

    def update(self, key, value):
        """Set ``obj[key] = value`` in the file's object, a dict, without
        rewriting its arrays: :meth:`replace_object` of the object with that
        entry changed. ``value`` holds no array the file holds nor a large
        new one; an entry holding an array is changed with :meth:`replace`.

        Raises
        ------
        TypeError
            If the file's object is not a dict, or ``value`` holds a large
            array.
        ValueError
            If the entry ``key`` holds an array the file holds.
        """
        obj = self.load(lazy=True)
        if not isinstance(obj, dict):
            raise TypeError(f"{self.name}: update changes an entry of a dict; the file holds "
                            f"a {type(obj).__name__}: use replace_object")
        obj[key] = value
        self.replace_object(obj)

    @property
    def torn_bytes(self):
        """Bytes a change killed midway had left after the last commit,
        cut off when the file was opened."""
        return self._writer.cut_bytes if self._writer is not None else 0


def open_growing(path, trusted, verify, n_threads, limits, *, fsync=False, timeout=None,
                 chunk_size=None):
    """The :class:`GrowingFile` of ``cpersist.open(path, "a")``."""
    writer = GrowingWriter(path, n_threads=n_threads, chunk_size=chunk_size, fsync=fsync,
                           timeout=timeout)
    try:
        return GrowingFile(os.fsdecode(path), writer, trusted, verify, n_threads, limits)
    except BaseException:
        writer.close()
        raise
