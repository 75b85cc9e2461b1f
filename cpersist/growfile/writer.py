"""Changing a growing object file (format 2.4, made by ``dump(obj, path,
growing=True)``): :class:`GrowingWriter` appends rows to its arrays,
replaces them, rewrites the chunks an assignment touches and stores a new
pickle stream for the object, each change one commit.

A writer holds the file's exclusive advisory lock from before it looks at
the file's end to after its last write (an open writer until it is closed),
so that two writers are never interleaved; it cuts off a torn tail (what a
change killed midway left) before writing. Nothing committed is rewritten:
memory maps and readers of the state before a commit stay valid.
"""

import os

import numpy as np

from .._runtime.locks import lock_for_writing
from .._runtime.threads import default_n_threads
from ..codecs import codec_from_config
from ..container import ContainerReader
from ..container.frames import OBJECT_FILE_START, OBJECT_FRAMES_AT, last_commit
from ..container.sources import source_for
from ..exceptions import CorruptFileError, UnwritableTargetError
from ..pickling.read import array_layout
from ..pickling.write import array_store
from ..container.commits import CommitWriter, read_index
from .changes import (as_rows, checked_replacement, checked_rows, checked_value, joined_entry,
                      placed_rows, selected_part, spliced_entry, stored_layout,
                      verbatim_entry)

_OPEN = os.O_RDWR | getattr(os, "O_CLOEXEC", 0)


