"""Fetching and decoding the chunks a lazy read needs: the stored bytes of a
slice's chunks fetched together from remote storage (neighbours in one
request) when they are few, the parts of chunks stored as is read without
the rest, and read buffers taken from and given back to the pool.
"""

from .._runtime.parallel import COPY_ALONE_BELOW
from ..container import READ_BUFFERS, VERBATIM
from ..container.sources import ShortReadError

#: From remote storage, the stored bytes of the chunks one index touches are
#: fetched together (neighbours in one request) when they total at most
#: this; beyond, each chunk is fetched when decoded, so memory stays bounded.
FETCH_TOGETHER_UP_TO = 16 << 20


class _ChunkParts:
    """Reads parts of the chunks of one section for one slice.

    ``spans`` maps each chunk to read to the array's bytes ``(a, b)``,
    counted in stored order, wanted from it (their union, if several parts
    of it are read). From a remote source, what those need of each chunk's
    bytes in the file is fetched at once (neighbouring ranges in one
    request); each part is then checked and decoded with no more of its
    chunk than the codec must decode.
    """

    def __init__(self, bound, verify, spans):
        reader, section = self.reader, self.section = bound.reader, bound.section
        self.starts = bound.starts
        self.spans = spans
        # A raw array changed through a writable map has no checksums to hold
        # (ContainerReader.unchecked): only its selected bytes are read.
        self.verify = verify and not reader.unchecked(section)
        self.direct_raw = section.is_raw and not self.verify
        chunks = section.chunks
        self._stored = max(chunks[i].length for i in spans)
        self._whole = max(chunks[i].raw_length for i in spans)
        ranges = {i: self._stored_range(i, a, b) for i, (a, b) in spans.items()}
        got = _fetch_together(reader, section, sorted(spans),
                              lambda i: (chunks[i].offset + ranges[i][0],
                                         ranges[i][1] - ranges[i][0]))
        self._fetched = {i: (ranges[i][0], data) for i, data in got.items()}
        self._copy_only = ((self.direct_raw or all(chunks[i].flag == VERBATIM for i in spans))
                           and (not reader.source.remote or len(got) == len(spans)))
        self._read_bytes = sum(hi - lo for lo, hi in ranges.values())

    def threads(self, n_threads):
        """How many threads to read with, at most ``n_threads``: one when
        the reading is only copying (chunks local or already fetched) fewer
        than :data:`~cpersist._runtime.parallel.COPY_ALONE_BELOW` bytes."""
        if self._copy_only and self._read_bytes < COPY_ALONE_BELOW:
            return 1
        return n_threads

    def _stored_range(self, i, a, b):
        """``(lo, hi)``: the bytes of chunk ``i`` in the file, from its
        start, that reading the array's bytes ``a:b`` needs. Only those of a
        verbatim chunk read unchecked, the pieces holding them of one with
        piece checksums, else all of it."""
        start = int(self.starts[i])
        chunk = self.section.chunks[i]
        if self.direct_raw:
            return a - start, b - start
        if self.verify and chunk.flag == VERBATIM and b - a < chunk.raw_length:
            span = self.reader.piece_range(self.section, i, a - start, b - a)
            if span is not None:
                return span
        return 0, chunk.length

    def buffers(self):
        """A thread's buffers for :meth:`read`: taken when first needed."""
        return [None, None]

    def give_back(self, held):
        for buffer in held:
            if buffer is not None:
                READ_BUFFERS.give(buffer)

    def read(self, i, a, b, target, held):
        """Read the array's bytes ``a:b``, all in chunk ``i``, into
        ``target``, with the calling thread's buffers ``held``."""
        reader, section = self.reader, self.section
        start, end = int(self.starts[i]), int(self.starts[i + 1])
        got = self._fetched.get(i)
        if got is not None:
            # The fetch covered the union of the chunk's parts, so it holds
            # the range this part needs.
            origin, data = got
            lo, hi = self._stored_range(i, a, b)
            got = memoryview(data)[lo - origin:hi - origin]
        if self.direct_raw:
            if got is None:
                _read_raw(reader, section, i, a - start, target)
            else:
                target[:] = got
            return
        if held[0] is None and section.chunks[i].flag != VERBATIM and got is None:
            held[0] = READ_BUFFERS.take(self._stored)
        if (a, b) == (start, end):
            reader.read_chunk_into(section, i, target, held[0], verify=self.verify, stored=got)
            return
        if held[1] is None:
            held[1] = READ_BUFFERS.take(self._whole)
        # Part of a chunk: the codec decodes no more than it must.
        reader.read_chunk_into(section, i, target, held[0], verify=self.verify, stored=got,
                               skip=a - start, whole=memoryview(held[1])[:end - start])


def _fetch_together(reader, section, indices, needed):
    """``{i: bytes}`` of the chunks ``indices`` of ``section``, ``needed(i)``
    giving the ``(offset, length)`` to fetch of each, fetched together from
    a remote source (neighbouring ranges merged into one request), or ``{}``
    to read each as it is decoded: from a local file, for a single chunk, or
    for more than :data:`FETCH_TOGETHER_UP_TO` bytes."""
    if not reader.source.remote or len(indices) < 2:
        return {}
    ranges = [needed(i) for i in indices]
    if sum(length for _, length in ranges) > FETCH_TOGETHER_UP_TO:
        return {}
    try:
        return dict(zip(indices, reader.source.read_ranges(ranges)))
    except ShortReadError:
        raise reader.error(f"truncated in section {section.index}") from None


def _read_raw(reader, section, i, skip, target):
    """Read part of verbatim chunk ``i``, from ``skip`` bytes in, unchecked."""
    try:
        reader.source.read_into(section.chunks[i].offset + skip, target)
    except ShortReadError:
        raise reader.error(f"truncated in section {section.index}, chunk {i}") from None
