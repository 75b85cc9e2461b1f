"""Reading part of a section: the chunks a slice needs, and within a chunk
stored as is only the pieces it needs, each checked against its own
checksum (format 2.1) or the whole chunk's. A mixin of
:class:`.reader.ContainerReader`.
"""

from ..exceptions import CorruptFileError
from .layout import VERBATIM, checksum, checksum_state
from .sources import ShortReadError

#: When only part of a chunk stored as is is wanted, the rest of it is read
#: this many bytes at a time into the same piece of scratch memory, which
#: stays in the CPU's cache to be checksummed there: the bytes not wanted
#: never go out to main memory.
PASS_THROUGH = 256 << 10


class PieceReads:
    """Partial reads of :class:`~.reader.ContainerReader`."""

    def _read_verbatim_part(self, section, i, skip, out, whole):
        """Part of a chunk stored as is, checked: the part is read straight
        into ``out``. With checksums of the chunk's pieces, only the pieces
        it touches are read, their bytes outside the part into ``whole``;
        else the rest of the chunk passes through ``whole`` for the chunk's
        checksum."""
        chunk = section.chunks[i]
        pieces = section.pieces(i)
        start = chunk.offset
        if pieces is None:
            runs = [(start, start + chunk.length, chunk.checksum, "")]
        else:
            size = section.piece_size
            runs = [(start + k * size, min(start + (k + 1) * size, start + chunk.length),
                     pieces[k], f", piece {k}")
                    for k in range(skip // size, (skip + len(out) - 1) // size + 1)]
        for lo, hi, digest, piece in runs:
            try:
                matches = self._checked_run(lo, hi, digest, out, start + skip, memoryview(whole))
            except ShortReadError:
                raise self.error(f"truncated in section {section.index}, chunk {i}") from None
            if not matches:
                raise self.error(f"checksum mismatch in section {section.index}, chunk {i}"
                                 f"{piece}: damaged data")

    def piece_range(self, section, i, skip, n):
        """``(lo, hi)``: the bytes of verbatim chunk ``i`` (from its start)
        that the pieces holding its bytes ``skip:skip + n`` span, or None if
        the chunk has no piece checksums."""
        if section.pieces(i) is None or n <= 0:
            return None
        size = section.piece_size
        return (skip // size * size,
                min(section.chunks[i].length, -(-(skip + n) // size) * size))

    def _read_pieces_at_once(self, section, i, span, skip, out, whole, stored):
        """Part of a verbatim chunk from the pieces that hold it, read in one
        request into ``whole`` (or given as ``stored``), checked piece by
        piece."""
        chunk = section.chunks[i]
        lo, hi = span
        data = stored
        if data is None:
            data = memoryview(whole)[:hi - lo]
            try:
                self.source.read_into(chunk.offset + lo, data)
            except ShortReadError:
                raise self.error(f"truncated in section {section.index}, chunk {i}") from None
        view = memoryview(data)
        size = section.piece_size
        bad = _bad_piece(section.pieces(i), size, view, lo, range(lo // size, -(-hi // size)))
        if bad is not None:
            raise self.error(f"checksum mismatch in section {section.index}, chunk {i}, "
                             f"piece {bad}: damaged data")
        out[:] = view[skip - lo:skip - lo + len(out)]

    def _checked_run(self, lo, hi, digest, out, at, scratch):
        """Read the bytes ``lo:hi``, those from ``at`` on into ``out`` (as far
        as it goes), the others through ``scratch``'s first
        :data:`PASS_THROUGH` bytes; whether their checksum is ``digest``."""
        state = checksum_state()
        into_from = min(max(lo, at), hi)
        into_to = min(max(lo, at + len(out)), hi)
        for a, b, into_out in ((lo, into_from, False), (into_from, into_to, True),
                               (into_to, hi, False)):
            position = a
            while position < b:
                view = (out[position - at:b - at] if into_out
                        else scratch[:min(b, position + PASS_THROUGH) - position])
                self.source.read_into(position, view)
                state.update(view)
                position += len(view)
        return state.intdigest() == digest

    def read_chunk_into(self, section, i, out, buffer, *, verify=True, stored=None, skip=0,
                        whole=None):
        """Read chunk ``i`` of ``section``, check it and decode it into ``out``.

        ``out`` is writable bytes of the chunk's ``raw_length``; ``buffer``
        holds at least its stored length (an encoded chunk is read there). A
        verbatim chunk is read straight into ``out``. ``stored``, if given,
        is the chunk's stored bytes already fetched (with its neighbours),
        checked and decoded instead of reading them. Errors name the chunk,
        for readers of a few chunks of a section.

        With ``whole`` (writable bytes of the chunk's ``raw_length``, free
        to overwrite), ``out`` receives only the decoded bytes ``skip:skip +
        len(out)``, and the codec decodes no more of the chunk than it must.

        Raises
        ------
        CorruptFileError
        """
        chunk = section.chunks[i]
        part = whole is not None
        verify = verify and not self.unchecked(section)
        if part and chunk.flag == VERBATIM and verify:
            if stored is None and not self.source.remote:  # remote: one request, not three
                self._read_verbatim_part(section, i, skip, out, whole)
                return
            span = self.piece_range(section, i, skip, len(out))
            if span is not None and (stored is None or len(stored) == span[1] - span[0]):
                self._read_pieces_at_once(section, i, span, skip, out, whole, stored)
                return
        if stored is not None:
            data = stored
        else:
            data = (out if chunk.flag == VERBATIM and not part
                    else memoryview(whole if chunk.flag == VERBATIM else buffer)[:chunk.length])
            try:
                self.source.read_into(chunk.offset, data)
            except ShortReadError:
                raise self.error(f"truncated in section {section.index}, chunk {i}") from None
        if verify and checksum(data) != chunk.checksum:
            raise self.error(
                f"checksum mismatch in section {section.index}, chunk {i}: damaged data")
        if chunk.flag == VERBATIM:
            if part:
                out[:] = data[skip:skip + len(out)]
            elif stored is not None:
                out[:] = data
            return
        try:
            if part:
                section.codec.decode_part_into(data, skip, out, whole)
            else:
                section.codec.decode_into(data, out)
        except CorruptFileError as exc:
            raise self.error(f"section {section.index}, chunk {i}: {exc}") from None

    def _check_pieces(self, section, i, data):
        """Check the checksums of chunk ``i``'s pieces against its bytes."""
        pieces = section.pieces(i)
        if pieces is None or self.unchecked(section):
            return
        bad = _bad_piece(pieces, section.piece_size, memoryview(data), 0, range(len(pieces)))
        if bad is not None:
            raise self.error(f"checksum mismatch in section {section.index}, chunk {i}, "
                             f"piece {bad}: the index does not match the data")


def _bad_piece(pieces, size, view, origin, numbers):
    """The first of the pieces ``numbers`` whose bytes in ``view`` (which
    starts at byte ``origin`` of the chunk) do not have the checksum
    ``pieces`` gives, or None."""
    for k in numbers:
        if checksum(view[k * size - origin:(k + 1) * size - origin]) != pieces[k]:
            return k
    return None