class GrowingWriter:
    """A growing object file open for changing, its lock held until
    :meth:`close`.

    Parameters
    ----------
    path : str or os.PathLike
        A growing object file.
    n_threads, chunk_size : as in :func:`cpersist.dump`
        For the chunks of appended rows and replacing arrays.
    fsync : bool
        Flush each commit to disk before it returns.
    timeout : float, optional
        Seconds to wait for another writer's lock; default: as long as it
        takes.

    Attributes
    ----------
    end : int
        Where the last commit ends (the file's committed size).
    cut_bytes : int
        Bytes of torn tail cut off when the file was opened.
    """

    def __init__(self, path, *, n_threads=None, chunk_size=None, fsync=False, timeout=None):
        from ..container import DEFAULT_CHUNK_SIZE

        self.name = os.fsdecode(path)
        self._path = path
        self._n_threads = n_threads or default_n_threads()
        self._chunk_size = chunk_size or DEFAULT_CHUNK_SIZE
        self._fsync = bool(fsync)
        self.cut_bytes = 0
        self._fd = None
        self._layouts = {}  # section number -> (dtype, shape, order, nbytes)
        fd = _locked_descriptor(path, self.name, timeout)
        try:
            self._read_state(fd)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._file = open(fd, "r+b", buffering=1 << 20, closefd=False)

    def _read_state(self, fd):
        """Check the file, cut its torn tail, read its last commit's index."""
        size = os.fstat(fd).st_size

        def read(offset, length):
            return os.pread(fd, length, offset)

        head = read(0, OBJECT_FRAMES_AT)
        if head != OBJECT_FILE_START:
            raise UnwritableTargetError(
                f"{self.name}: not a growing object file: make one with "
                f"cpersist.dump(obj, path, growing=True)" + _what_it_is(head))
        end = last_commit(read, size)
        if end is None:
            raise CorruptFileError(f"{self.name}: a growing file with no complete commit")
        # The state as every reader reads it, its index and chunk tables
        # checked before anything is written from them.
        with open(fd, "rb", closefd=False) as file:
            reader = ContainerReader(source_for(file, self.name), self.name, whole=True)
            for section in reader.sections:
                section.chunks  # noqa: B018 - checks the chunk table
                if section.index != reader.root:
                    array_layout(reader, section, resolve=False)
        self._reader = reader
        self._root, self._sections, self._info = read_index(read, end, self.name)
        if end < size:
            os.ftruncate(fd, end)
            if self._fsync:
                os.fsync(fd)
            self.cut_bytes = size - end
        self.end = end

    @property
    def closed(self):
        return self._fd is None

    def close(self):
        """Release the lock and the file."""
        fd, self._fd = self._fd, None
        if fd is not None:
            self._file.close()
            os.close(fd)

    def __del__(self):
        self.close()

    def _check_open(self):
        if self._fd is None:
            raise ValueError(f"{self.name}: the growing file is closed")

    def _array_section(self, number):
        entry = self._sections[number]
        meta = entry.get("meta", {})
        if number == self._root or meta.get("kind") != "array":
            raise ValueError(f"{self.name}: section {number} holds no array")
        return entry

    def _commit(self, add):
        """One commit: ``add(writer)`` writes the new chunks and returns the
        new section list, the state from then on. A commit that fails is cut
        back: the file is as before."""
        start = self.end
        try:
            writer = CommitWriter(self._file, start, self._n_threads, self.name, self._fsync)
            sections = [verbatim_entry(entry) for entry in add(writer)]
            writer.finish(self._root, self._info, sections)
            end = writer.commit()
        except BaseException:
            try:
                self._file.flush()  # nothing buffered may land after the cut
            except OSError:
                pass  # written later, it lands after the last commit: a torn tail
            os.ftruncate(self._fd, start)
            self._file.seek(start)
            raise
        self.end = end
        self._sections = sections

    def append_rows(self, number, rows):
        """Append ``rows`` to the array of section ``number``: along its
        first axis (C order) or last axis (F order). One commit."""
        self._check_open()
        entry = self._array_section(number)
        meta = entry["meta"]
        dtype, shape, order, _ = stored_layout(self, number)
        rows = checked_rows(self.name, meta.get("path", f"<section {number}>"), rows, dtype,
                         shape, order)
        n_new = rows.shape[-1] if order == "F" else rows.shape[0]
        grown = list(shape)
        grown[-1 if order == "F" else 0] += n_new
        codec = array_codec(entry["codec"])

        def add(writer):
            sections = list(self._sections)
            if rows.size:
                added = writer.section_entry(array_store(writer, codec, self._chunk_size)(rows))
                merged = joined_entry(entry, added)
            else:
                merged = dict(entry)
            new_meta = dict(meta, shape=grown)
            new_meta.pop("rows_per_chunk", None)  # batches of any size: chunks differ
            merged["meta"] = new_meta
            sections[number] = merged
            return sections

        self._commit(add)
        self._layouts.pop(number, None)

    def replace(self, number, array):
        """Replace the array of section ``number`` with ``array`` (any
        shape, dtype and order), stored with the same codec. One commit; the
        old array's bytes are superseded (``cpersist compact`` reclaims them)."""
        self._check_open()
        entry = self._array_section(number)
        array = checked_replacement(self.name, entry["meta"].get("path", f"<section {number}>"), array)
        codec = array_codec(entry["codec"])

        def add(writer):
            sections = list(self._sections)
            new = dict(writer.section_entry(array_store(writer, codec, self._chunk_size)(array)))
            path = entry["meta"].get("path")
            if path is not None:
                new["meta"] = dict(new["meta"], path=path)
            sections[number] = new
            return sections

        self._commit(add)
        self._layouts.pop(number, None)

    def assign(self, number, index, value):
        """Set ``array[index] = value`` in the array of section ``number``,
        ``index`` a basic index (integers, slices, ``...``, ``None``). Only
        the stored chunks holding the elements it selects are read, patched,
        encoded with the array's codec and written again; the new index
        points at them in their place. One commit."""
        self._check_open()
        entry = self._array_section(number)
        path = entry["meta"].get("path", f"<section {number}>")
        dtype, shape, order, _ = stored_layout(self, number)
        offset, window_shape, window_strides, lo, hi = selected_part(self.name, path, dtype, shape,
                                                                  order, index)
        value = checked_value(self.name, path, value, dtype, window_shape)
        if lo == hi:
            return  # selects nothing: nothing changes
        rows = placed_rows(entry)
        starts = np.cumsum([0] + [row[1] for row in rows])
        first = int(np.searchsorted(starts, lo, side="right")) - 1
        last = int(np.searchsorted(starts, hi, side="left")) - 1
        begin, end = int(starts[first]), int(starts[last + 1])
        patched = bytearray(end - begin)
        buffer = bytearray(max(row[0] for row in rows[first:last + 1]))
        # The chunks are read, and checked, through a descriptor of its own:
        # the writer's position in the file stays where it is.
        with open(self._path, "rb") as file:
            reader = ContainerReader(source_for(file, self.name), self.name, whole=True)
            section = reader.sections[number]
            for i in range(first, last + 1):
                part = memoryview(patched)[starts[i] - begin:starts[i + 1] - begin]
                reader.read_chunk_into(section, i, part, buffer)
        window = np.ndarray(window_shape, dtype, buffer=patched, offset=offset - begin,
                            strides=window_strides)
        np.copyto(window, value, casting="same_kind")
        del window
        data = as_rows(np.frombuffer(patched, dtype), shape, order)
        codec = array_codec(entry["codec"])

        def add(writer):
            sections = list(self._sections)
            written = writer.section_entry(array_store(writer, codec, self._chunk_size)(data))
            sections[number] = spliced_entry(entry, rows, first, last, written)
            return sections

        self._commit(add)
        self._layouts.pop(number, None)

    def replace_object(self, obj, reference):
        """Store ``obj`` as the file's object in place of the one stored,
        its arrays stored already: ``reference(x)`` gives the section number
        of ``x``, a lazy array of the last commit, or None for anything
        else. Other arrays small enough go in the pickle stream, as a dump
        keeps them; a larger one is refused, as is an object that leaves out
        an array the file holds. One commit; no array is rewritten."""
        from ..container import EncodedStream
        from ..pickling.array_pickler import ArrayPickler
        from ..pickling.rebuild import stored_array
        from ..pickling.unpicklable import PICKLING_ERRORS, unpicklable_error
        from ..pickling.write import PICKLE_CHUNK_SIZE, inline_below_for

        self._check_open()
        root = self._sections[self._root]
        codec = None if root["codec"] is None else codec_from_config(root["codec"])
        protocol = self._info.get("protocol", 5)
        name, used = self.name, set()

        def store(arr, favour_speed=False):
            raise _Refused(TypeError(
                f"{name}: the new object holds an array of {arr.nbytes:,} bytes that the file "
                f"does not hold: replace_object keeps the arrays stored; store a new one with "
                f"replace, or dump the object again"))

        class Referencing(ArrayPickler):
            def reducer_override(self, x):
                try:
                    number = reference(x)
                except ValueError as exc:
                    raise _Refused(exc) from None
                if number is not None:
                    used.add(number)
                    return stored_array, (number,)
                return super().reducer_override(x)

        stream = EncodedStream(codec, min(self._chunk_size, PICKLE_CHUNK_SIZE), self._n_threads)
        # Small arrays stay in the stream, no buffer blocks: a commit's
        # sections are kept or replaced one by one, and a block would tie
        # arrays of unrelated changes together (format 2.4 has none).
        pickler = Referencing(stream, protocol, store, inline_below_for(codec, self._chunk_size))
        try:
            pickler.dump(obj)
        except _Refused as refused:
            raise refused.error from None
        except PICKLING_ERRORS as exc:
            error = unpicklable_error(obj, protocol, exc)
            if error is None:
                raise
            raise error from exc
        left_out = [entry["meta"].get("path", f"<section {number}>")
                    for number, entry in enumerate(self._sections)
                    if number != self._root and number not in used]
        if left_out:
            raise ValueError(f"{name}: the new object leaves out {', '.join(left_out)}, which "
                             f"the file holds: replace_object keeps every array stored (hold "
                             f"it in the object, or dump the object again without it)")
        encoded = stream.encoded_chunks()

        def add(writer):
            sections = list(self._sections)
            sections[self._root] = writer.section_entry(
                writer.add_encoded_section(encoded, codec=codec, meta={"kind": "pickle"}))
            return sections

        self._commit(add)

    @property
    def fd(self):
        """The file's descriptor (for :func:`.compact.compact`, which reads it)."""
        return self._fd

    @property
    def reader(self):
        """The reader of the last commit when the file was opened."""
        return self._reader


