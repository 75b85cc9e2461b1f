"""The abstract byte source: what the container reader reads through.

A byte source is a read-only, random-access run of bytes with a name. The
reader asks it for ranges by offset (relative to the start of the cpersist
data, which need not be the start of the underlying file) and never seeks
or reads a file itself, so that a local file, a file object, a buffer in
memory or a remote object can each be read the way that suits it.
"""

from abc import ABC, abstractmethod
from contextlib import contextmanager

from ...exceptions import CorruptFileError


class ShortReadError(CorruptFileError):
    """The source ended before a range the reader asked for."""


class ByteSource(ABC):
    """A named, random-access run of bytes.

    Subclasses implement :attr:`size` and :meth:`read_into`; the other
    methods have defaults built on them.

    Attributes
    ----------
    name : str
        How the source is named in messages.
    base : int
        Where offset 0 lies in the underlying file (0 when there is none).
    concurrent : bool
        Whether :meth:`read_into` may be called from several threads at once
        and each call runs without waiting for the others (``pread``, memory).
    can_map : bool
        Whether :meth:`map` can return a memory map.
    writable : bool
        Whether a map for writing (``'r+'``) reaches the file.
    not_mapped : str or None
        Why a load asked to map its arrays reads them instead, in the
        warning that says so; None: nothing to say (a byte source the
        caller made, or a path that opens as no plain file on Windows).
    remote : bool
        Whether each request costs a round trip (remote storage): the
        reader then asks for many ranges at once, through :meth:`iter_ranges`.
    whole : bool
        Whether the source holds one dump and nothing after it (a dump
        spooled from a stream, a remote object): the reader then finds the
        dump's end at the source's end, without walking its records, and
        reports any bytes after it as an error.
    reads_ahead : int or None
        How many bytes past a run of reads in order the system reads by
        itself (a local file's device read-ahead), or None where not known.
    """

    name = "<bytes>"
    base = 0
    end = None
    concurrent = False
    can_map = False
    not_mapped = None
    writable = False
    remote = False
    whole = False
    reads_ahead = None

    @property
    @abstractmethod
    def size(self):
        """Number of bytes in the source."""

    @abstractmethod
    def read_into(self, offset, buffer):
        """Fill the writable ``buffer`` with the bytes at ``offset``.

        Raises
        ------
        ShortReadError
            If the source ends before ``buffer`` is full; it names the source.
        """

    def read(self, offset, length):
        """The ``length`` bytes at ``offset``, as a bytes-like object."""
        buffer = bytearray(length)
        self.read_into(offset, buffer)
        return buffer

    def read_ranges(self, ranges):
        """The bytes of several ``(offset, length)`` ranges, in order.

        A list of bytes-like objects. This default reads them one by one; a
        source with a high latency per request merges and fetches them
        concurrently.
        """
        return [self.read(offset, length) for offset, length in ranges]

    def iter_ranges(self, ranges):
        """Yield the bytes of each ``(offset, length)`` range, in order.

        This default reads them one by one; a remote source fetches them in
        batches and fetches the next batch while the caller works on this
        one.
        """
        for offset, length in ranges:
            yield self.read(offset, length)

    def map(self, offset, length, mode):
        """Memory-map ``length`` bytes at ``offset``, or return None.

        ``mode`` is ``'r'`` (read-only), ``'r+'`` (writes reach the source)
        or ``'c'`` (copy-on-write). Returns ``(mmap, start)``: the bytes are
        ``mmap[start:start + length]``. This default cannot map.
        """
        return None

    def page_phase(self, offset, length):
        """Where within a page of the file the ``length`` bytes at ``offset``
        start, when :meth:`read_into` copies them into memory through the
        kernel (a ``pread``), whose speed then depends on where that memory
        starts (:func:`cpersist._runtime.pages.aliased`), and they are
        enough for it to matter; else None, as this default says."""
        return None

    def will_read_all(self):
        """Note that the caller is about to read the whole dump, roughly in
        file order (a load), before anything has been read.

        A remote source may then fetch the object by one streamed request
        rather than range by range. This default does nothing.
        """

    def will_need(self, offset, length):
        """Note that the ``length`` bytes at ``offset`` are read soon: a
        source that can fetch them in the background starts to, so that
        the read finds them fetched. This default does nothing.
        """

    def mark_end(self, size):
        """Note that the dump read through this source ends ``size`` bytes
        in (the reader finds it in the dump's header or records).

        A source over a caller's file object leaves the file positioned
        there when closed, so the next read gets what follows the dump.
        """
        self.end = size

    @contextmanager
    def locked(self, shared=False, timeout=None):
        """Hold an advisory lock on the underlying file for the ``with``
        block: exclusive for a change made in place, ``shared`` to read
        what such a change leaves whole. Yields whether the lock is held;
        this default locks nothing (a source with no local file)."""
        yield False

    def refresh(self):
        """Take the source's size again (a change in place may have cut or
        extended the file). This default does nothing."""

    def close(self):
        """Release what the source holds (not a file object it was given)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def fill(self, offset, buffer, read_some):
        """Fill ``buffer`` with the bytes at ``offset`` by calling
        ``read_some(view)`` until it is full; ``read_some`` reads into the
        memoryview it is given and returns how many bytes it read (0 at the
        end, which raises :class:`ShortReadError`). ``read_into`` of a
        source whose reads may come back short is this loop."""
        view = memoryview(buffer).cast("B")
        wanted = len(view)
        got = 0
        while got < wanted:
            n = read_some(view[got:])
            if not n:
                raise self.short_read(offset, wanted, got)
            got += n

    def short_read(self, offset, wanted, got):
        """The :class:`ShortReadError` for a read that came back short."""
        return ShortReadError(
            f"{self.name}: truncated: wanted {wanted} bytes at offset {self.base + offset}, "
            f"got {got}")

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r}, {self.size} bytes>"