def array_codec(config):
    """The codec that writes a growing file's array chunks of the codec
    ``config`` (None: raw): the codec itself, also trying the byte shuffle
    alone (:meth:`~cpersist.codecs.Codec.trying_shuffle_alone`), the
    smaller form where rows are much like the rows before them but
    neighbouring values are not close. A plain dump's chunks keep the
    forms they have, so that its bytes stay those earlier versions write."""
    return None if config is None else codec_from_config(config).trying_shuffle_alone()


class _Refused(Exception):
    """Carries an error of ours out of the pickler, past its own handling
    of what cannot be pickled."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


def _locked_descriptor(path, name, timeout):
    """A descriptor of the file at ``path``, its exclusive lock held. If the
    path was renamed over (a compaction) while waiting, the new file is
    opened and locked instead."""
    while True:
        try:
            fd = os.open(path, _OPEN)
        except FileNotFoundError:
            raise FileNotFoundError(f"{name}: no such growing file; make one with "
                                    f"cpersist.dump(obj, path, growing=True)") from None
        try:
            lock_for_writing(fd, timeout, name, "the growing file", "changing it")
            here, now = os.fstat(fd), os.stat(path)
            if (here.st_dev, here.st_ino) == (now.st_dev, now.st_ino):
                return fd
        except FileNotFoundError:
            pass
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # compacted meanwhile: lock the file the path names now


def _what_it_is(head):
    from ..container.frames import FILE_START, FRAMES_AT
    from ..container.layout import MAGIC

    if len(head) >= FRAMES_AT and head[:FRAMES_AT] == FILE_START:
        return " (this is a record log: cpersist.append adds records to it)"
    if head[:len(MAGIC)] == MAGIC:
        return " (this is a dump: load it and dump it again with growing=True)"
    return " (this is not a cpersist file)"
